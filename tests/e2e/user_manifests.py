"""The shipped manifests on a local cluster of real processes, as a user applies them: `make demo`'s nodes of
5, 3 and 2 GPUs plus a CPU node for the manager, pods as processes (network, mount and PID namespaces: root),
rbac/, the job pods' template and the manager's priority class applied with kubectl; then the manager Job,
from manifests/DistributeTrain_Manager.yaml with only environment variables a user may set added.

The fixture `manifests_cluster` (conftest.py imports it) is that cluster, fresh for each test: every test here
applies its own manager, and the job's names (train-6gpu, the manager Job) are the manifest's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import TestCluster, wait_until

REPO = Path(__file__).resolve().parents[2]
JOB = "train-6gpu"  # the job name manifests/DistributeTrain_Manager.yaml gives
MANAGER = "distributetrain-manager"
MANAGER_PODS = f"batch.kubernetes.io/job-name={MANAGER}"  # the label the Job controller gives its pods
ENDED = ("Succeeded", "Failed")


def manager_manifest(**env: str) -> str:
    """The shipped manager Job with these environment variables added to its pod's container."""
    job: dict[str, Any] = yaml.safe_load((REPO / "manifests" / "DistributeTrain_Manager.yaml").read_text())
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
    return yaml.safe_dump(job)


def apply(cluster: TestCluster, manifest: str) -> None:
    applied = cluster.kubectl("apply", "-f", "-", input=manifest)
    assert applied.returncode == 0, applied.stderr


def pod_json(cluster: TestCluster, name: str) -> dict[str, Any] | None:
    done = cluster.kubectl("get", "pod", name, "-o", "json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def manager_pod(cluster: TestCluster) -> dict[str, Any] | None:
    """The manager Job's newest pod."""
    done = cluster.kubectl("get", "pod", "-l", MANAGER_PODS, "--sort-by", ".metadata.creationTimestamp",
                           "-o", "json")
    items = json.loads(done.stdout)["items"] if done.returncode == 0 else []
    return items[-1] if items else None


def wait_for_phase(cluster: TestCluster, name: str, phases: tuple[str, ...], *, timeout: float,
                   what: str) -> dict[str, Any]:
    """The pod once its phase is one of `phases`."""
    def reached() -> dict[str, Any] | None:
        pod = pod_json(cluster, name)
        return pod if pod is not None and pod["status"].get("phase") in phases else None

    return wait_until(reached, timeout=timeout, interval=0.5, what=what)


def manager_ended(cluster: TestCluster) -> tuple[dict[str, Any], str]:
    """The manager Job's pod once it has ended (real training included), and its log."""
    def ended() -> dict[str, Any] | None:
        pod = manager_pod(cluster)
        return pod if pod is not None and pod["status"].get("phase") in ENDED else None

    pod = wait_until(ended, timeout=900, interval=0.5, what="the manager pod to end")
    return pod, cluster.kubectl("logs", f"job/{MANAGER}", timeout=60).stdout


@pytest.fixture
def manifests_cluster(local_cluster_factory: Any) -> TestCluster:
    cluster: TestCluster = local_cluster_factory(nodes=[5, 3, 2], cpu_nodes=1, runtime="process")
    applied = cluster.kubectl("apply", "-f", str(REPO / "rbac"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PodTemplate.yaml"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PriorityClass.yaml"))
    assert applied.returncode == 0, applied.stderr
    return cluster
