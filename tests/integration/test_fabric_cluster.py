"""A job on nodes with a fabric, on the local cluster: nodes of 8 GPUs that advertise 4 EFA devices each (as
the EFA device plugin does, `localcluster up --fabric efa:4`). `run --dry-run -o yaml` shows the pods
requesting their share of EFA with their GPUs and the fabric's NCCL settings; a node short of EFA refuses the
job with the numbers, creating nothing; `--fabric-resource none` runs over TCP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from localcluster import TestCluster
from manager_support import IMAGE

from distributetrain.errors import Forbidden
from distributetrain.kube.gateway import Kube

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(240)
CLI = str(Path(sys.executable).parent / "distributetrain")
EFA = "vpc.amazonaws.com/efa"
GPU = "nvidia.com/gpu"


def run_cli(cluster: TestCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DT_")}
    argv = [CLI, "run", "--kubeconfig", str(cluster.kubeconfig), "--image", IMAGE, "--job-name", "train",
            "--dry-run", "-o", "yaml", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def pods(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "Pod"}


def container(pod: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    job = pod["spec"]["containers"][0]
    return job["resources"]["requests"], {e["name"]: e.get("value") for e in job["env"]}


@pytest.fixture
def efa_cluster(local_cluster_factory: Factory) -> TestCluster:
    return local_cluster_factory(nodes=[8, 8], fabric="efa:4")


def test_dry_run_shows_efa_in_proportion_and_the_fabrics_settings(efa_cluster: TestCluster) -> None:
    done = run_cli(efa_cluster, "--gpus", "14")
    assert done.returncode == 0, done.stderr
    shown = pods(done)
    worker, worker_env = container(shown["train-worker-0"])
    chief, chief_env = container(shown["train-chief"])
    assert (worker[GPU], worker[EFA], chief[GPU], chief[EFA]) == ("8", "4", "6", "3")
    for env in (worker_env, chief_env):
        assert (env["FI_PROVIDER"], env["NCCL_DEBUG"]) == ("efa", "INFO")
        assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert chief_env["DT_FABRIC"] == "efa"
    for pod in shown.values():
        assert pod["spec"]["containers"][0]["resources"]["limits"][EFA] == pod["spec"]["containers"][0][
            "resources"]["requests"][EFA]
        kubernetes_validate.validate(pod, "1.30.0", strict=True)
    assert "fabric: vpc.amazonaws.com/efa (efa), 8 of 8 free on eligible nodes" in done.stderr
    assert ("plan (attempt 1): 14 GPU(s) as 8 on node-1 with 4 vpc.amazonaws.com/efa, 6 on node-2 with 3 "
            "vpc.amazonaws.com/efa") in done.stderr


def test_a_node_short_of_efa_refuses_the_job_with_the_numbers(efa_cluster: TestCluster) -> None:
    # another job's pod holds 3 of node-2's 4 EFA devices (and no GPU)
    Kube(efa_cluster.api_client()).create({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "default"},
        "spec": {"nodeName": "node-2", "containers": [{
            "name": "c", "image": "busybox", "command": ["sleep", "3600"],
            "resources": {"requests": {EFA: "3", "cpu": "100m", "memory": "64Mi"},
                          "limits": {EFA: "3", "memory": "64Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "tolerations": [{"key": GPU, "operator": "Exists"}]}})
    done = run_cli(efa_cluster, "--gpus", "16")
    assert done.returncode == 3, done.stderr
    assert "allow to fit only 11 out of 16" in done.stderr
    assert ("node-2 offers 3 of 8 free GPU(s) (3 of 8 with vpc.amazonaws.com/efa: a pod of 4 GPUs needs 2 "
            "vpc.amazonaws.com/efa, 1 free)") in done.stderr
    # the same request over TCP fits
    tcp = run_cli(efa_cluster, "--gpus", "16", "--fabric-resource", "none")
    assert tcp.returncode == 0, tcp.stderr
    for pod in pods(tcp).values():
        requests, env = container(pod)
        assert EFA not in requests and "FI_PROVIDER" not in env


# ---- the security profile of a fabric job ---------------------------------------------------------------
FABRIC_TEMPLATE = Path(__file__).resolve().parents[2] / "manifests" / "fabric" / \
    "DistributeTrain_PodTemplate_Fabric.yaml"


def test_the_fabric_template_needs_a_privileged_namespace_and_the_default_stays_restricted(
        efa_cluster: TestCluster, tmp_path: Path) -> None:
    """The shipped variant's pods (root, IPC_LOCK) are refused by the API server's Pod Security admission at
    "restricted" and at "baseline", naming IPC_LOCK, and admitted at "privileged"; the default template's
    pods pass "restricted" with the same fabric."""
    from distributetrain.manager import manifests
    from distributetrain.placement import fabric
    from distributetrain.placement.planner import Entry
    from distributetrain.request.jobspec import JobSpec

    template = tmp_path / "pod-template.yaml"
    template.write_text(yaml.safe_load(FABRIC_TEMPLATE.read_text())["data"]["pod-template.yaml"])
    entry = Entry("node-1", 8, fabric.Share(fabric.Fabric(EFA), 4))
    for level in ("restricted", "baseline", "privileged"):
        done = efa_cluster.kubectl("create", "namespace", level)
        assert done.returncode == 0, done.stderr
        efa_cluster.kubectl("label", "namespace", level, f"pod-security.kubernetes.io/enforce={level}")
    kube = Kube(efa_cluster.api_client())
    for level in ("restricted", "baseline", "privileged"):
        spec = JobSpec.from_sources({"gpus": "16", "image": IMAGE, "namespace": level,
                                     "pod_template": str(template)}, {})
        pod = manifests.worker_pod(spec, index=0, entry=entry, owner=None)
        container = pod["spec"]["containers"][0]
        assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]  # only those added
        if level == "privileged":
            kube.create(pod)
            continue
        with pytest.raises(Forbidden, match=r"(?s)violates PodSecurity.*IPC_LOCK"):
            kube.create(pod)
    default = manifests.worker_pod(JobSpec.from_sources({"gpus": "16", "image": IMAGE, "namespace":
                                                         "restricted"}, {}), index=1, entry=entry, owner=None)
    kube.create(default)
