"""The manager on capacity it does not place itself, on simulated kubelets (manager/capacity.py,
groupstart.py): a GPU pool that scales from zero (cluster-autoscaler's model, plain pending pods or a
ProvisioningRequest), and Kueue's queue with its gang admission. The same with real training:
tests/e2e/test_capacity_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from localcluster import NodePool, TestCluster, kueue_queue_manifests, wait_until
from manager_support import chief_behavior, leftovers, manager_pod, orchestrator, spec

from distributetrain.errors import EXIT_SCHEDULE_TIMEOUT, ScheduleTimeout
from distributetrain.kube.gateway import Kube

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(180)
FAST_POOL = {"autoscaler_scan_interval": 0.2, "autoscaler_provision_delay": 1.0,
             "autoscaler_ready_delay": 0.5, "autoscaler_unneeded_time": 2.0}


def node_names(cluster: TestCluster) -> list[str]:
    done = cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")
    return done.stdout.split()


def pool_cluster(factory: Factory, *, max_size: int, **options: Any) -> TestCluster:
    return factory(nodes=[], cpu_nodes=1, node_pools=[NodePool("gpu", 2, max_size)],
                   behaviors=[chief_behavior(exit_after=1.0)], **FAST_POOL, **options)


def test_a_job_on_a_pool_at_zero_nodes_scales_it_up_runs_and_the_pool_shrinks_after(
        local_cluster_factory: Factory) -> None:
    cluster = pool_cluster(local_cluster_factory, max_size=3)
    kube = Kube(cluster.api_client())
    orch, said = orchestrator(cluster, spec(gpus="5", gpus_per_node="2"), owner=manager_pod(kube))
    assert orch.run() == 0
    log = said.text
    assert ("the cluster autoscales (ConfigMap kube-system/cluster-autoscaler-status): the gang is created "
            "as pending pods for the node pool") in log
    assert "gang of 3 pod(s) with 2, 2, 1 GPU(s), created at once for the node pool's scale-up" in log
    assert "hostfile ConfigMap train-hostfile written: " in log
    # three new nodes, one per pod; the chief is kept, Completed, and holds nothing: all go once empty
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}
    wait_until(lambda: node_names(cluster) == ["cpu-1"], timeout=30, what="the pool back at zero")


def test_a_partial_scale_up_ends_at_the_schedule_timeout_leaving_nothing(
        local_cluster_factory: Factory) -> None:
    cluster = pool_cluster(local_cluster_factory, max_size=1)
    kube = Kube(cluster.api_client())
    orch, _ = orchestrator(cluster, spec(gpus="4", gpus_per_node="2", schedule_timeout="5s"),
                           owner=manager_pod(kube))
    with pytest.raises(ScheduleTimeout) as caught:
        orch.run()
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_SCHEDULE_TIMEOUT
    assert "not bound to a node within --schedule-timeout (5s)" in message
    assert "the node pool did not bring up the nodes" in message
    assert leftovers(cluster, "train") == {}


def test_a_scale_up_through_a_provisioning_request_asks_for_every_node_at_once(
        local_cluster_factory: Factory) -> None:
    cluster = pool_cluster(local_cluster_factory, max_size=3, provisioning_requests=True)
    kube = Kube(cluster.api_client())
    orch, said = orchestrator(cluster, spec(gpus="5", gpus_per_node="2"), owner=manager_pod(kube))
    assert orch.run() == 0
    log = said.text
    assert ("ProvisioningRequest train-0 (best-effort-atomic-scale-up.autoscaling.x-k8s.io) asks for the "
            "gang's nodes all at once") in log
    assert "ProvisioningRequest train-0 is Provisioned" in log
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}  # the request and its templates deleted
    chief = json.loads(cluster.kubectl("get", "pod", "train-chief", "-o", "json").stdout)
    assert chief["metadata"]["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == "train-0"


QUEUES = kueue_queue_manifests(gpus=6)


@pytest.fixture
def kueue_cluster(local_cluster_factory: Factory) -> TestCluster:
    cluster = local_cluster_factory(nodes=[4, 4], cpu_nodes=1, kueue=True,
                                    behaviors=[chief_behavior(exit_after=1.0)])
    applied = cluster.kubectl("apply", "-f", "-", input=QUEUES)
    assert applied.returncode == 0, applied.stderr
    return cluster


def test_a_job_through_a_kueue_queue_is_admitted_as_one_pod_group(kueue_cluster: TestCluster) -> None:
    kube = Kube(kueue_cluster.api_client())
    orch, said = orchestrator(kueue_cluster, spec(gpus="5", queue="team-queue"), owner=manager_pod(kube))
    assert orch.run() == 0
    log = said.text
    assert ("Kueue: the gang waits in LocalQueue default/team-queue, ClusterQueue team, and is admitted as "
            "one pod group") in log
    assert "gang of 2 pod(s) with 4, 1 GPU(s), created at once for LocalQueue team-queue" in log
    events = kueue_cluster.kubectl("get", "events", "--field-selector", "involvedObject.kind=Workload",
                                   "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert {"CreatedWorkload", "QuotaReserved", "Admitted"} <= set(events)
    assert leftovers(kueue_cluster, "train") == {"pods": ["train-chief"]}


def test_a_job_the_queue_cannot_admit_waits_then_ends_with_the_queues_reason(
        kueue_cluster: TestCluster) -> None:
    kube = Kube(kueue_cluster.api_client())
    orch, _ = orchestrator(kueue_cluster, spec(gpus="8", queue="team-queue", schedule_timeout="4s"),
                           owner=manager_pod(kube))
    with pytest.raises(ScheduleTimeout) as caught:
        orch.run()
    message = str(caught.value)
    assert "not bound to a node within --schedule-timeout (4s)" in message
    # two pods of 4 GPUs: the first pod set takes 4 of the 6, the second finds 2
    assert "not admitted: Pending: couldn't assign flavors to pod set" in message
    assert "insufficient unused quota for nvidia.com/gpu in flavor gpus, 2 more needed" in message
    assert "pod train-chief on no node yet: not scheduled: SchedulingGated" in message
    assert "Kueue did not admit the gang" in message
    assert leftovers(kueue_cluster, "train") == {}


def test_the_namespace_default_local_queue_takes_the_job_without_asking(kueue_cluster: TestCluster) -> None:
    created = kueue_cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "default"},
         "spec": {"clusterQueue": "team"}}))
    assert created.returncode == 0, created.stderr
    kube = Kube(kueue_cluster.api_client())
    orch, said = orchestrator(kueue_cluster, spec(gpus="2"), owner=manager_pod(kube))
    assert orch.run() == 0
    assert "LocalQueue default/default (the namespace's default LocalQueue)" in said.text
