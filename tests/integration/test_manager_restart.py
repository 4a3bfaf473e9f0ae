"""A manager restarted with the same job name adopts or cleans up; injected API faults; cut watch streams."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from localcluster import TestCluster
from manager_support import chief_behavior, leftovers, manager_pod, orchestrator, spec

from distributetrain import naming
from distributetrain.errors import ApiError, InvalidInput
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Watched

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(120)


def exit_chief_later(cluster: TestCluster, job: str, code: int, after: float,
                     before: Callable[[], object] | None = None) -> threading.Timer:
    def run() -> None:
        if before is not None:
            before()
        cluster.call(cluster.runtime.exit_container("default", naming.chief_name(job), code))  # type: ignore[attr-defined]

    timer = threading.Timer(after, run)
    timer.start()
    return timer


def test_restarted_manager_adopts_the_running_job(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    first, _ = orchestrator(cluster, spec())
    before = first.pretraining.run()  # ...and the first manager dies here, leaving the job running
    uids = {n: Kube(cluster.api_client()).get("pods", "default", n)["metadata"]["uid"]  # type: ignore[index]
            for n in (*before.workers, before.chief)}
    second, recorder = orchestrator(cluster, spec())
    exit_chief_later(cluster, "train", 0, after=1.0)
    assert second.run() == 0
    assert "adopting the job train, running" in recorder.text
    assert second.kube.requests["create"] == 0  # nothing duplicated
    chief = Kube(cluster.api_client()).get("pods", "default", "train-chief")
    assert chief is not None and chief["metadata"]["uid"] == uids["train-chief"]
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_restarted_manager_cleans_up_a_partial_job(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=0, exit_after=1.0)])
    admin = Kube(cluster.api_client())
    first, _ = orchestrator(cluster, spec())
    first.pretraining.run()
    admin.delete("pods", "default", "train-chief")  # the first manager died before the chief was created
    old_worker = admin.get("pods", "default", "train-worker-0")
    assert old_worker is not None
    second, recorder = orchestrator(cluster, spec())
    assert second.run() == 0
    assert "found 5 object(s) of an earlier" in recorder.text  # worker, Secret, hostfile, policy, budget
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_a_job_run_by_a_live_manager_is_refused_and_untouched(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    admin = Kube(cluster.api_client())
    first_owner = manager_pod(admin, "manager-a")
    first, _ = orchestrator(cluster, spec(), owner=first_owner)
    first.pretraining.run()
    before = leftovers(cluster, "train")
    second, _ = orchestrator(cluster, spec(), owner=manager_pod(admin, "manager-b"))
    with pytest.raises(InvalidInput, match="run by manager Pod manager-a, which is still running"):
        second.run()
    assert leftovers(cluster, "train") == before
    assert second.kube.requests["delete"] == 0 and second.kube.requests["create"] == 0


def test_deleting_the_manager_pod_garbage_collects_the_job(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    admin = Kube(cluster.api_client())
    owner = manager_pod(admin)
    orch, _ = orchestrator(cluster, spec(), owner=owner)
    orch.pretraining.run()
    admin.delete("pods", "default", owner.name, grace_seconds=0)
    watched = Watched(admin, "pods", "default", naming.job_selector("train"))
    for pods in watched.changes(deadline=time.monotonic() + 30):
        if not pods:
            break
    assert leftovers(cluster, "train") == {}


@pytest.mark.parametrize(("code", "verb", "resource", "retry_after"), [
    (503, "create", "pods", None), (500, "list", "pods", None), (429, "list", "nodes", 1),
    (409, "create", "secrets", None), (504, "delete", "pods", None),
])
def test_transient_api_failures_are_retried(local_cluster_factory: Factory, code: int, verb: str,
                                            resource: str, retry_after: int | None) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=0, exit_after=0.5)])
    fault = cluster.inject_fault(code, verb=verb, resource=resource, count=2, retry_after=retry_after)
    orch, _ = orchestrator(cluster, spec())
    assert orch.run() == 0
    assert fault.hits == 2
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_persistent_api_failure_fails_clearly_and_cleans_up(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    cluster.inject_fault(500, verb="create", resource="configmaps", count=100)
    orch, _ = orchestrator(cluster, spec())
    with pytest.raises(ApiError) as caught:
        orch.run()
    assert caught.value.exit_code == 72
    assert "create configmaps default/train-hostfile" in str(caught.value)
    assert "gave up after 6 attempts" in str(caught.value)
    assert leftovers(cluster, "train") == {}


@pytest.mark.parametrize("disruption", ["cut", "restart", "compact"])
def test_watch_streams_cut_mid_job_resume(local_cluster_factory: Factory, disruption: str) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    orch, _ = orchestrator(cluster, spec())

    def disrupt() -> None:
        if disruption == "cut":
            cluster.cut_watches()
        elif disruption == "restart":
            cluster.restart(down_seconds=0.5)
        else:
            cluster.compact()
            cluster.cut_watches()
        time.sleep(0.5)

    exit_chief_later(cluster, "train", 7, after=1.5, before=disrupt)
    assert orch.run() == 7
    assert orch.kube.requests["watch"] >= 2
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}
