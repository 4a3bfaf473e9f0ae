"""Real jobs (sshd, Horovod, TensorFlow) in the namespaces a platform team hands out, applied as a user does:
`kustomize edit set namespace` over the repository's kustomization (rbac/, the shipped admission policy, the
namespace labelled Pod Security restricted, the manager) on a local cluster of real processes.

- `team`: Pod Security restricted, a LimitRange whose cpu default limit is 1 and whose memory max is 16Gi, a
  ResourceQuota on requests and limits of cpu, memory and GPUs, and the shipped ValidatingAdmissionPolicy;
  the worker's pod template sets a variable the chief's does not, which must reach the worker's rank.
- `ocp`: an OpenShift-like namespace (the local cluster's restricted-v2 SCC double, UIDs from
  openshift.io/sa.scc.uid-range) with the openshift/ component: the manager and the job pods run under an
  arbitrary UID with no passwd entry; sshd and ssh get theirs from nss_wrapper.

One cluster serves both, one after the other (its ClusterRoleBinding follows the last namespace applied), with
the smallest job that crosses sshd: 2 GPUs as a worker and the chief on two 1-GPU nodes, 1 epoch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import TestCluster, kubectl_path, wait_until

from distributetrain.naming import job_selector

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(1500),
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

REPO = Path(__file__).resolve().parents[2]
MANAGER = "distributetrain-manager"
COMMAND = ["sh", "-c", 'echo "rank=$HOROVOD_RANK only_worker=${ONLY_WORKER:-unset}"; '
                       'exec python3 /opt/distributetrain/Train.py --epochs 1']
WORKER_TEMPLATE = {"spec": {"containers": [{"name": "job", "env": [
    {"name": "ONLY_WORKER", "value": "from-the-worker-template"}]}]}}
LIMITS = """\
apiVersion: v1
kind: LimitRange
metadata: {name: team-defaults, namespace: team}
spec:
  limits:
  - type: Container
    default: {cpu: "1", memory: 2Gi}
    max: {memory: 16Gi}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: team-quota, namespace: team}
spec:
  hard: {requests.cpu: "8", limits.cpu: "8", requests.memory: 24Gi, limits.memory: 24Gi,
         requests.nvidia.com/gpu: "2"}
"""


def kustomized(tmp: Path, namespace: str, job: str, *, openshift_api_port: int | None = None) -> str:
    """The repository's kustomization moved to `namespace`, the manager asked for `job` (2 GPUs, COMMAND)
    with a worker template of its own, as a user's overlay would say it. With `openshift_api_port`, the
    openshift/ component too, its manager egress pointed at this API server's port (OpenShift's is 6443)."""
    overlay = tmp / namespace
    overlay.mkdir()
    (overlay / "worker-template.yaml").write_text(yaml.safe_dump(WORKER_TEMPLATE))
    container = "/spec/template/spec/containers/0"  # the manager Job's pod
    patch = [
        {"op": "replace", "path": f"{container}/args", "value": ["--gpus", "2", "--job-name", job]},
        {"op": "add", "path": f"{container}/env/-", "value": {"name": "DT_COMMAND",
                                                              "value": json.dumps(COMMAND)}},
        {"op": "add", "path": f"{container}/env/-", "value": {
            "name": "DT_WORKER_TEMPLATE", "value": "/etc/distributetrain/pod-template/worker-template.yaml"}}]
    config: dict[str, Any] = {
        "resources": [os.path.relpath(REPO, overlay)], "namespace": namespace,
        "patches": [{"target": {"kind": "Job", "name": MANAGER}, "patch": yaml.safe_dump(patch)}],
        "configMapGenerator": [{"name": "distributetrain-pod-template", "behavior": "merge",
                                "files": ["worker-template.yaml"]}],
        "generatorOptions": {"disableNameSuffixHash": True}}
    if openshift_api_port is not None:
        config["components"] = [os.path.relpath(REPO / "openshift", overlay)]
        to_api = [{"op": "replace", "path": "/spec/egress/1/ports",
                   "value": [{"protocol": "TCP", "port": openshift_api_port}]}]
        target = {"kind": "NetworkPolicy", "name": "distributetrain-manager-egress"}
        config["patches"].append({"target": target, "patch": yaml.safe_dump(to_api)})
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([kubectl_path(), "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "HOME": str(overlay)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def apply(cluster: TestCluster, text: str) -> None:
    done = cluster.kubectl("apply", "-f", "-", input=text)
    assert done.returncode == 0, done.stderr


def pod(cluster: TestCluster, namespace: str, name: str) -> dict[str, Any] | None:
    done = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def finished(cluster: TestCluster, namespace: str) -> tuple[dict[str, Any], str]:
    def ended() -> dict[str, Any] | None:
        done = cluster.kubectl("get", "pod", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={MANAGER}",
                               "-o", "json")
        items = json.loads(done.stdout)["items"] if done.returncode == 0 else []
        found = items[-1] if items else None
        return found if found and found["status"].get("phase") in ("Succeeded", "Failed") else None

    manager = wait_until(ended, timeout=900, interval=1.0, what=f"the manager in {namespace} to end")
    return manager, cluster.kubectl("logs", f"job/{MANAGER}", "-n", namespace, timeout=60).stdout


def trained(log: str) -> None:
    """Both ranks trained to the same weights, and each saw its own host's environment."""
    checksums = dict(re.findall(r"rank=(\d+) size=2 weights_sha256=([0-9a-f]{64})", log))
    assert sorted(checksums) == ["0", "1"], log[-4000:]
    assert len(set(checksums.values())) == 1, checksums
    assert re.findall(r"final_accuracy=([0-9.]+)", log), log[-4000:]
    # rank 0 runs on the chief, rank 1 on the worker: a variable only the worker template sets reaches it
    assert re.search(r"<stdout>:rank=0 only_worker=unset", log), log[-4000:]
    assert re.search(r"<stdout>:rank=1 only_worker=from-the-worker-template", log), log[-4000:]


@pytest.fixture
def cluster(local_cluster_factory: Any) -> TestCluster:
    made: TestCluster = local_cluster_factory(nodes=[1, 1], cpu_nodes=1, runtime="process", openshift=True)
    return made


def test_jobs_in_a_restricted_limited_namespace_and_an_openshift_like_one(cluster: TestCluster,
                                                                          tmp_path: Path) -> None:
    # -- team: restricted, LimitRange, quota, the shipped policy ---------------------------------------------
    manifests = kustomized(tmp_path, "team", "team-job")
    namespace, rest = manifests.split("---\n", 1)
    apply(cluster, namespace)  # the Namespace first: the LimitRange and quota go in before the manager
    apply(cluster, LIMITS)
    apply(cluster, rest)
    manager, log = finished(cluster, "team")
    assert manager["status"]["phase"] == "Succeeded", log[-4000:]
    trained(log)
    assert "namespace team: LimitRange team/team-defaults: Container default cpu=1, memory=2Gi" in log
    assert "namespace team: Pod Security: enforce=restricted" in log
    chief = pod(cluster, "team", "team-job-chief")
    assert chief is not None
    resources = chief["spec"]["containers"][0]["resources"]
    assert resources["limits"]["cpu"] == resources["requests"]["cpu"] == "2"  # not the LimitRange's 1
    assert chief["spec"]["securityContext"]["runAsUser"] == 10001
    left = cluster.kubectl("get", "pods,secrets,configmaps,networkpolicies", "-n", "team", "-l",
                           job_selector("team-job"), "-o", "name").stdout.split()
    assert left == ["pod/team-job-chief"]

    # -- ocp: an arbitrary UID from the namespace's range, no passwd entry -----------------------------------
    # created, not applied: OpenShift's controller sets these annotations, and a later `kubectl apply` of the
    # kustomization's Namespace keeps them (apply removes only what an earlier apply set)
    created = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ocp", "annotations": {
            "openshift.io/sa.scc.uid-range": "1000680000/10000",
            "openshift.io/sa.scc.supplemental-groups": "1000680000/10000"}}}))
    assert created.returncode == 0, created.stderr
    api_port = int(cluster.url.rsplit(":", 1)[1])
    apply(cluster, kustomized(tmp_path, "ocp", "ocp-job", openshift_api_port=api_port))
    manager, log = finished(cluster, "ocp")
    assert manager["status"]["phase"] == "Succeeded", log[-4000:]
    trained(log)
    assert "OpenShift UID range 1000680000/10000" in log
    # the SCC gave the manager and the job pods the range's first UID, and the pods carry no fixed one of ours
    assert manager["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000680000
    chief = pod(cluster, "ocp", "ocp-job-chief")
    assert chief is not None
    assert chief["metadata"]["annotations"]["openshift.io/scc"] == "restricted-v2"
    assert chief["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000680000
    assert chief["spec"]["securityContext"]["fsGroup"] == 1000680000
    # ssh logged in as the account nss_wrapper made for that UID
    assert re.search(r"ssh trainer@10\.\d+\.\d+\.\d+:2222 accepts the job key", log), log[-4000:]
    chief_log = cluster.kubectl("logs", "ocp-job-chief", "-n", "ocp").stdout
    assert "final_accuracy=" in chief_log
