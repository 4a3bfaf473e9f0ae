"""observer.py without a cluster: the chief's log moves the phase and the progress; a hook that fails never
raises into the job, and says so once."""

from __future__ import annotations

import io
import os
import signal
from typing import Any

import pytest

from distributetrain.errors import Interrupted
from distributetrain.manager import signals
from distributetrain.observe import jobstate, metrics
from distributetrain.observe.observer import Observer
from distributetrain.request.jobspec import ManagerIdentity


def observer() -> Observer:
    state = jobstate.initial(job="j", namespace="d", gpus=2, phase=jobstate.LAUNCHING)
    return Observer(None, state, stream=io.StringIO(), chief_stream=io.StringIO())


def test_the_chief_log_moves_the_job_to_running_and_reports_progress() -> None:
    seen = observer()
    seen.chief_line(b"[0]<stdout>:dt-progress epoch=0/3 step=1")  # progress before the launcher's line
    assert seen.state.phase == "Running" and seen.state.first_step_at is not None
    seen.chief_line(b"launcher 2026-11-24 12:00:00,000 INFO starting: horovodrun -np 2 x")
    seen.chief_line(b"[0]<stdout>:dt-progress epoch=1/3 step=9 loss=0.5")
    seen.finished(0, "")
    seen.chief_line(b"[0]<stdout>:dt-progress epoch=2/3 step=18")  # after the end: the phase stays
    seen.close()
    assert seen.state.phase == "Succeeded" and seen.state.progress is not None
    assert (seen.state.progress.epoch, seen.state.progress.loss) == (2, 0.5)
    # the chief's lines are still copied unchanged
    assert seen.chief_stream.getvalue().count("dt-progress") == 3


def test_a_hook_that_fails_never_raises_and_is_said_once() -> None:
    seen = observer()
    seen.pods_ready([None])  # type: ignore[list-item]  # on purpose: a hook that fails
    seen.pod_created({"metadata": None})
    seen.failed(RuntimeError("x"))  # the cleanup guard's hook still works after
    seen.close()
    log = seen.stream.getvalue()
    assert log.count("could not record the step") == 1, log
    assert "could not record the step pods_ready (AttributeError" in log
    assert seen.state.phase == "Failed"


class SignalledWhileRead(dict[str, Any]):
    """A pod whose reading is where SIGTERM lands: the signal arrives while a hook runs."""

    def get(self, key: str, default: Any = None) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return super().get(key, default)


def test_a_signal_during_a_hook_is_not_swallowed() -> None:
    # found by make test on a fresh clone: SIGTERM landing in the pod_created hook was said as "could not
    # record the step" and the manager went on waiting for its gang instead of cleaning up
    seen = observer()
    pod = SignalledWhileRead(metadata={"name": "j-worker-0", "namespace": "d", "uid": "u"},
                             spec={"nodeName": "node-1"})
    with signals.raising_interrupted(), pytest.raises(Interrupted, match="received SIGTERM"):
        seen.pod_created(pod)
    seen.close()
    assert "could not record the step" not in seen.stream.getvalue()


class Recording(Observer):
    """An Observer that keeps the Events it would send."""

    events: list[tuple[str, str, str]]

    def _event(self, ref: Any, reason: str, message: str, *, type: str = "Normal") -> None:
        self.events.append((reason, type, message))


def fabric_observer(fabric: str) -> Recording:
    state = jobstate.replace(jobstate.initial(job="j", namespace="d", gpus=16, phase=jobstate.LAUNCHING),
                             fabric=fabric)
    manager = ManagerIdentity(name="manager", uid="u", namespace="d")
    seen = Recording(None, state, manager=manager, stream=io.StringIO(), chief_stream=io.StringIO())
    seen.events = []
    return seen


def test_the_transport_nccl_chose_is_a_log_line_an_event_and_a_metric_label() -> None:
    seen = fabric_observer("efa")
    # aws-ofi-nccl's and NCCL's lines as they reach the chief's log (NVIDIA/nccl#1597's, behind Gloo's prefix)
    seen.chief_line(b"[0]<stdout>:job-chief:6831:6840 [0] NCCL INFO NET/OFI Selected Provider is efa "
                    b"(found 4 nics)")
    seen.chief_line(b"[0]<stdout>:job-chief:6831:6840 [0] NCCL INFO Using network Libfabric")
    seen.chief_line(b"[8]<stdout>:job-worker-0:7310:7318 [0] NCCL INFO Using network Libfabric")
    # said once a pod
    seen.chief_line(b"[0]<stdout>:job-chief:6831:6841 [0] NCCL INFO Using network Libfabric")
    seen.close()
    log = seen.stream.getvalue()
    assert "NCCL transport on pod job-chief: NET/OFI (provider efa); the fabric efa was asked" in log
    assert "NCCL transport on pod job-worker-0: NET/OFI; the fabric efa was asked" in log
    assert log.count("NCCL transport on pod") == 2
    assert seen.events == [("NcclTransport", "Normal",
                            "NCCL chose NET/OFI (provider efa) on pod job-chief; the fabric efa was asked")]
    assert seen.state.transports == (("job-chief", "NET/OFI"), ("job-worker-0", "NET/OFI"))
    samples = [s for family in metrics.families(seen.state)
               if family.name == "distributetrain_nccl_transport" for s in family.samples]
    labelled = [(s.labels["transport"], s.labels["fabric"], s.value) for s in samples]
    assert labelled == [("NET/OFI", "efa", 2.0)]
    assert jobstate.loads(jobstate.dumps(seen.state)) == seen.state  # PostTraining's process reads it back


def test_sockets_where_the_fabric_was_asked_is_a_warning_naming_the_pod() -> None:
    seen = fabric_observer("efa")
    seen.chief_line(b"[0]<stdout>:job-chief:1:2 [0] NCCL INFO Using network Libfabric")
    seen.chief_line(b"[8]<stdout>:job-worker-1:101542:101542 [0] NCCL INFO NET/Socket : Using "
                    b"[0]eth0:10.1.2.3<0>")
    seen.chief_line(b"[8]<stdout>:job-worker-1:101542:101542 [0] NCCL INFO Using network Socket")
    seen.close()
    (reason, _, message), = [e for e in seen.events if e[1] == "Warning"]
    assert reason == "NcclTransport"
    assert message.startswith("NCCL chose NET/Socket ([0]eth0:10.1.2.3<0>) on pod job-worker-1; the fabric "
                              "efa was asked: NCCL uses NET/Socket")
    assert "FABRIC=efa" in seen.stream.getvalue()


def test_without_a_fabric_sockets_are_no_warning() -> None:
    seen = fabric_observer("")
    seen.chief_line(b"[0]<stdout>:job-chief:1:2 [0] NCCL INFO Using network Socket")
    seen.close()
    assert seen.events == [("NcclTransport", "Normal",
                            "NCCL chose NET/Socket on pod job-chief; no fabric was asked (TCP)")]
