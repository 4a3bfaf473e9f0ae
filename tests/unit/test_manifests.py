"""The objects a job creates, compared whole, and validated against the Kubernetes 1.30 and 1.37 schemas."""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate
import pytest

from distributetrain import manifests, sshkeys
from distributetrain.hostfile import HostSlots
from distributetrain.jobspec import JobSpec, ManagerIdentity
from distributetrain.planner import Entry

IMAGE = "distributetrain/base:0.1.0"
OWNER = ManagerIdentity(name="distributetrain-manager", uid="0b7c-uid", namespace="default")
OWNER_REFS = [{"apiVersion": "v1", "kind": "Pod", "name": "distributetrain-manager", "uid": "0b7c-uid",
               "controller": True}]
KEYS = sshkeys.generate("train@distributetrain")


def make_spec(**overrides: object) -> JobSpec:
    return JobSpec.from_sources({"gpus": "6", "image": IMAGE, "job_name": "train", **overrides}, {})


def labels(role: str) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "distributetrain", "distributetrain.io/job": "train",
            "distributetrain.io/role": role}


def pinned(node: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}


SSH_MOUNT = {"name": "ssh", "mountPath": "/etc/distributetrain/ssh", "readOnly": True}
SSH_VOLUME = {"name": "ssh", "secret": {"secretName": "train-ssh", "defaultMode": 0o400}}
BASE_ENV = [{"name": "DT_JOB_NAME", "value": "train"}, {"name": "DT_SSH_PORT", "value": "2222"},
            {"name": "DT_SSH_DIR", "value": "/etc/distributetrain/ssh"}]
POD_SPEC_COMMON = {"restartPolicy": "Never", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                   "enableServiceLinks": False, "terminationGracePeriodSeconds": 10,
                   "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                   "automountServiceAccountToken": False}

WORKER = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train-worker-0", "namespace": "default", "labels": labels("worker"),
                 "annotations": {"distributetrain.io/gpus": "5"}, "ownerReferences": OWNER_REFS},
    "spec": {**POD_SPEC_COMMON, "affinity": pinned("node-1"), "volumes": [SSH_VOLUME], "containers": [{
        "name": "worker", "image": IMAGE, "command": ["/usr/local/bin/distributetrain-entrypoint"],
        "args": ["worker"], "env": BASE_ENV,
        "resources": {"requests": {"nvidia.com/gpu": "5"}, "limits": {"nvidia.com/gpu": "5"}},
        "volumeMounts": [SSH_MOUNT],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {
            "drop": ["ALL"], "add": ["AUDIT_WRITE", "CHOWN", "KILL", "SETGID", "SETUID", "SYS_CHROOT"]}},
        "ports": [{"name": "ssh", "containerPort": 2222, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "periodSeconds": 2, "timeoutSeconds": 1,
                           "failureThreshold": 3},
    }]},
}

CHIEF = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train-chief", "namespace": "default", "labels": labels("chief"),
                 "annotations": {"distributetrain.io/gpus": "1"}, "ownerReferences": OWNER_REFS},
    "spec": {**POD_SPEC_COMMON, "affinity": pinned("node-3"),
             "volumes": [SSH_VOLUME, {"name": "hostfile", "configMap": {"name": "train-hostfile",
                                                                         "defaultMode": 0o444}}],
             "containers": [{
                 "name": "launcher", "image": IMAGE, "command": ["/usr/local/bin/distributetrain-entrypoint"],
                 "args": ["launcher", "--", "python3", "/opt/distributetrain/Train.py"],
                 "env": [*BASE_ENV,
                         {"name": "DT_HOSTFILE", "value": "/etc/distributetrain/hostfile/hostfile"},
                         {"name": "DT_NUM_PROCESSES", "value": "6"}, {"name": "DT_SLOTS", "value": "1"},
                         {"name": "DT_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "DT_TRANSPORT", "value": "gloo"},
                         {"name": "DT_SSH_TIMEOUT", "value": "120"}],
                 "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                 "volumeMounts": [SSH_MOUNT, {"name": "hostfile", "readOnly": True,
                                              "mountPath": "/etc/distributetrain/hostfile"}],
                 "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
             }]},
}

HOSTFILE = {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": "train-hostfile", "namespace": "default", "labels": labels("hostfile"),
                         "ownerReferences": OWNER_REFS},
            "data": {"hostfile": "10.244.1.2 slots=5\n10.244.2.7 slots=3\n"}}

JOB_PODS = {"matchLabels": {"app.kubernetes.io/managed-by": "distributetrain",
                            "distributetrain.io/job": "train"}}
NETWORK = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "train-network", "namespace": "default", "labels": labels("network"),
                        "ownerReferences": OWNER_REFS},
           "spec": {"podSelector": JOB_PODS, "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": JOB_PODS}]}]}}

SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
          "metadata": {"name": "train-ssh", "namespace": "default", "labels": labels("ssh"),
                       "ownerReferences": OWNER_REFS},
          "data": {"id_ed25519": base64.b64encode(KEYS.private_openssh()).decode(),
                   "id_ed25519.pub": base64.b64encode((KEYS.public + "\n").encode()).decode(),
                   "authorized_keys": base64.b64encode(KEYS.authorized_keys().encode()).decode()}}

CASES = {
    "worker": (lambda s: manifests.worker_pod(s, index=0, entry=Entry("node-1", 5), owner=OWNER), WORKER),
    "chief": (lambda s: manifests.chief_pod(s, entry=Entry("node-3", 1), owner=OWNER), CHIEF),
    "hostfile": (lambda s: manifests.hostfile_configmap(
        s, [HostSlots("10.244.2.7", 3), HostSlots("10.244.1.2", 5)], owner=OWNER), HOSTFILE),
    "network": (lambda s: manifests.network_policy(s, owner=OWNER), NETWORK),
    "secret": (lambda s: manifests.ssh_secret(s, KEYS, owner=OWNER), SECRET),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_whole_object(case: str) -> None:
    build, expected = CASES[case]
    assert build(make_spec()) == expected


ALL_OPTIONS = {"volume_claim": "train-data", "mount_path": "/data", "active_deadline": "90m",
               "network_interface": "eth0", "node_selector": ["gpu=a100"],
               "image_pull_policy": "IfNotPresent",
               "service_account": "trainer", "tolerations": ["dedicated=ml:NoSchedule"], "ssh_port": "2022",
               "transport": "mpi", "command": ["python3", "/data/Train.py", "--epochs", "3"]}


def test_options_reach_the_pods() -> None:
    spec = make_spec(**ALL_OPTIONS)
    worker = manifests.worker_pod(spec, index=2, entry=Entry("node-7", 4), owner=None)
    chief = manifests.chief_pod(spec, entry=Entry("node-3", 2), owner=None)
    for pod in (worker, chief):
        pod_spec, container = pod["spec"], pod["spec"]["containers"][0]
        assert "ownerReferences" not in pod["metadata"]
        assert pod_spec["nodeSelector"] == {"gpu": "a100"}
        assert pod_spec["activeDeadlineSeconds"] == 5400
        assert pod_spec["serviceAccountName"] == "trainer" and "automountServiceAccountToken" not in pod_spec
        assert {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in \
            pod_spec["tolerations"]
        assert {"name": "work", "persistentVolumeClaim": {"claimName": "train-data"}} in pod_spec["volumes"]
        assert {"name": "work", "mountPath": "/data"} in container["volumeMounts"]
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert {"name": "DT_SSH_PORT", "value": "2022"} in container["env"]
    assert worker["metadata"]["name"] == "train-worker-2"
    assert worker["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 2022}
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
    assert env["DT_NETWORK_INTERFACE"] == "eth0" and env["DT_TRANSPORT"] == "mpi" and env["DT_SLOTS"] == "2"
    assert chief["spec"]["containers"][0]["args"] == ["launcher", "--", "python3", "/data/Train.py",
                                                      "--epochs", "3"]


def test_no_owner_reference_across_namespaces() -> None:
    # the garbage collector would treat a cross-namespace owner as absent and delete the object at once
    spec = make_spec(namespace="ml")
    assert "ownerReferences" not in manifests.network_policy(spec, owner=OWNER)["metadata"]
    same = ManagerIdentity(name="m", uid="u", namespace="ml")
    assert manifests.network_policy(spec, owner=same)["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_private_key_only_in_the_secret() -> None:
    spec = make_spec(**ALL_OPTIONS)
    secret_body = KEYS.private_openssh().decode().splitlines()[1]
    others = [manifests.worker_pod(spec, index=0, entry=Entry("n", 1), owner=OWNER),
              manifests.chief_pod(spec, entry=Entry("n", 1), owner=OWNER),
              manifests.network_policy(spec, owner=OWNER),
              manifests.hostfile_configmap(spec, [HostSlots("10.0.0.1", 1)], owner=OWNER)]
    for obj in others:
        text = json.dumps(obj)
        assert secret_body not in text and base64.b64encode(KEYS.private_openssh()).decode() not in text
    decoded = base64.b64decode(manifests.ssh_secret(spec, KEYS, owner=OWNER)["data"]["id_ed25519"])
    assert decoded == KEYS.private_openssh()


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
@pytest.mark.parametrize("options", [{}, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_every_manifest_validates_strictly(version: str, options: dict[str, object]) -> None:
    spec = make_spec(**options)
    for build, _ in CASES.values():
        kubernetes_validate.validate(build(spec), version, strict=True)
