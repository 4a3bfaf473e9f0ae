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
from distributetrain.observe import jobstate
from distributetrain.observe.observer import Observer


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
