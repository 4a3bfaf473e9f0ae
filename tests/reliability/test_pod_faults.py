"""Fault matrix, pods and nodes (simulated kubelets): a worker or the chief dies, or the node under it fails,
mid-training. The user checks the manager's exit code, that its log names the pod and the cause, that nothing
of the job is left (but a kept chief) and that every GPU is free again."""

from __future__ import annotations

import time
from collections.abc import Callable

from localcluster import TestCluster
from reliability_support import (
    Factory,
    ManagerThread,
    chief_runs_forever,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    running_job,
    spec,
    wait_until,
)

from distributetrain import naming
from distributetrain.manager.posttraining import failed_rank


def _start(cluster: TestCluster, **fields: str) -> tuple[ManagerThread, dict[str, int]]:
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube_of(cluster), spec(**fields)).start()
    # 6 GPUs on 5,3,2: worker-0 with 5 on node-1, the chief with 1 on node-3
    wait_until(lambda: running_job(kube, "train", workers=1) and "supervising" in manager.recorder.text,
               timeout=30, message="the job to be training")
    time.sleep(0.3)  # the supervisor's watch is established
    return manager, before


def _finish(cluster: TestCluster, manager: ManagerThread, row: Callable[..., object], name: str,
            fault_at: float, before: dict[str, int], *, kept: dict[str, list[str]]) -> None:
    code = manager.join()
    kube = kube_of(cluster)
    left = leftovers(kube, "train")
    assert left == kept, left
    after = free_gpus(kube)
    assert after == before, (before, after)
    detected = manager.recorder.first(r"failed \(|ended with exit code")
    assert detected is not None and manager.ended_at is not None
    row(name, outcome=f"exit {code}", exit_code=code, detect_s=round(detected - fault_at, 3),
        cleanup_s=round(manager.ended_at - detected, 3), objects_left=count(left) - count(kept),
        gpus_held=held(before, after))


def test_worker_killed(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    manager, before = _start(cluster)
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.exit_container("default", "train-worker-0", 137))  # type: ignore[attr-defined]
    _finish(cluster, manager, row, "worker's container killed (SIGKILL, 137)", fault_at, before, kept={})
    assert manager.code == 70
    assert "train-worker-0" in manager.message and "node-1" in manager.message
    assert "exited with code 137" in manager.message
    assert "worker failed" in manager.recorder.text


def test_chief_killed(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    manager, before = _start(cluster)
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.exit_container("default", "train-chief", 137))  # type: ignore[attr-defined]
    # the chief's own exit code is the job's: a user sees 137 (killed) and the log it left
    _finish(cluster, manager, row, "chief's container killed (SIGKILL, 137)", fault_at, before,
            kept={"pods": ["train-chief"]})
    assert manager.code == 137
    assert "chief train-chief ended with exit code 137" in manager.recorder.text
    assert "epoch 1 loss 0.9" in manager.recorder.chief_out.getvalue()


def test_chief_pod_deleted(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    manager, before = _start(cluster)
    fault_at = time.monotonic()
    kube_of(cluster).delete("pods", "default", "train-chief", grace_seconds=0)
    _finish(cluster, manager, row, "chief pod deleted by someone", fault_at, before, kept={})
    assert manager.code == 75
    assert "train-chief" in manager.message


def test_chief_node_fails(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    manager, before = _start(cluster)
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.fail_node("node-3"))
    _finish(cluster, manager, row, "chief's node fails", fault_at, before, kept={})
    assert manager.code == 75
    assert "train-chief" in manager.message and "NodeLost" in manager.message
    assert "node-3" in manager.message


def test_worker_node_fails(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    manager, before = _start(cluster)
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.fail_node("node-1"))
    _finish(cluster, manager, row, "worker's node fails", fault_at, before, kept={})
    assert manager.code == 70
    assert "train-worker-0" in manager.message and "node-1" in manager.message
    assert "NodeLost" in manager.message


def test_worker_pod_deleted(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    manager, before = _start(cluster)
    fault_at = time.monotonic()
    kube_of(cluster).delete("pods", "default", "train-worker-0")
    _finish(cluster, manager, row, "worker pod deleted by someone", fault_at, before, kept={})
    assert manager.code == 70
    assert "train-worker-0" in manager.message


def test_failed_rank_is_named_by_pod_and_node() -> None:
    """The launcher knows a failed rank only by its pod IP; the manager's line names the pod and node."""
    pods = {"train-worker-0": {"metadata": {"labels": {naming.ROLE_LABEL: naming.ROLE_WORKER}},
                               "spec": {"nodeName": "node-1"}, "status": {"podIP": "10.244.1.2"}},
            "train-chief": {"metadata": {"labels": {naming.ROLE_LABEL: naming.ROLE_CHIEF}},
                            "spec": {"nodeName": "node-3"}, "status": {"podIP": "10.244.3.2"}}}
    lines = [b"[1]<stderr>: Killed", b"Process name: 1", b"Exit code: 255",
             b"launcher 2026-11-22 02:45:59,662 ERROR rank 1 on 10.244.1.2 exited with 255; the training"]
    assert failed_rank(lines, pods) == \
        "rank 1 on worker train-worker-0, node node-1, 10.244.1.2, exited with 255"
    assert failed_rank([b"rank 0 on 10.244.3.2 exited with 1"], pods) == \
        "rank 0 on chief train-chief, node node-3, 10.244.3.2, exited with 1"
    assert failed_rank([b"rank 2 on 10.9.9.9 exited with 1"], pods) == "rank 2 on 10.9.9.9 exited with 1"
    assert failed_rank([b"epoch=3 loss=0.1"], pods) is None
