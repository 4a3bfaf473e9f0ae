"""The constraints a real Kubernetes cluster puts on a job, which a first real cluster would otherwise have
caught, checked on the local cluster (it enforces them as a real one does; no real cluster is needed):
`run --dry-run` creates nothing and shows valid, "restricted" objects; pods pinned by node name; cpu and
memory counted like GPUs; volume claims and the pod network checked before anything is created; the chief's
log resumed by time across a cut stream and a log rotation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from localcluster import TestCluster, wait_until
from manager_support import IMAGE, chief_behavior, leftovers, manager_pod, orchestrator, spec

import podsecurity
from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.kube.gateway import Kube
from distributetrain.manager import dryrun
from distributetrain.request.jobspec import ManagerIdentity
from podsecurity import restricted

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(240)
CLI = str(Path(sys.executable).parent / "distributetrain")


def objects_version(cluster: TestCluster) -> dict[str, str]:
    """The resourceVersion of every list the job could write to: it moves with any write anywhere."""
    kube = Kube(cluster.api_client())
    return {kind: kube.list(kind, None)[1] for kind in ("pods", "secrets", "configmaps", "networkpolicies")}


def run_cli(cluster: TestCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DT_")}
    argv = [CLI, "run", "--kubeconfig", str(cluster.kubeconfig), "--gpus", "6", "--image", IMAGE,
            "--job-name", "train", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


# ---- --dry-run -------------------------------------------------------------------------------------------
def test_dry_run_shows_every_object_and_creates_nothing(local_cluster: TestCluster) -> None:
    before = objects_version(local_cluster)
    done = run_cli(local_cluster, "--dry-run", "-o", "yaml")
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Secret", "train-ssh"), ("NetworkPolicy", "train-network"), ("Pod", "train-worker-0"),
        ("ConfigMap", "train-hostfile"), ("Pod", "train-chief")]
    for obj in objects:
        for version in ("1.30.0", "1.37.0"):
            kubernetes_validate.validate(obj, version, strict=True)
    assert "PRIVATE KEY" not in done.stdout
    assert objects[3]["data"]["hostfile"] == "<pod IP of train-worker-0> slots=5\n"
    affinity = objects[2]["spec"]["affinity"]["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    pin = {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
    assert required["nodeSelectorTerms"] == [{"matchFields": [pin]}]
    # the manager's log went to stderr: the inventory and the plan
    assert "plan (attempt 1): 6 GPU(s) as 5 on node-1, 1 on node-3" in done.stderr
    # nothing was written anywhere in the cluster
    assert objects_version(local_cluster) == before
    assert leftovers(local_cluster, "train") == {}
    as_json = run_cli(local_cluster, "--dry-run", "-o", "json")
    listed = json.loads(as_json.stdout)
    assert listed["kind"] == "List" and listed["items"] == objects


def test_dry_run_sends_no_write_request(local_cluster: TestCluster) -> None:
    kube = Kube(local_cluster.api_client())
    objects = dryrun.preview(kube, spec(), owner=None)
    assert len(objects) == 5
    assert set(kube.requests) <= {"list", "get"}, kube.requests


def test_dry_run_refuses_what_a_run_would(local_cluster: TestCluster) -> None:
    unplaceable = run_cli(local_cluster, "--dry-run", "--gpus", "11")
    assert unplaceable.returncode == 3, unplaceable.stderr
    missing = run_cli(local_cluster, "--dry-run", "--volume-claim", "nowhere")
    assert missing.returncode == 2
    assert "PersistentVolumeClaim default/nowhere does not exist" in missing.stderr


def test_every_job_pod_passes_pod_security_restricted(local_cluster: TestCluster) -> None:
    """The dry run's pods, created in a namespace that enforces "restricted": the API server's admission
    (where the cluster enforces Pod Security) accepts them, and they break none of its rules."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "secure", "labels": {podsecurity.ENFORCE_LABEL: "restricted"}}}
    applied = local_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace))
    assert applied.returncode == 0, applied.stderr
    done = run_cli(local_cluster, "--dry-run", "--namespace", "secure")
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    pods = [o for o in objects if o["kind"] == "Pod"]
    for pod in pods:
        assert podsecurity.violations(pod) == [], pod["metadata"]["name"]
    created = local_cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(objects))
    assert created.returncode == 0, created.stderr
    # and the local scheduler honours the pin by node name
    kube = Kube(local_cluster.api_client())
    def placed() -> dict[str, str] | None:
        pods = kube.list("pods", "secure")[0]
        if not all(p["spec"].get("nodeName") for p in pods):
            return None
        return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}

    bound = wait_until(placed, timeout=30, what="the dry run's pods bound")
    assert bound == {"train-worker-0": "node-1", "train-chief": "node-3"}


# ---- the pin by node name ---------------------------------------------------------------------------------
def test_pods_are_pinned_by_node_name_not_the_hostname_label(local_cluster_factory: Factory) -> None:
    """On EKS with custom DHCP domains (or --hostname-override) kubernetes.io/hostname differs from the
    node's name: a pin on the label would leave the worker Pending forever."""
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    relabel = cluster.kubectl("label", "node", "node-1", "--overwrite",
                              "kubernetes.io/hostname=ip-10-0-1-17.eu-west-1.compute.internal")
    assert relabel.returncode == 0, relabel.stderr
    orch, recorder = orchestrator(cluster, spec(schedule_timeout="15s", retries="0"))
    assert orch.run() == 0
    assert "worker train-worker-0 created on node-1 with 5 GPUs" in recorder.text


# ---- cpu and memory ---------------------------------------------------------------------------------------
def hog(kube: Kube, node: str, *, cpu: str, memory: str) -> None:
    """A pod holding cpu and memory on `node` (and no GPU)."""
    kube.create(restricted({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"hog-{node}", "namespace": "default"},
                 "spec": {"nodeName": node, "restartPolicy": "Never",
                          "tolerations": [{"operator": "Exists"}],
                          "containers": [{"name": "hog", "image": "busybox:1.36",
                                          "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}))


def test_a_node_without_room_for_the_pods_memory_is_not_eligible(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    kube = Kube(cluster.api_client())
    hog(kube, "node-1", cpu="1", memory="505Gi")   # node-1's 5 free GPUs, 7Gi of memory left
    hog(kube, "node-2", cpu="60", memory="1Gi")    # node-2's 3 free GPUs, 4 cpu: room for 2 GPUs' worth
    orch, recorder = orchestrator(cluster, spec(gpus="4"))
    assert orch.run() == 0
    said = recorder.text
    assert "  node-1  5            0          5     no: worker needs 9Gi memory for 1 GPU, 7Gi free" in said
    assert ("  node-2  3            0          3     yes: 2 of 3: worker needs 6 cpu for 3 GPUs, 4 free"
            in said)
    assert "plan (attempt 1): 4 GPU(s) as 2 on node-2, 2 on node-3; chief 2 on node-3" in said
    # the local scheduler, with rules of its own, agreed: nothing was left Pending, the job ran


def test_more_than_the_room_is_exit_3_with_the_reasons(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory()
    hog(Kube(cluster.api_client()), "node-1", cpu="1", memory="505Gi")
    orch, recorder = orchestrator(cluster, spec(gpus="6"))
    with pytest.raises(CannotPlace) as caught:
        orch.run()
    assert caught.value.exit_code == 3
    assert "worker needs 9Gi memory for 1 GPU, 7Gi free" in recorder.text
    assert leftovers(cluster, "train") == {}


# ---- volume claims and the pod network, before anything is created ----------------------------------------
def claim(cluster: TestCluster, name: str, *modes: str) -> None:
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "10Gi"}}}}
    applied = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    assert applied.returncode == 0, applied.stderr


def test_a_read_write_once_claim_on_several_nodes_is_refused(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    claim(cluster, "ebs", "ReadWriteOnce")
    orch, _ = orchestrator(cluster, spec(volume_claim="ebs"))
    with pytest.raises(InvalidInput) as caught:
        orch.run()
    assert caught.value.exit_code == 2
    assert ("PersistentVolumeClaim default/ebs is ReadWriteOnce: it attaches to one node at a time, and the "
            "plan spans 2 nodes (node-1, node-3)") in str(caught.value)
    assert leftovers(cluster, "train") == {}
    # on one node it is fine: 2 GPUs fit on node-3
    orch, recorder = orchestrator(cluster, spec(gpus="2", volume_claim="ebs"))
    assert orch.run() == 0
    assert "plan (attempt 1): 2 GPU(s) as 2 on node-3" in recorder.text


def test_a_missing_claim_is_refused_and_read_only_many_mounts_read_only(
        local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    kube = Kube(cluster.api_client())
    orch, _ = orchestrator(cluster, spec(volume_claim="absent"))
    with pytest.raises(InvalidInput, match="PersistentVolumeClaim default/absent does not exist"):
        orch.run()
    assert leftovers(cluster, "train") == {}
    claim(cluster, "datasets", "ReadOnlyMany")
    orch, _ = orchestrator(cluster, spec(volume_claim="datasets"))
    orch.pretraining.run()
    worker = kube.get("pods", "default", "train-worker-0")
    assert worker is not None
    assert {"name": "work", "mountPath": "/workspace", "readOnly": True} in \
        worker["spec"]["containers"][0]["volumeMounts"]


def test_an_ipv6_only_pod_network_is_refused(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory()
    kube = Kube(cluster.api_client())
    owner = manager_pod(kube)
    ipv6 = ManagerIdentity(name=owner.name, uid=owner.uid, namespace="default", pod_ips=("fd00:10:244::5",))
    orch, _ = orchestrator(cluster, spec(), owner=ipv6, kube=kube)
    with pytest.raises(InvalidInput) as caught:
        orch.run()
    assert "IPv6" in str(caught.value) and "IPv4-only" in str(caught.value)
    assert leftovers(cluster, "train") == {}


# ---- the chief's log, resumed by time --------------------------------------------------------------------
def test_the_chief_log_survives_a_cut_stream_and_a_rotation(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(log="", exit_code=None)])
    runtime: Any = cluster.runtime
    orch, recorder = orchestrator(cluster, spec())
    started = orch.pretraining.run()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(orch.run_posttraining(started)), daemon=True)
    thread.start()

    def write(*lines: str) -> None:
        cluster.call(runtime.append_log("default", "train-chief", "".join(f"{line}\n" for line in lines)))
        wait_until(lambda: recorder.chief_out.getvalue().endswith(f"{lines[-1]}\n"), timeout=30,
                   what=f"{lines[-1]} in the manager's log")

    write("epoch=1", "epoch=2", "epoch=3")
    cluster.call(runtime.rotate_log("default", "train-chief"))  # the kubelet rotated: epochs 1-3 are gone
    write("epoch=4")
    cluster.restart(down_seconds=0.5)  # the stream is cut: the manager reconnects from epoch 4's second
    time.sleep(1.0)
    write("epoch=5", "epoch=6")
    cluster.call(runtime.exit_container("default", "train-chief", 0))
    thread.join(60)
    assert result == [0]
    assert orch.kube.requests["log"] >= 2
    # every line once, in order: a reconnect that skipped a count of lines would have lost epochs 5 and 6
    assert recorder.chief_out.getvalue() == "".join(f"epoch={n}\n" for n in range(1, 7))


def test_kubectl_logs_timestamps_and_since_time(local_cluster_factory: Factory) -> None:
    """The local cluster serves what the manager relies on, as a kubelet does: each line's own time, and
    sinceTime from it."""
    cluster = local_cluster_factory(behaviors=[chief_behavior(log="one\ntwo\n", exit_code=None)])
    orch, _ = orchestrator(cluster, spec())
    orch.pretraining.run()
    first = cluster.kubectl("logs", "train-chief", "--timestamps").stdout.splitlines()
    time.sleep(1.1)
    again = cluster.kubectl("logs", "train-chief", "--timestamps").stdout.splitlines()
    assert first == again and [line.split(" ", 1)[1] for line in first] == ["one", "two"]
    time.sleep(1.1)
    runtime: Any = cluster.runtime
    cluster.call(runtime.append_log("default", "train-chief", "three\n"))
    recent = cluster.kubectl("logs", "train-chief", "--since=1s").stdout
    assert recent == "three\n"
