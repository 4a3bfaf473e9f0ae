"""The job as a Kubernetes user sees it, through real kubectl: Events for each step on the object concerned
(`kubectl describe`, `kubectl get events`), the manager pod's phase label (`kubectl get pod -L`) and its
annotations (GPUs, plan, progress); none of it ever fails the job (docs/observability.md)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from localcluster import Behavior, TestCluster, wait_until
from manager_support import is_chief, is_worker
from visibility_support import MANAGER, observed_job

from distributetrain import naming
from distributetrain.manager.orchestrator import Orchestrator
from distributetrain.observe import jobstate, metrics

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(180)
# what a chief writes: its launcher starting the user's command, then the training's progress lines
CHIEF_LOG = ("launcher 2026-11-24 12:00:00,000 INFO waiting for 1 workers' sshd on port 2222: 10.244.1.2\n"
             "launcher 2026-11-24 12:00:01,000 INFO starting: horovodrun -np 6 python3 Train.py\n"
             "[0]<stdout>:dt-progress epoch=0/2 step=1\n"
             "[0]<stdout>:epoch=1 accuracy=0.7000 loss=0.9000\n"
             "[0]<stdout>:dt-progress epoch=1/2 step=7 accuracy=0.7000 loss=0.9000 steps_per_s=12.5\n"
             "[0]<stdout>:dt-progress epoch=2/2 step=14 accuracy=0.9500 loss=0.2000 steps_per_s=14.0\n")


def run_in_thread(orchestrator: Orchestrator) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["code"] = orchestrator.run()
        except BaseException as err:  # the test asserts on it
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def phase_column(cluster: TestCluster) -> str:
    """The PHASE column of `kubectl get job distributetrain-manager -L distributetrain.io/phase`."""
    done = cluster.kubectl("get", "job", MANAGER, "-L", naming.PHASE_LABEL)
    header, row = done.stdout.splitlines()
    assert header.split()[-1] == "PHASE", done.stdout
    return row.split()[-1]


def events_of(cluster: TestCluster, name: str) -> list[dict[str, Any]]:
    done = cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json")
    assert done.returncode == 0, done.stderr
    return sorted(json.loads(done.stdout)["items"], key=lambda e: e["metadata"]["name"])


def ours(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in events
            if e["source"].get("component") == naming.EVENT_COMPONENT]


def test_describe_get_events_and_the_phase_column_show_the_job(local_cluster_factory: Factory,
                                                               tmp_path: Path) -> None:
    cluster = local_cluster_factory(behaviors=[(is_chief, Behavior(log=CHIEF_LOG, exit_code=0,
                                                                   exit_after=4.0))])
    orchestrator, observer = observed_job(cluster, tmp_path, "vis")
    thread, outcome = run_in_thread(orchestrator)
    # while it trains: the phase column, and the progress in the annotations
    wait_until(lambda: phase_column(cluster) == "Running", timeout=60, interval=0.2, what="phase Running")
    running = json.loads(cluster.kubectl("get", "job", MANAGER, "-o", "json").stdout)["metadata"]
    assert running["annotations"][naming.JOB_GPUS_ANNOTATION] == "6 requested, 6 held"
    assert running["annotations"][naming.PLAN_ANNOTATION] == "5 on node-1, 1 on node-3 (chief)"
    thread.join(60)
    observer.close()
    assert outcome == {"code": 0}
    assert phase_column(cluster) == "Succeeded"

    described = cluster.kubectl("describe", "job", MANAGER).stdout
    assert "distributetrain.io/phase=Succeeded" in described
    assert ("distributetrain.io/progress: epoch 2 of 2, step 14, loss 0.2000, accuracy 0.9500, 14.0 steps/s"
            in described), described
    assert "distributetrain.io/job-gpus: 6 requested, 0 held" in described
    reached = running["annotations"][naming.PHASE_TIMES_ANNOTATION]
    times = [part.split(" +")[0] for part in reached.split(", ")]
    assert times == ["Planning", "Scheduling", "Launching", "Running"]
    # the Events section, as describe prints it: type, reason, age, from, message
    for reason, message in [
            ("Planned", "6 GPU(s) as 5 on node-1, 1 on node-3; chief 1 on node-3"),
            ("TrainingStarted", "the chief's launcher started the training over 6 process(es)"),
            ("TrainingSucceeded", "the training succeeded; epoch 2 of 2, step 14, loss 0.2000"),
            ("CleanedUp", "deleted 5 object(s) of job vis; kept vis-chief for its log; every GPU is "
                          "released")]:
        assert any(line.split()[:2] == ["Normal", reason] and naming.EVENT_COMPONENT in line
                   and message in line for line in described.splitlines()), (reason, described)

    worker = ours(events_of(cluster, "vis-worker-0"))
    assert [r for _, r, _ in worker] == ["WorkerCreated", "WorkerReady"]
    assert worker[0][2] == "created for job vis, pinned to node-1 with 5 GPUs"
    assert worker[1][2].startswith("Running and Ready on node-1 at 10.244.1.")
    chief = ours(events_of(cluster, "vis-chief"))
    assert [r for _, r, _ in chief] == ["ChiefCreated", "ChiefStarted"]
    (hostfile,) = ours(events_of(cluster, "vis-hostfile"))
    assert hostfile[1] == "HostfileWritten" and hostfile[2].endswith(" slots=5")
    # the events of the workers outlive them, beside the scheduler's and the kubelet's
    assert "Scheduled" in [e["reason"] for e in events_of(cluster, "vis-worker-0")]

    state = jobstate.loads((tmp_path / "state.json").read_text())
    assert state.phase == "Succeeded" and state.exit_code == 0 and state.held == 0
    assert [n for n, _ in state.reached] == list(naming.PHASES[:5])
    assert state.first_step_at is not None and state.progress is not None and state.progress.epoch == 2


def test_a_replan_says_why_and_is_counted(local_cluster_factory: Factory, tmp_path: Path) -> None:
    first_worker = iter([True])

    def never_ready_once(pod: dict[str, Any]) -> bool:
        return is_worker(pod) and next(first_worker, False)

    cluster = local_cluster_factory(behaviors=[
        (never_ready_once, Behavior(ready=False)),
        (is_chief, Behavior(log=CHIEF_LOG, exit_code=0, exit_after=0.5))])
    orchestrator, observer = observed_job(cluster, tmp_path, "again", schedule_timeout="2s",
                                      start_timeout="2s", retries="2")
    assert orchestrator.run() == 0
    observer.close()
    manager = ours(events_of(cluster, MANAGER))
    reasons = [r for _, r, _ in manager]
    assert reasons[:3] == ["Planned", "GangNotStarted", "Replanned"], manager
    gang = manager[1]
    assert gang[0] == "Warning" and "pod again-worker-0 on node node-1: running but not Ready" in gang[2]
    assert manager[2][2].startswith("attempt 2: 6 GPU(s) as 5 on node-1, 1 on node-3; chief 1 on node-3; "
                                    "the previous gang did not start: bound but not started within "
                                    "--start-timeout (2s): ")
    assert "again-worker-0 on node node-1" in manager[2][2]
    state = jobstate.loads((tmp_path / "state.json").read_text())
    assert state.replans == 1
    replans = next(f for f in metrics.families(state) if f.name == "distributetrain_replans")
    assert [s.value for s in replans.samples if s.name.endswith("_total")] == [1.0]


def test_a_failed_worker_is_named_on_its_pod_and_the_job_fails(local_cluster_factory: Factory,
                                                               tmp_path: Path) -> None:
    cluster = local_cluster_factory(behaviors=[
        (is_worker, Behavior(exit_code=137, exit_after=3.0)),
        (is_chief, Behavior(log=CHIEF_LOG, exit_code=None))])
    orchestrator, observer = observed_job(cluster, tmp_path, "broken")
    with pytest.raises(Exception) as caught:
        orchestrator.run()
    observer.close()
    assert getattr(caught.value, "exit_code", None) == 70
    (failed,) = [e for e in ours(events_of(cluster, "broken-worker-0")) if e[1] == "WorkerFailed"]
    assert failed[0] == "Warning"
    assert "pod broken-worker-0 on node node-1: container worker exited with code 137" in failed[2]
    manager = {r: (t, m) for t, r, m in ours(events_of(cluster, MANAGER))}
    assert manager["JobFailed"][0] == "Warning" and manager["JobFailed"][1].startswith("exit code 70: ")
    assert phase_column(cluster) == "Failed"


def test_events_and_labels_that_fail_never_fail_the_job(local_cluster_factory: Factory,
                                                        tmp_path: Path) -> None:
    cluster = local_cluster_factory(behaviors=[(is_chief, Behavior(log=CHIEF_LOG, exit_code=0,
                                                                   exit_after=0.5))])
    cluster.inject_fault(500, verb="create", resource="events", count=10_000)
    cluster.inject_fault(503, verb="patch", resource="jobs", count=10_000)
    orchestrator, observer = observed_job(cluster, tmp_path, "quiet")
    assert orchestrator.run() == 0
    observer.close()
    log = observer.stream.getvalue() if isinstance(observer.stream, io.StringIO) else ""
    assert log.count("not recorded") == 1, log
    assert log.count("are not shown on job default/distributetrain-manager") == 1, log
    assert ours(events_of(cluster, MANAGER)) == []
    # what could be written still was: the metrics' state
    assert jobstate.loads((tmp_path / "state.json").read_text()).phase == "Succeeded"
