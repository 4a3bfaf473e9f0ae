"""The objects a job creates, compared whole, and validated against the Kubernetes 1.30 and 1.37 schemas; the
pod template merged under and over the manager's parts; every job pod within Pod Security "restricted"."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import podsecurity
from distributetrain import naming
from distributetrain.hostfile import HostSlots
from distributetrain.manager import hostfilepush, manifests, sshkeys
from distributetrain.placement.planner import Entry
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

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
    """By the node's name, as the DaemonSet controller pins: the hostname label may differ from it."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}


def resources(gpus: int) -> dict[str, Any]:
    """2 cpu and 8Gi per GPU, /dev/shm's 1Gi counted in the memory, requested = limited; no cpu limit."""
    memory = f"{8 * gpus + 1}Gi"
    return {"requests": {"cpu": str(2 * gpus), "memory": memory, "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": memory, "nvidia.com/gpu": str(gpus)}}


SSH_MOUNT = {"name": "ssh", "mountPath": "/etc/distributetrain/ssh", "readOnly": True}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}
SSH_VOLUME = {"name": "ssh", "secret": {"secretName": "train-ssh", "defaultMode": 0o440}}
SHM_VOLUME = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
# the defaults every job pod gets (a template may override each by name), then the manager's own
NCCL_ENV = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"}]
BASE_ENV = [{"name": "DT_JOB_NAME", "value": "train"}, {"name": "DT_SSH_PORT", "value": "2222"},
            {"name": "DT_SSH_DIR", "value": "/etc/distributetrain/ssh"}]
ANNOTATIONS = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled",
               "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
               "karpenter.sh/do-not-disrupt": "true"}
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
POD_SPEC_COMMON: dict[str, Any] = {
    "restartPolicy": "Never", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    "enableServiceLinks": False, "terminationGracePeriodSeconds": 60,
    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                        "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
    "automountServiceAccountToken": False}

WORKER = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train-worker-0", "namespace": "default", "labels": labels("worker"),
                 "annotations": {**ANNOTATIONS, "distributetrain.io/gpus": "5"},
                 "ownerReferences": OWNER_REFS},
    "spec": {**POD_SPEC_COMMON, "affinity": pinned("node-1"), "volumes": [SSH_VOLUME, SHM_VOLUME],
             "containers": [{
        "name": "worker", "image": IMAGE, "command": ["/usr/local/bin/distributetrain-entrypoint"],
        "args": ["worker"], "env": [*NCCL_ENV, *BASE_ENV], "resources": resources(5),
        "volumeMounts": [SSH_MOUNT, SHM_MOUNT],
        "securityContext": RESTRICTED,
        "ports": [{"name": "ssh", "containerPort": 2222, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "periodSeconds": 1, "timeoutSeconds": 1,
                           "failureThreshold": 3},
    }]},
}

CHIEF = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train-chief", "namespace": "default", "labels": labels("chief"),
                 "annotations": {**ANNOTATIONS, "distributetrain.io/gpus": "1"},
                 "ownerReferences": OWNER_REFS},
    "spec": {**POD_SPEC_COMMON, "affinity": pinned("node-3"),
             "volumes": [SSH_VOLUME, {"name": "hostfile", "configMap": {"name": "train-hostfile",
                                                                         "defaultMode": 0o444}}, SHM_VOLUME],
             "containers": [{
                 "name": "launcher", "image": IMAGE, "command": ["/usr/local/bin/distributetrain-entrypoint"],
                 "args": ["launcher", "--", "python3", "/opt/distributetrain/Train.py"],
                 "env": [*NCCL_ENV, *BASE_ENV,
                         {"name": "DT_HOSTFILE", "value": "/etc/distributetrain/hostfile/hostfile"},
                         {"name": "DT_NUM_PROCESSES", "value": "6"}, {"name": "DT_SLOTS", "value": "1"},
                         {"name": "DT_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "DT_POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
                         {"name": "DT_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                         {"name": "DT_TRANSPORT", "value": "gloo"},
                         {"name": "DT_SSH_TIMEOUT", "value": "120"}],
                 "resources": resources(1),
                 "volumeMounts": [SSH_MOUNT, {"name": "hostfile", "readOnly": True,
                                              "mountPath": "/etc/distributetrain/hostfile"}, SHM_MOUNT],
                 "securityContext": RESTRICTED,
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
           "spec": {"podSelector": JOB_PODS, "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{"from": [{"podSelector": JOB_PODS}]}],
                    # egress open by default: one empty rule, which a default-deny egress cannot cut
                    "egress": [{}]}}

SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
          "metadata": {"name": "train-ssh", "namespace": "default", "labels": labels("ssh"),
                       "ownerReferences": OWNER_REFS},
          "data": {"id_ed25519": base64.b64encode(KEYS.private_openssh()).decode(),
                   "id_ed25519.pub": base64.b64encode((KEYS.public + "\n").encode()).decode(),
                   "authorized_keys": base64.b64encode(KEYS.authorized_keys().encode()).decode()}}

CASES: dict[str, tuple[Callable[[JobSpec], dict[str, Any]], dict[str, Any]]] = {
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
               "image_pull_secrets": ["regcred"], "allow_egress": ["0.0.0.0/0"], "cpu_per_gpu": "4",
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


# ---- the pod template, merged under and over the manager's parts ------------------------------------------
TEMPLATE = """
metadata:
  labels: {team: ml, distributetrain.io/role: mine}
  annotations: {sidecar.istio.io/inject: "true", karpenter.sh/do-not-disrupt: "true"}
spec:
  priorityClassName: ml-training
  runtimeClassName: nvidia
  imagePullSecrets: [{name: regcred}]
  tolerations: [{key: spot, operator: Exists}]
  nodeSelector: {pool: gpu}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: zone, operator: In, values: [a]}]
          - matchExpressions: [{key: zone, operator: In, values: [b]}]
  securityContext: {runAsUser: 2000}
  volumes: [{name: datasets, persistentVolumeClaim: {claimName: imagenet, readOnly: true}}]
  containers:
    - name: job
      env: [{name: NCCL_DEBUG, value: INFO}]
      resources: {requests: {cpu: "12"}, limits: {rdma/hca: "1"}}
      volumeMounts: [{name: datasets, mountPath: /datasets, readOnly: true}]
    - name: metrics
      image: prom/node-exporter:v1.8.0
      resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 64Mi}}
"""


def template_spec(tmp_path: Path, text: str = TEMPLATE, **overrides: object) -> JobSpec:
    path = tmp_path / "pod-template.yaml"
    path.write_text(text)
    return make_spec(pod_template=str(path), image_pull_secrets=["other"], **overrides)


def test_the_template_is_laid_under_and_the_managers_parts_over(tmp_path: Path) -> None:
    spec = template_spec(tmp_path)
    pod = manifests.worker_pod(spec, index=0, entry=Entry("node-1", 4), owner=OWNER)
    meta, pod_spec = pod["metadata"], pod["spec"]
    job, sidecar = pod_spec["containers"]
    # labels: the user's kept, ours win; annotations: the template overrides our defaults, ours (gpus) win
    assert meta["labels"] == {"team": "ml", **labels("worker")}
    assert meta["annotations"] == {"sidecar.istio.io/inject": "true", "karpenter.sh/do-not-disrupt": "true",
                                   "linkerd.io/inject": "disabled",
                                   "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                                   "distributetrain.io/gpus": "4"}
    assert meta["ownerReferences"] == OWNER_REFS
    # the template's fields pass through; lists are joined
    assert (pod_spec["priorityClassName"], pod_spec["runtimeClassName"]) == ("ml-training", "nvidia")
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]
    assert pod_spec["tolerations"] == [{"key": "spot", "operator": "Exists"},
                                       {"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert pod_spec["nodeSelector"] == {"pool": "gpu"}
    assert [v["name"] for v in pod_spec["volumes"]] == ["datasets", "ssh", "dshm"]
    # the pin is ANDed into every required term of the template's (terms are ORed)
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    pin = [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]
    assert terms == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}], "matchFields": pin},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}], "matchFields": pin}]
    # securityContext: the template's field wins, our defaults fill the rest
    assert pod_spec["securityContext"] == {**POD_SPEC_COMMON["securityContext"], "runAsUser": 2000}
    # the job container: ours by name, image, command; env and mounts joined; cpu the template's, memory ours
    assert (job["name"], job["image"], job["args"]) == ("worker", IMAGE, ["worker"])
    # the template's NCCL_DEBUG wins over the default; the default it does not set is added; (DT_POD_ENV: the
    # template's variables, which the worker passes to the ranks it hosts)
    assert job["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}, NCCL_ENV[1], *BASE_ENV,
                          {"name": "DT_POD_ENV", "value": "NCCL_DEBUG"}]
    assert job["volumeMounts"] == [{"name": "datasets", "mountPath": "/datasets", "readOnly": True},
                                   SSH_MOUNT, SHM_MOUNT]
    assert job["resources"] == {"requests": {"cpu": "12", "memory": "33Gi", "nvidia.com/gpu": "4"},
                                "limits": {"rdma/hca": "1", "memory": "33Gi", "nvidia.com/gpu": "4"}}
    assert job["securityContext"] == RESTRICTED
    assert sidecar["name"] == "metrics" and "securityContext" not in sidecar  # kept as written
    for version in ("1.30.0", "1.37.0"):
        kubernetes_validate.validate(pod, version, strict=True)


def test_the_inventory_counts_what_the_pod_would_request(tmp_path: Path) -> None:
    spec = template_spec(tmp_path)
    demand = manifests.pod_demand(spec, "worker")
    # cpu: the template's 12 + the sidecar's 100m; memory: 8Gi per GPU + 1Gi /dev/shm + the sidecar's 64Mi
    assert demand.requests is not None
    assert demand.requests(2) == {"cpu": Fraction(121, 10), "memory": Fraction(17 * 2**30 + 64 * 2**20),
                                  "rdma/hca": Fraction(1)}
    assert demand.node_selector == {"pool": "gpu"}
    assert [str(t) for t in demand.tolerations] == ["spot", "nvidia.com/gpu"]
    assert len(demand.node_affinity) == 2  # the template's own terms, not the pin


def test_root_through_the_template(tmp_path: Path) -> None:
    """Root stays possible: the template overrides the non-root defaults and gives sshd its capabilities."""
    spec = template_spec(tmp_path, """
spec:
  securityContext: {runAsNonRoot: false, runAsUser: 0, runAsGroup: 0}
  containers:
    - securityContext:
        capabilities: {add: [AUDIT_WRITE, CHOWN, KILL, SETGID, SETUID, SYS_CHROOT]}
""")
    pod = manifests.worker_pod(spec, index=0, entry=Entry("node-1", 1), owner=None)
    assert pod["spec"]["securityContext"]["runAsUser"] == 0
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "capabilities": {"add": ["AUDIT_WRITE", "CHOWN", "KILL", "SETGID", "SETUID", "SYS_CHROOT"],
                         "drop": ["ALL"]}, "allowPrivilegeEscalation": False}
    assert podsecurity.violations(pod)  # and it is no longer "restricted"


@pytest.mark.parametrize("options", [{}, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_every_job_pod_is_restricted(options: dict[str, object]) -> None:
    spec = make_spec(**options)
    for pod in (manifests.worker_pod(spec, index=0, entry=Entry("n", 3), owner=OWNER),
                manifests.chief_pod(spec, entry=Entry("n", 1), owner=OWNER)):
        assert podsecurity.violations(pod) == []


def test_requests_flags_and_shm() -> None:
    pod = manifests.worker_pod(make_spec(cpu_per_gpu="500m", memory_per_gpu="3Gi", shm_size="512Mi"),
                               index=0, entry=Entry("n", 3), owner=None)
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1500m", "memory": "9728Mi", "nvidia.com/gpu": "3"},
        "limits": {"memory": "9728Mi", "nvidia.com/gpu": "3"}}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}} in pod["spec"]["volumes"]
    bare = manifests.worker_pod(make_spec(memory_per_gpu="0", shm_size="0"), index=0, entry=Entry("n", 3),
                                owner=None)
    assert bare["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "6", "nvidia.com/gpu": "3"},
                                                          "limits": {"nvidia.com/gpu": "3"}}
    assert [v["name"] for v in bare["spec"]["volumes"]] == ["ssh"]


def test_a_read_only_many_claim_is_mounted_read_only() -> None:
    pod = manifests.chief_pod(make_spec(volume_claim="data"), entry=Entry("n", 1), owner=None,
                              read_only_claim=True)
    assert {"name": "work", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}} in \
        pod["spec"]["volumes"]
    assert {"name": "work", "mountPath": "/workspace", "readOnly": True} in \
        pod["spec"]["containers"][0]["volumeMounts"]


def test_restricted_egress_reaches_the_job_dns_and_what_is_allowed() -> None:
    """--allow-egress implies --restrict-egress: job pods, DNS wherever the cluster runs it (kube-dns,
    NodeLocal DNSCache, OpenShift DNS on 5353), and each entry, with its port when it names one."""
    spec = make_spec(allow_egress=["10.20.0.0/16", "0.0.0.0/0", "10.9.0.0/16:443", "10.8.0.10/32:53/udp",
                                   "[fd00::/8]:443"])
    assert spec.allow_egress[2:] == ("10.9.0.0/16:443/TCP", "10.8.0.10/32:53/UDP", "[fd00::/8]:443/TCP")
    policy = manifests.network_policy(spec, owner=None)
    egress = policy["spec"]["egress"]
    assert egress[0] == {"to": [{"podSelector": JOB_PODS}]}
    kube_system = {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert egress[1] == {"to": [{"namespaceSelector": kube_system,
                                 "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},
                                {"ipBlock": {"cidr": "169.254.20.10/32"}}],
                         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert egress[2]["to"][0]["namespaceSelector"] == {"matchLabels": {
        "kubernetes.io/metadata.name": "openshift-dns"}}
    assert egress[2]["ports"] == [{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}]
    assert egress[3:] == [
        {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "0.0.0.0/0"}}]},
        {"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}, {"ipBlock": {"cidr": "fd00::/8"}}],
         "ports": [{"protocol": "TCP", "port": 443}]},
        {"to": [{"ipBlock": {"cidr": "10.8.0.10/32"}}], "ports": [{"protocol": "UDP", "port": 53}]}]
    kubernetes_validate.validate(policy, "1.37.0", strict=True)
    restricted = manifests.network_policy(make_spec(restrict_egress=True), owner=None)
    assert restricted["spec"]["egress"] == egress[:3]
    assert "egress only to them, DNS" in manifests.egress_text(spec)
    assert "egress open" in manifests.egress_text(make_spec())


def test_dry_run_placeholders_hold_no_key() -> None:
    spec = make_spec()
    secret = manifests.placeholder_secret(spec, owner=OWNER)
    assert sorted(secret["data"]) == ["authorized_keys", "id_ed25519", "id_ed25519.pub"]
    assert {base64.b64decode(v).decode() for v in secret["data"].values()} == {manifests.PLACEHOLDER_KEY}
    hostfile = manifests.placeholder_hostfile(spec, [("train-worker-0", 5)], owner=OWNER)
    assert hostfile["data"] == {"hostfile": "<pod IP of train-worker-0> slots=5\n"}
    for obj in (secret, hostfile):
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def test_the_gang_resists_voluntary_disruption_unless_asked_not_to() -> None:
    spec = make_spec()
    budget = manifests.disruption_budget(spec, pods=3, owner=OWNER)
    assert budget == {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "train-disruption", "namespace": "default", "labels": labels("disruption"),
                     "ownerReferences": OWNER_REFS},
        "spec": {"minAvailable": 3, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                 "selector": {"matchLabels": {"app.kubernetes.io/managed-by": "distributetrain",
                                              "distributetrain.io/job": "train"}}}}
    bare = dataclasses.replace(spec, disruption_budget=False, priority_class="ml-high")
    pod = manifests.worker_pod(bare, index=0, entry=Entry("node-1", 1), owner=None)
    assert "karpenter.sh/do-not-disrupt" not in pod["metadata"]["annotations"]
    assert "cluster-autoscaler.kubernetes.io/safe-to-evict" not in pod["metadata"]["annotations"]
    assert pod["spec"]["priorityClassName"] == "ml-high"


def test_a_worker_names_its_templates_variables_for_its_ranks(tmp_path: Path) -> None:
    """The worker's entrypoint saves the variables its template sets (DT_POD_ENV) for the ranks it hosts."""
    worker_template = tmp_path / "worker.yaml"
    worker_template.write_text(yaml.safe_dump({"spec": {"containers": [{"name": "job", "env": [
        {"name": "ONLY_WORKER", "value": "yes"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}))
    spec = make_spec(worker_template=str(worker_template))
    worker = manifests.worker_pod(spec, index=0, entry=Entry("n", 1), owner=None)
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["DT_POD_ENV"] == "ONLY_WORKER,NODE"
    chief = manifests.chief_pod(spec, entry=Entry("n", 1), owner=None)
    assert "DT_POD_ENV" not in {e["name"] for e in chief["spec"]["containers"][0]["env"]}
    plain = manifests.worker_pod(make_spec(), index=0, entry=Entry("n", 1), owner=None)
    assert "DT_POD_ENV" not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(("hang_timeout", "stall"),
                         [(None, None), ("20s", "10"), ("90s", "45"), ("1h", "60")])
def test_the_chief_sets_horovods_stall_check_below_the_hang_timeout(hang_timeout: str | None,
                                                                    stall: str | None) -> None:
    spec = make_spec(hang_timeout=hang_timeout)
    pod = manifests.chief_pod(spec, entry=Entry("node-1", 1), owner=None)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env.get("HOROVOD_STALL_CHECK_TIME_SECONDS") == stall


def test_the_chief_nudge_is_one_annotation_and_the_admission_policy_allows_that_one() -> None:
    """After each hostfile write the manager patches its chief with this and nothing else
    (manager/hostfilepush.py); rbac/'s policy refuses any other change of a pod by the manager."""
    assert hostfilepush.hosts_version_patch("4711") == {
        "metadata": {"annotations": {"distributetrain.io/hosts-version": "4711"}}}
    rbac = Path(__file__).resolve().parents[2] / "rbac"
    policy = (rbac / "DistributeTrain_AdmissionPolicy.yaml").read_text()
    assert policy.count(f"k == '{naming.HOSTS_VERSION_ANNOTATION}'") == 2
