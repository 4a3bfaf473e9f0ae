"""Protobuf request bodies from real kubectl, read by the server as their JSON would be: `kubectl debug
--copy-to` sends a whole pod as protobuf, so a pod made from a rich JSON manifest comes back as the same
spec when copied."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body
from localcluster import TestCluster

RICH_POD: dict[str, Any] = {"metadata": {"name": "rich", "labels": {"app": "rich"},
                                         "annotations": {"note": "kept"}},
                            "spec": {
    "restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "activeDeadlineSeconds": 600,
    "nodeSelector": {"kubernetes.io/os": "linux"}, "hostname": "rich-host", "subdomain": "sub",
    "enableServiceLinks": False, "automountServiceAccountToken": False,
    "securityContext": {"runAsUser": 1000, "runAsNonRoot": True, "fsGroup": 2000,
                        "supplementalGroups": [3000, 4000], "seccompProfile": {"type": "RuntimeDefault"}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "conf", "configMap": {"name": "conf", "defaultMode": 420, "optional": True}},
                {"name": "keys", "secret": {"secretName": "keys", "items": [{"key": "id", "path": "id",
                                                                             "mode": 256}]}}],
    "containers": [{
        "name": "main", "image": "busybox:1.36", "command": ["sh", "-c"], "args": ["sleep 1000"],
        "workingDir": "/work", "ports": [{"name": "ssh", "containerPort": 2222, "protocol": "TCP"}],
        "env": [{"name": "PLAIN", "value": "v"},
                {"name": "JOB", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                           "fieldPath": "metadata.labels['app']"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                                   "divisor": "1m"}}},
                {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "id",
                                                                "optional": True}}}],
        "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "conf", "optional": True}}],
        "resources": {"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
                      "requests": {"cpu": "500m", "memory": "512Mi", "nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/dev/shm"},
                         {"name": "keys", "mountPath": "/keys", "readOnly": True}],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 1, "periodSeconds": 2},
        "livenessProbe": {"exec": {"command": ["true"]}, "failureThreshold": 5},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": False}}]}}


@pytest.fixture
def cluster_and_api(local_cluster: TestCluster) -> tuple[TestCluster, client.CoreV1Api]:
    return local_cluster, client.CoreV1Api(local_cluster.api_client())


def test_a_pod_copied_by_kubectl_debug_through_protobuf_keeps_its_spec(cluster_and_api: Any) -> None:
    cluster, v1 = cluster_and_api
    original = v1.create_namespaced_pod("default", as_body(RICH_POD))
    done = cluster.kubectl("debug", "rich", "--copy-to=rich-copy", "--container=debugger",
                           "--image=busybox", "--keep-liveness", "--keep-readiness",
                           "--share-processes=false", "--", "sleep", "1")
    assert done.returncode == 0, done.stderr
    copy = v1.read_namespaced_pod("rich-copy", "default")
    api = v1.api_client
    want = api.sanitize_for_serialization(original.spec)
    got = api.sanitize_for_serialization(copy.spec)
    got["containers"] = [c for c in got["containers"] if c["name"] != "debugger"]
    for spec in (want, got):
        spec.pop("nodeName", None)
    # kubectl's own change to the copy: --share-processes=false sets the field
    assert got.pop("shareProcessNamespace") is False
    assert got == want


def test_a_protobuf_only_client_is_told_the_server_answers_json(cluster_and_api: Any) -> None:
    cluster, _ = cluster_and_api
    answer = cluster.request("GET", "/api/v1/namespaces/default/pods",
                             headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert answer.status == 406
    assert answer.json()["reason"] == "NotAcceptable"
