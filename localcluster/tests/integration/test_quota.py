"""ResourceQuota, LimitRange and the QoS class through the real kubectl: the real 403s, quota status kept
current as pods come, end and go, LimitRange defaults and limits, and status.qosClass by the real rules."""

from __future__ import annotations

import json
import re
from typing import Any

from localcluster import TestCluster, wait_until

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  tolerations:
  - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
  containers:
  - name: main
    image: busybox:1.36
    resources: {resources}
"""

QUOTA = """\
apiVersion: v1
kind: ResourceQuota
metadata:
  name: compute
spec:
  hard:
    requests.cpu: "2"
    limits.memory: 2Gi
    requests.nvidia.com/gpu: "4"
    count/pods: "4"
"""


def apply(cluster: TestCluster, manifest: str) -> Any:
    return cluster.kubectl("apply", "-f", "-", input=manifest)


def pod(cluster: TestCluster, name: str, resources: str) -> Any:
    return apply(cluster, POD.format(name=name, resources=resources))


def used(cluster: TestCluster) -> dict[str, str]:
    out = cluster.kubectl("get", "resourcequota", "compute", "-o", "json").stdout
    return dict(json.loads(out).get("status", {}).get("used", {}))


def test_quota_refuses_what_would_exceed_it_in_the_real_words(local_cluster: TestCluster) -> None:
    assert apply(local_cluster, QUOTA).returncode == 0
    full = "{limits: {cpu: '1', memory: 1Gi}}"
    assert pod(local_cluster, "one", full).returncode == 0
    refused = pod(local_cluster, "two", "{requests: {cpu: 1500m, memory: 512Mi}, limits: {memory: 1Gi}}")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": pods "two" is forbidden: '
        "exceeded quota: compute, requested: requests.cpu=1500m, used: requests.cpu=1, "
        "limited: requests.cpu=2"
    )
    unnamed = pod(local_cluster, "bare", "{limits: {nvidia.com/gpu: '1'}}")
    assert unnamed.stderr.strip().endswith(
        'pods "bare" is forbidden: failed quota: compute: must specify limits.memory for: main; must specify '
        "requests.cpu for: main"
    )
    gpus = pod(local_cluster, "gpus", "{limits: {cpu: '1', memory: 1Gi, nvidia.com/gpu: '5'}}")
    assert gpus.stderr.strip().endswith(
        "exceeded quota: compute, requested: requests.nvidia.com/gpu=5, used: requests.nvidia.com/gpu=0, "
        "limited: requests.nvidia.com/gpu=4"
    )
    assert local_cluster.kubectl("get", "pods", "-o", "name").stdout.split() == ["pod/one"]


def test_quota_status_follows_pods_that_come_end_and_go(local_cluster: TestCluster) -> None:
    assert apply(local_cluster, QUOTA).returncode == 0
    wait_until(lambda: used(local_cluster).get("count/pods") == "0", what="quota status written")
    assert pod(local_cluster, "a", "{limits: {cpu: 500m, memory: 1Gi, nvidia.com/gpu: '2'}}").returncode == 0
    assert pod(local_cluster, "b", "{limits: {cpu: 500m, memory: 512Mi}}").returncode == 0
    expected = {
        "count/pods": "2",
        "limits.memory": "1536Mi",
        "requests.cpu": "1",
        "requests.nvidia.com/gpu": "2",
    }
    wait_until(lambda: used(local_cluster) == expected, what=f"used {expected}")
    table = local_cluster.kubectl("get", "quota").stdout.splitlines()
    assert table[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert (
        "count/pods: 2/4, requests.cpu: 1/2, requests.nvidia.com/gpu: 2/4   limits.memory: 1536Mi/2Gi"
        in table[1]
    )
    # a pod that ended gives its compute back but is still counted until it is deleted
    local_cluster.call(local_cluster.runtime.exit_container("default", "a", 0))  # type: ignore[attr-defined]
    wait_until(lambda: used(local_cluster)["requests.nvidia.com/gpu"] == "0", what="gpus given back")
    assert used(local_cluster) == {
        "count/pods": "2",
        "limits.memory": "512Mi",
        "requests.cpu": "500m",
        "requests.nvidia.com/gpu": "0",
    }
    assert local_cluster.kubectl("delete", "pod", "a", "b").returncode == 0
    wait_until(lambda: used(local_cluster)["count/pods"] == "0", what="pods deleted")
    described = local_cluster.kubectl("describe", "quota", "compute").stdout
    assert "requests.nvidia.com/gpu  0     4" in described


def test_limit_range_defaults_then_limits_each_container(local_cluster: TestCluster) -> None:
    limit_range = (
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: limits\nspec:\n  limits:\n"
        "  - type: Container\n    max: {memory: 1Gi}\n    default: {cpu: 500m, memory: 256Mi}\n"
    )
    assert apply(local_cluster, limit_range).returncode == 0
    stored = json.loads(local_cluster.kubectl("get", "limitrange", "limits", "-o", "json").stdout)
    assert stored["spec"]["limits"][0]["defaultRequest"] == {"cpu": "500m", "memory": "256Mi"}
    too_big = pod(local_cluster, "big", "{limits: {memory: 2Gi}}")
    assert too_big.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": pods "big" is forbidden: maximum memory '
        "usage per Container is 1Gi, but limit is 2Gi"
    )
    assert pod(local_cluster, "plain", "{}").returncode == 0
    live = json.loads(local_cluster.kubectl("get", "pod", "plain", "-o", "json").stdout)
    assert live["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "256Mi"},
        "requests": {"cpu": "500m", "memory": "256Mi"},
    }
    assert live["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for container main"
    )
    # the defaults made it Guaranteed: the class is computed after admission, as on a real server
    assert live["status"]["qosClass"] == "Guaranteed"


def test_qos_class_is_computed_from_cpu_and_memory_only(local_cluster: TestCluster) -> None:
    cases = {
        "guaranteed": "{limits: {cpu: '1', memory: 1Gi}}",
        "burstable": "{requests: {cpu: 100m}}",
        "besteffort": "{}",
        "gpu-only": "{limits: {nvidia.com/gpu: '1'}}",
    }
    for name, resources in cases.items():
        assert pod(local_cluster, name, resources).returncode == 0
    classes = local_cluster.kubectl(
        "get", "pods", "-o", "custom-columns=NAME:.metadata.name,QOS:.status.qosClass", "--no-headers"
    )
    assert dict(line.split() for line in classes.stdout.splitlines()) == {
        "besteffort": "BestEffort",
        "burstable": "Burstable",
        "gpu-only": "BestEffort",
        "guaranteed": "Guaranteed",
    }
    described = local_cluster.kubectl("describe", "pod", "gpu-only").stdout
    assert re.search(r"^QoS Class:\s+BestEffort$", described, re.MULTILINE), described
