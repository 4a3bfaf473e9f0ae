"""`kubectl drain` of a node running a Job's pod as a real process: the eviction sends the process SIGTERM
with its grace period, the kubelet reports the pod Failed with the process's own exit code (7) and the
DisruptionTarget condition, and the Job controller ignores that failure (the DisruptionTarget rule comes
before the FailJob rule that exit code would match) and starts a replacement on the other node."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from kubernetes import client

from kubeclient import present
from localcluster import TestCluster, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

# exits 7 on SIGTERM after saying so: the eviction's grace period is what lets it
HANDLER = ("import signal, sys, time\n"
           "def stop(*_):\n"
           "    print('checkpoint on SIGTERM', flush=True)\n"
           "    sys.exit(7)\n"
           "signal.signal(signal.SIGTERM, stop)\n"
           "print('training', flush=True)\n"
           "time.sleep(600)\n")
POLICY = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "trainer"}, "spec": {
    "backoffLimit": 1, "podFailurePolicy": POLICY,
    "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
        "containers": [{"name": "main", "image": "python:3.11-slim",
                        "command": [sys.executable, "-c", HANDLER]}]}}}}
BUDGET = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer"},
          "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "trainer"}}}}


def running_pods(v1: client.CoreV1Api) -> list[Any]:
    pods = v1.list_namespaced_pod("default", label_selector="app=trainer").items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def test_drain_evicts_a_job_pod_gracefully_and_the_job_replaces_it(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(nodes=[1, 1], gpu_taint=False, runtime="process",
                                                 job_backoff=0.2)
    v1 = client.CoreV1Api(cluster.api_client())
    batch = client.BatchV1Api(cluster.api_client())
    for manifest in (JOB, BUDGET):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    first = wait_until(lambda: running_pods(v1), timeout=60, what="the job's pod running")[0]
    wait_until(lambda: "training" in cluster.kubectl("logs", "job/trainer").stdout, timeout=30,
               what="the process started")
    drained = cluster.kubectl("drain", first.spec.node_name, "--ignore-daemonsets",
                              "--delete-emptydir-data", "--timeout=90s", timeout=120)
    assert drained.returncode == 0, drained.stderr
    assert f"pod/{first.metadata.name} evicted" in drained.stdout
    replacement = wait_until(lambda: [p for p in running_pods(v1) if p.metadata.name != first.metadata.name],
                             timeout=60, what="the replacement running")[0]
    assert replacement.spec.node_name != first.spec.node_name
    status = present(batch.read_namespaced_job_status("trainer", "default").status)
    assert (status.failed, status.active, status.conditions) == (None, 1, None)
