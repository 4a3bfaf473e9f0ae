"""Fault matrix, what production clusters do to a job that plain clusters do not (issue 25): a slow first
image pull (not a scheduling failure: no re-plan), an image that cannot be pulled (the job ends at once,
with the kubelet's words), `kubectl drain` of a worker's node (refused by the job's PodDisruptionBudget;
without one, the eviction is named), and a graceful node shutdown (the kubelet's own reason named).
Simulated pods, the real manager (Orchestrator) in a thread, the local cluster's image pulls, eviction and
node shutdown as kube-apiserver and the kubelet do them."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from localcluster import PullTime
from reliability_support import (
    IMAGE,
    Factory,
    ManagerThread,
    chief_exits,
    chief_runs_forever,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    pods_of,
    running_job,
    spec,
    wait_until,
)

from distributetrain import naming
from distributetrain.errors import InvalidInput


def _worker_node(cluster_pods: dict[str, dict[str, object]]) -> str:
    worker = cluster_pods["train-worker-0"]
    return str(worker["spec"]["nodeName"])  # type: ignore[index]


def test_a_slow_first_image_pull_is_not_a_scheduling_failure(local_cluster_factory: Factory,
                                                              row: Callable[..., object]) -> None:
    """The pull takes longer than the whole --schedule-timeout: the gang is bound at once, so the schedule
    clock stops, and the start clock (--start-timeout) gives the pull its time; nothing is re-planned."""
    pull = 8.0
    cluster = local_cluster_factory(behaviors=[chief_exits(0, after=0.5)],
                                    pull_times=(PullTime(IMAGE.split(":")[0], pull),))
    kube = kube_of(cluster)
    before = free_gpus(kube)
    started = time.monotonic()
    manager = ManagerThread(kube, spec(schedule_timeout="3s")).start()
    code = manager.join()
    assert code == 0, manager.recorder.text
    assert len(manager.recorder.plans) == 1, manager.recorder.text  # one plan, no re-plan
    assert "re-plan" not in manager.recorder.text
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=train-worker-0",
                             "-o", "jsonpath={.items[*].message}").stdout
    assert f'Pulling image "{IMAGE}"' in events  # the kubelet really pulled, for longer than the timeout
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    row(f"first image pull of {pull:g} s, --schedule-timeout 3s", outcome="exit 0, no re-plan",
        exit_code=code, detect_s=None, cleanup_s=round(time.monotonic() - started, 3),
        objects_left=count(left) - 1, gpus_held=held(before, after),
        notes="the schedule clock stops at binding; --start-timeout (20m) covers pulls")


def test_an_image_that_cannot_be_pulled_ends_the_job_at_once(local_cluster_factory: Factory,
                                                             row: Callable[..., object]) -> None:
    """A typo in the image: ErrImagePull, then ImagePullBackOff. After 30 s of failing pulls the job ends
    with the kubelet's message (exit 78), not after 4 x --schedule-timeout of re-plans; nothing is left."""
    missing = "registry.example.com/team/trainr:1.0"
    cluster = local_cluster_factory(missing_images=("team/trainr",))
    kube = kube_of(cluster)
    before = free_gpus(kube)
    started = time.monotonic()
    manager = ManagerThread(kube, spec(image=missing)).start()
    code = manager.join()
    failed_after = time.monotonic() - started
    assert code == 78, manager.recorder.text
    assert "the image could not be pulled for" in manager.message
    assert "ErrImagePull" in manager.message or "ImagePullBackOff" in manager.message
    assert "trainr" in manager.message
    assert len(manager.recorder.plans) == 1  # a bad image is not the nodes' fault: no re-plan
    left = leftovers(kube, "train")
    assert left == {}
    after = free_gpus(kube)
    assert after == before
    row("an image no registry has", outcome="exit 78 with the kubelet's message, no re-plan", exit_code=code,
        detect_s=round(failed_after, 3), cleanup_s=None, objects_left=count(left),
        gpus_held=held(before, after), notes="ErrImagePull/ImagePullBackOff for 30 s is final")


def test_an_invalid_image_name_is_refused_before_anything_is_created(local_cluster_factory: Factory,
                                                                   row: Callable[..., object]) -> None:
    """The kubelet's InvalidImageName (exit 78 at once, were it to happen) is caught earlier: the request's
    own check refuses the reference (exit 2), so no pod is ever created with it."""
    cluster = local_cluster_factory()
    kube = kube_of(cluster)
    with pytest.raises(InvalidInput) as refused:
        spec(image="distributetrain/Base:0.1.0")  # upper case: not a reference the kubelet could pull
    assert refused.value.exit_code == 2
    assert "image (--image): 'distributetrain/Base:0.1.0' is not an image reference" in str(refused.value)
    assert leftovers(kube, "train") == {}
    row("an invalid image name", outcome="exit 2 before anything is created", exit_code=2, detect_s=None,
        cleanup_s=None, objects_left=0, gpus_held=0, notes="the kubelet's InvalidImageName never happens")


def test_kubectl_drain_of_a_workers_node_is_refused_by_the_jobs_budget(local_cluster_factory: Factory,
                                                                       row: Callable[..., object]) -> None:
    """The gang's PodDisruptionBudget (minAvailable = every pod of the gang) refuses the eviction with the
    API server's 429; `kubectl drain` waits and gives up at its --timeout; the training goes on and ends
    well. The operator is told which budget and can drain later (or delete the job)."""
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube, spec()).start()
    wait_until(lambda: running_job(kube, "train", workers=1) and "supervising" in manager.recorder.text,
               timeout=30, message="the job to be training")
    node = _worker_node(pods_of(kube, "train"))
    budget = cluster.kubectl("get", "pdb", "train-disruption", "-o", "jsonpath={.spec.minAvailable}")
    assert budget.stdout == "2", budget.stderr
    # --force: the job's pods name the manager as owner, not as controller (kubectl drain's "cannot delete
    # Pods that declare no controller"); they are still evicted through the eviction API, which the budget
    # answers
    drained = cluster.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                              "--timeout=4s", timeout=60)
    assert drained.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget" in drained.stderr
    assert running_job(kube, "train", workers=1) is not None  # nothing was evicted
    assert cluster.kubectl("uncordon", node).returncode == 0
    cluster.call(cluster.runtime.exit_container("default", "train-chief", 0))  # type: ignore[attr-defined]
    code = manager.join()
    assert code == 0, manager.recorder.text
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    row("kubectl drain of a worker's node (default: a budget)", outcome="drain refused (429), job exit 0",
        exit_code=code, detect_s=None, cleanup_s=None, objects_left=count(left) - 1,
        gpus_held=held(before, after), notes="PodDisruptionBudget train-disruption, minAvailable 2")


def test_a_drain_without_a_budget_is_named_as_an_eviction(local_cluster_factory: Factory,
                                                          row: Callable[..., object]) -> None:
    """With --no-disruption-budget the drain evicts the worker: the default mode ends the job naming the
    pod, its node and the reason (the pod's DisruptionTarget condition), not as a crash."""
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube, spec(disruption_budget="false")).start()
    wait_until(lambda: running_job(kube, "train", workers=1) and "supervising" in manager.recorder.text,
               timeout=30, message="the job to be training")
    assert cluster.kubectl("get", "pdb", "train-disruption").returncode != 0
    node = _worker_node(pods_of(kube, "train"))
    drain_at = time.monotonic()
    drained = cluster.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                              "--timeout=60s", timeout=90)
    assert drained.returncode == 0, drained.stderr
    code = manager.join()
    assert code != 0, manager.recorder.text
    said = manager.message + manager.recorder.text
    assert "train-worker-0" in said and node in said
    assert "evicted (a drain, or the eviction API)" in said
    left = leftovers(kube, "train")
    assert left == {}  # a failed job keeps no chief
    after = free_gpus(kube)
    assert after == before
    detected = manager.recorder.first("evicted")
    row("kubectl drain of a worker's node, --no-disruption-budget", outcome=f"exit {code}, eviction named",
        exit_code=code, detect_s=round(detected - drain_at, 3) if detected else None,
        cleanup_s=round(manager.ended_at - drain_at, 3) if manager.ended_at else None,
        objects_left=count(left), gpus_held=held(before, after), notes=f"worker on {node} evicted")


def test_a_graceful_node_shutdown_is_named_as_the_kubelets(local_cluster_factory: Factory,
                                                           row: Callable[..., object]) -> None:
    """A spot VM's shutdown notice through the kubelet's graceful node shutdown: the worker ends Failed with
    the kubelet's reason; the default mode ends the job naming pod, node and that reason."""
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube, spec()).start()
    wait_until(lambda: running_job(kube, "train", workers=1) and "supervising" in manager.recorder.text,
               timeout=30, message="the job to be training")
    node = _worker_node(pods_of(kube, "train"))
    shutdown_at = time.monotonic()
    cluster.shutdown_node(node, grace_period=2.0, critical_grace_period=1.0)
    code = manager.join()
    assert code != 0, manager.recorder.text
    said = manager.message + manager.recorder.text
    assert "train-worker-0" in said and node in said
    assert "terminated by its node (node shutdown, or out of a resource)" in said
    left = leftovers(kube, "train")
    assert left == {}  # a failed job keeps no chief
    after = free_gpus(kube)
    assert {n: g for n, g in after.items() if n != node} == {n: g for n, g in before.items() if n != node}
    detected = manager.recorder.first("terminated by its node")
    row("graceful node shutdown of a worker's node (default mode)", outcome=f"exit {code}, the kubelet named",
        exit_code=code, detect_s=round(detected - shutdown_at, 3) if detected else None,
        cleanup_s=round(manager.ended_at - shutdown_at, 3) if manager.ended_at else None,
        objects_left=count(left), gpus_held=held({n: g for n, g in before.items() if n != node}, after),
        notes=f"{naming.DEFAULT_RESOURCE} on {node} gone with it")
