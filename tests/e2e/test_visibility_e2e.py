"""The job seen as a user sees it, for real: the shipped manifests on the local cluster with pods as
processes, the manager's Prometheus metrics scraped over HTTP from its pod IP in both of Manager.sh's phases
(PreTraining waiting for GPUs, PostTraining while Train.py trains), and `kubectl get -L`, `kubectl describe`
and `kubectl get events` read as a user reads them."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest
from localcluster import TestCluster, wait_until
from prometheus_client.parser import text_string_to_metric_families
from user_manifests import JOB, MANAGER, apply, manager_ended, manager_manifest, manager_pod, wait_for_phase

from distributetrain import naming

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

# holds node-1's 5 GPUs, so the 6-GPU job waits in Planning (5 + 3 + 2 GPUs, 6 asked: 3 + 2 free)
BLOCKER = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker", "namespace": "default"},
           "spec": {"nodeName": "node-1", "restartPolicy": "Never",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                    "resources": {"limits": {"nvidia.com/gpu": "5", "memory": "64Mi"},
                                                  "requests": {"cpu": "10m"}},
                                    "securityContext": {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}}]}}


def phase_column(cluster: TestCluster) -> str | None:
    done = cluster.kubectl("get", "job", MANAGER, "-L", naming.PHASE_LABEL, "--no-headers")
    fields = done.stdout.split()
    return fields[-1] if done.returncode == 0 and len(fields) >= 5 else None


def scrape(ip: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The manager's metrics, fetched from its pod IP as Prometheus would, parsed by prometheus_client."""
    port = naming.DEFAULT_METRICS_PORT
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    own = ("job_name", "namespace")
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in own))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_phase_label_describe_and_events_of_a_real_job(manifests_cluster: TestCluster) -> None:
    cluster = manifests_cluster
    apply(cluster, json.dumps(BLOCKER))
    wait_for_phase(cluster, "blocker", ("Running",), timeout=60, what="the blocker to hold node-1's GPUs")
    apply(cluster, manager_manifest(DT_COMMAND="python3 /opt/distributetrain/Train.py --epochs 3",
                                    DT_WAIT_FOR_GPUS="10m"))

    # PreTraining waits for GPUs: the phase column says Planning, and the metrics say it too
    wait_until(lambda: phase_column(cluster) == "Planning", timeout=120, interval=0.5, what="phase Planning")
    manager = manager_pod(cluster) or {}
    ports = manager["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "metrics", "containerPort": naming.DEFAULT_METRICS_PORT, "protocol": "TCP"}]
    ip = manager["status"]["podIP"]
    planning = wait_until(lambda: _scraped(ip), timeout=60, interval=0.5, what="the metrics endpoint")
    assert planning[("distributetrain_job_phase", (("phase", "Planning"),))] == 1.0
    assert planning[("distributetrain_job_phase", (("phase", "Running"),))] == 0.0
    assert planning[("distributetrain_gpus_requested", ())] == 6.0
    assert planning[("distributetrain_gpus_held", ())] == 0.0

    # GPUs free up: PostTraining follows Train.py; the same port answers, from the other process
    assert cluster.kubectl("delete", "pod", "blocker", "--grace-period=0", "--force").returncode == 0
    wait_until(lambda: phase_column(cluster) == "Running", timeout=300, interval=0.5, what="phase Running")
    running = wait_until(lambda: (m := _scraped(ip)) and m.get(("distributetrain_workers_ready", ())) == 1.0
                         and m, timeout=60, interval=0.5, what="the metrics of the running job")
    assert running[("distributetrain_job_phase", (("phase", "Running"),))] == 1.0
    assert running[("distributetrain_gpus_held", ())] == 6.0
    pods = {labels for name, labels in running if name == "distributetrain_pod_info"}
    assert pods == {(("gpus", "5"), ("node", "node-1"), ("pod", f"{JOB}-worker-0"), ("role", "worker")),
                    (("gpus", "1"), ("node", "node-3"), ("pod", f"{JOB}-chief"), ("role", "chief"))}
    assert running[("distributetrain_replans_total", ())] == 0.0
    assert running[("distributetrain_restarts_total", ())] == 0.0
    reached = {dict(labels)["phase"]: value for (name, labels), value in running.items()
               if name == "distributetrain_phase_reached_seconds"}
    assert list(reached) == ["Planning", "Scheduling", "Launching", "Running"]
    assert reached["Planning"] <= reached["Scheduling"] <= reached["Launching"] <= reached["Running"]
    assert reached["Scheduling"] >= 1.0  # it waited for the blocker's GPUs

    ended, log = manager_ended(cluster)
    assert ended["status"]["phase"] == "Succeeded", log[-4000:]
    assert "serving the job's metrics on 0.0.0.0:9102/metrics" in log
    assert "not recorded" not in log and "are not shown" not in log
    assert phase_column(cluster) == "Succeeded"

    described = cluster.kubectl("describe", "job", MANAGER).stdout
    assert "distributetrain.io/phase=Succeeded" in described
    assert "distributetrain.io/progress: epoch 3 of 3, step " in described, described
    assert "distributetrain.io/plan: 5 on node-1, 1 on node-3 (chief)" in described
    events = [line.split() for line in described.split("Events:")[1].splitlines()]
    reasons = [fields[1] for fields in events if len(fields) > 3 and naming.EVENT_COMPONENT in fields]
    # (describe sorts by the last time, in whole seconds: the last two may share one)
    assert sorted(reasons) == ["CleanedUp", "Planned", "TrainingStarted", "TrainingSucceeded"], described
    assert reasons[:2] == ["Planned", "TrainingStarted"], described
    listed = cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={JOB}-worker-0")
    assert "WorkerCreated" in listed.stdout and "WorkerReady" in listed.stdout, listed.stdout


def _scraped(ip: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        return scrape(ip)
    except OSError:
        return None
