"""Fault matrix, the manager itself: signalled, its pod deleted with grace period 0, restarted with the same
job name. The manager runs as the real CLI (`distributetrain run`) in a subprocess against the local
cluster."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from localcluster import TestCluster
from reliability_support import (
    IMAGE,
    Factory,
    ManagerProcess,
    chief_runs_forever,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    manager_pod,
    pods_of,
    running_job,
    wait_until,
)

from distributetrain.request.jobspec import ManagerIdentity

ARGS = ("--gpus", "6", "--image", IMAGE, "--job-name", "train", "--schedule-timeout", "20s")


def _owner_env(owner: ManagerIdentity) -> dict[str, str]:
    return {"DT_MANAGER_POD_NAME": owner.name, "DT_MANAGER_POD_UID": owner.uid,
            "DT_MANAGER_NAMESPACE": "default"}


def _training(cluster: TestCluster, manager: ManagerProcess) -> None:
    kube = kube_of(cluster)
    wait_until(lambda: running_job(kube, "train", workers=1), timeout=60,
               message="the job to be training:\n" + manager.output)
    manager.wait_for("supervising job train", timeout=30)
    time.sleep(0.3)


def test_manager_sigterm(local_cluster_factory: Factory, managers: list[ManagerProcess],
                         row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerProcess(cluster, *ARGS)
    managers.append(manager)
    _training(cluster, manager)

    fault_at = manager.signal(signal.SIGTERM)
    code = manager.wait()
    ended = time.monotonic()

    assert code == 143, manager.output
    detected = manager.first(r"failed \(received SIGTERM\)")
    assert detected is not None, manager.output
    assert "deleting all it created" in manager.output
    left = leftovers(kube, "train")
    assert left == {}, left  # interrupted: the chief goes too, nothing is kept
    after = free_gpus(kube)
    assert after == before
    row("manager receives SIGTERM", outcome=f"exit {code}", exit_code=code,
        detect_s=round(detected - fault_at, 3), cleanup_s=round(ended - detected, 3),
        objects_left=count(left), gpus_held=held(before, after))


def test_manager_pod_deleted_with_grace_0(local_cluster_factory: Factory, managers: list[ManagerProcess],
                                         row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    owner = manager_pod(kube)
    before = free_gpus(kube)
    manager = ManagerProcess(cluster, *ARGS, env=_owner_env(owner))
    managers.append(manager)
    _training(cluster, manager)
    for kind, names in leftovers(kube, "train").items():
        for name in names:
            refs = kube.get(kind, "default", name)["metadata"]["ownerReferences"]  # type: ignore[index]
            assert [r["uid"] for r in refs] == [owner.uid], (kind, name)

    # what `kubectl delete pod distributetrain-manager --grace-period=0 --force` does: the pod object goes
    # at once and the kubelet kills the container, which gets no chance to clean up
    fault_at = time.monotonic()
    kube.delete("pods", "default", owner.name, grace_seconds=0)
    manager.kill()
    # the garbage collector deletes every object the manager pod owned
    left = wait_until(lambda: (not leftovers(kube, "train") and free_gpus(kube) == before) or None,
                      timeout=60, every=0.05, message="the garbage collector to delete the job")
    cleaned = time.monotonic()
    left = leftovers(kube, "train")
    assert left == {}
    assert kube.get("pods", "default", owner.name) is None
    row("manager pod deleted, grace 0", outcome="GC deleted the job", exit_code=None,
        detect_s=0.0, cleanup_s=round(cleaned - fault_at, 3), objects_left=count(left),
        gpus_held=held(before, free_gpus(kube)), notes="manager killed with its pod; ownerReferences")


def test_manager_restarted_adopts_the_running_job(local_cluster_factory: Factory,
                                                   managers: list[ManagerProcess],
                                                   row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    owner = manager_pod(kube)
    before = free_gpus(kube)
    first = ManagerProcess(cluster, *ARGS, env=_owner_env(owner))
    managers.append(first)
    _training(cluster, first)
    uids = {n: p["metadata"]["uid"] for n, p in pods_of(kube, "train").items()}

    # the manager's container crashes and its pod restarts it (same pod, same uid): no cleanup ran
    first.kill()
    restarted_at = time.monotonic()
    second = ManagerProcess(cluster, *ARGS, env=_owner_env(owner))
    managers.append(second)
    adopted = second.wait_for("adopting the job train, running", timeout=30)
    second.wait_for("supervising job train", timeout=30)
    time.sleep(0.3)
    # adopted, not duplicated: the very same pods, nothing new
    assert {n: p["metadata"]["uid"] for n, p in pods_of(kube, "train").items()} == uids
    assert sorted(leftovers(kube, "train")) == ["configmaps", "networkpolicies", "poddisruptionbudgets",
                                                "pods", "secrets"]

    cluster.call(cluster.runtime.exit_container("default", "train-chief", 0))  # type: ignore[attr-defined]
    code = second.wait()
    assert code == 0, second.output
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    row("manager restarted, same job name, job still running", outcome="adopted, exit 0", exit_code=code,
        detect_s=round(adopted - restarted_at, 3), cleanup_s=None, objects_left=count(left) - 1,
        gpus_held=held(before, after), notes="same pods (uids unchanged); chief kept")


def test_manager_restarted_cleans_a_dead_job(local_cluster_factory: Factory, managers: list[ManagerProcess],
                                             row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    first = ManagerProcess(cluster, *ARGS)
    managers.append(first)
    _training(cluster, first)
    old = {n: p["metadata"]["uid"] for n, p in pods_of(kube, "train").items()}
    first.kill()
    # while no manager watches, the chief fails: the old job is over but its workers still hold GPUs
    cluster.call(cluster.runtime.exit_container("default", "train-chief", 1))  # type: ignore[attr-defined]

    restarted_at = time.monotonic()
    second = ManagerProcess(cluster, *ARGS)
    managers.append(second)
    cleaned = second.wait_for(r"found \d+ object\(s\) of an earlier", timeout=30)
    _training(cluster, second)
    new = {n: p["metadata"]["uid"] for n, p in pods_of(kube, "train").items()}
    assert sorted(new) == sorted(old) and not set(new.values()) & set(old.values())  # replaced, once
    cluster.call(cluster.runtime.exit_container("default", "train-chief", 0))  # type: ignore[attr-defined]
    code = second.wait()
    assert code == 0, second.output
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    row("manager restarted, same job name, old job dead", outcome="cleaned and re-ran, exit 0",
        exit_code=code,
        detect_s=round(cleaned - restarted_at, 3), cleanup_s=None, objects_left=count(left) - 1,
        gpus_held=held(before, after), notes="old objects deleted before the new gang; chief kept")


def test_second_manager_refuses_a_job_run_by_a_live_manager(local_cluster_factory: Factory,
                                                           managers: list[ManagerProcess],
                                                           row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    owner = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b")
    first = ManagerProcess(cluster, *ARGS, env=_owner_env(owner))
    managers.append(first)
    _training(cluster, first)
    uids = {n: p["metadata"]["uid"] for n, p in pods_of(kube, "train").items()}

    second = ManagerProcess(cluster, *ARGS, env=_owner_env(other))
    managers.append(second)
    code = second.wait(timeout=60)
    assert code == 2, second.output
    assert "job_name" in second.output and "manager-a" in second.output
    # the running job is untouched
    assert {n: p["metadata"]["uid"] for n, p in pods_of(kube, "train").items()} == uids
    assert first.proc.poll() is None
    first.signal(signal.SIGTERM)
    assert first.wait() == 143
    assert leftovers(kube, "train") == {}
    row("a second manager with the same job name while the first runs", outcome="refused, exit 2",
        exit_code=code, objects_left=0, gpus_held=0, notes="the live job is untouched")
