"""Capacity the manager does not place itself, for real (docs/real-cluster.md, "Autoscaled GPU pools" and
"Kueue"): the shipped manifests on local clusters of real processes, Train.py training with Horovod and
TensorFlow (one epoch, two ranks: the behaviour is the point, not the model).

- A GPU pool at zero nodes: the manager creates the gang as pending pods, the pool adds a node per pod, the
  job trains, and the pool scales back to zero after.
- A Kueue LocalQueue with room for 2 GPUs: a 4-GPU job waits in it and ends at its schedule timeout with
  Kueue's reason, leaving nothing; a 2-GPU job is admitted as one pod group and trains.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from localcluster import NodePool, TestCluster, kueue_queue_manifests, start_cluster, wait_until
from user_manifests import MANAGER, REPO, apply, manager_ended, pod_json

from apiclient import make_api_client
from demo_namespace import demo_namespace_labels
from project_images import project_images

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]
Factory = Callable[..., TestCluster]
TRAIN = "python3 /opt/distributetrain/Train.py --epochs 1"
# the kubelets refresh ConfigMap volumes as real ones do (60 s plus jitter, at once on a pod update): the
# chief of a gang made at once gets its hostfile within a second because the manager annotates its pod
PROCESS: dict[str, Any] = {"runtime": "process", "runtime_options": {"volume_refresh": 60.0}}


def manager(job: str, gpus: int, **env: str) -> str:
    """The shipped manager Job, asked for `gpus` GPUs as `job`, with these variables added to its pod's."""
    path = REPO / "manifests" / "DistributeTrain_Manager.yaml"
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["--gpus", str(gpus), "--job-name", job]
    container["env"] = [*container["env"], *({"name": k, "value": v} for k, v in env.items())]
    return yaml.safe_dump(manifest)


def with_manifests(cluster: TestCluster) -> TestCluster:
    applied = cluster.kubectl("apply", "-f", str(REPO / "rbac"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PodTemplate.yaml"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PriorityClass.yaml"))
    assert applied.returncode == 0, applied.stderr
    return cluster


def said(log: str) -> list[str]:
    return re.findall(r"^\S+Z distributetrain: (.*)$", log, flags=re.MULTILINE)


def node_names(cluster: TestCluster) -> list[str]:
    return cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()


def test_a_job_on_a_gpu_pool_at_zero_nodes_trains_and_the_pool_scales_down_after(
        local_cluster_factory: Factory) -> None:
    cluster = with_manifests(local_cluster_factory(
        nodes=[], cpu_nodes=1, node_pools=[NodePool("gpu", 1, 3)], autoscaler_scan_interval=1.0,
        autoscaler_provision_delay=3.0, autoscaler_ready_delay=1.0, autoscaler_unneeded_time=5.0, **PROCESS))
    assert node_names(cluster) == ["cpu-1"]
    apply(cluster, manager("pool-job", 2, DT_COMMAND=TRAIN, DT_GPUS_PER_NODE="1"))

    pod, log = manager_ended(cluster)
    assert pod["status"]["phase"] == "Succeeded", log[-4000:]
    lines = said(log)
    assert any("the cluster autoscales (ConfigMap kube-system/cluster-autoscaler-status)" in s for s in lines)
    assert ("gang of 2 pod(s) with 1, 1 GPU(s), created at once for the node pool's scale-up; the chief "
            "gets its hostfile once the workers run") in lines
    # the chief waited for its hostfile, then Horovod ran across the two new nodes
    chief = pod_json(cluster, "pool-job-chief")
    assert chief is not None and chief["spec"]["nodeName"].startswith("gpu-")
    worker_node = next(s for s in lines if s.startswith("the gang runs"))
    assert re.search(r"pool-job-worker-0 on gpu-\d", worker_node), worker_node
    assert len(set(re.findall(r"rank=(\d+) size=2 weights_sha256=", log))) == 2, log[-4000:]
    assert "the hostfile lists 1 worker(s)" in cluster.kubectl("logs", "pool-job-chief").stdout
    triggered = cluster.kubectl("get", "events", "--field-selector", "reason=TriggeredScaleUp", "-o",
                                "jsonpath={.items[*].message}").stdout
    assert "pod triggered scale-up: [{gpu 0->2 (max: 3)}]" in triggered
    # nothing of the job holds a node: the pool goes back to zero
    wait_until(lambda: node_names(cluster) == ["cpu-1"], timeout=120, interval=1.0,
               what="the GPU pool scaled back to zero")


QUEUES = kueue_queue_manifests(gpus=2)


@pytest.fixture(scope="module")
def kueue_cluster() -> Iterator[TestCluster]:
    """Two 1-GPU nodes, a CPU node for the manager, and a queue with room for 2 GPUs; the two Kueue tests
    share it (the first leaves nothing behind)."""
    cluster = start_cluster(nodes=[1, 1], cpu_nodes=1, kueue=True, images=project_images(),
                            client_factory=make_api_client, **PROCESS)
    try:
        labels = json.dumps({"metadata": {"labels": demo_namespace_labels()}})
        cluster.request("PATCH", "/api/v1/namespaces/default", body=labels,
                        content_type="application/merge-patch+json")
        applied = cluster.kubectl("apply", "-f", "-", input=QUEUES)
        assert applied.returncode == 0, applied.stderr
        yield with_manifests(cluster)
    finally:
        cluster.close()


def fresh_manager(cluster: TestCluster, manifest: str) -> tuple[dict[str, Any], str]:
    # the Job of the test before, its pods and what they own (the kept chief) go first
    cluster.kubectl("delete", "job", MANAGER, "--ignore-not-found", "--wait=true", "--cascade=foreground")
    apply(cluster, manifest)
    return manager_ended(cluster)


def test_a_job_the_queue_cannot_admit_waits_then_ends_at_its_timeout_with_the_queues_reason(
        kueue_cluster: TestCluster) -> None:
    pod, log = fresh_manager(kueue_cluster, manager("too-big", 4, DT_COMMAND=TRAIN, DT_QUEUE="team-queue",
                                                    DT_SCHEDULE_TIMEOUT="20s"))
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 71, log[-3000:]
    # four pods of one node's GPU: three workers are one pod set of 3, more than the queue ever holds
    assert ("insufficient quota for nvidia.com/gpu in flavor gpus, request > maximum capacity (3 > 2)"
            in log), log[-3000:]
    assert "Kueue did not admit the gang" in log
    left = kueue_cluster.kubectl("get", "pods,configmaps,secrets,workloads", "-l",
                                 "distributetrain.io/job=too-big", "-o", "name").stdout.split()
    assert left == []


def test_a_job_through_a_kueue_queue_trains_as_one_admitted_group(kueue_cluster: TestCluster) -> None:
    pod, log = fresh_manager(kueue_cluster, manager("queued", 2, DT_COMMAND=TRAIN, DT_QUEUE="team-queue"))
    assert pod["status"]["phase"] == "Succeeded", log[-4000:]
    lines = said(log)
    assert ("Kueue: the gang waits in LocalQueue default/team-queue, ClusterQueue team, and is admitted as "
            "one pod group") in lines
    assert len(set(re.findall(r"rank=(\d+) size=2 weights_sha256=", log))) == 2, log[-4000:]
    # one Workload for the group, admitted by the ClusterQueue, finished once the job's pods were done
    workloads = json.loads(kueue_cluster.kubectl("get", "workloads", "-o", "json").stdout)["items"]
    reasons = kueue_cluster.kubectl("get", "events", "--field-selector", "involvedObject.kind=Workload", "-o",
                                    "jsonpath={.items[*].reason}").stdout.split()
    assert {"CreatedWorkload", "QuotaReserved", "Admitted"} <= set(reasons), reasons
    for workload in workloads:  # the kept chief still owns it
        assert workload["spec"]["queueName"] == "team-queue"
        assert len(workload["spec"]["podSets"]) in (1, 2)
