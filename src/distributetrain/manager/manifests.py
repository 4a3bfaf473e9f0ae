"""Builders of every object a job creates: plain dicts as the API takes them. No I/O here.

The contract with the base image (base-image/) is the entrypoint, its two modes, its non-root account and the
DT_* environment variables, all named in naming.py: a worker runs sshd on the job's port, the chief runs the
launcher. Job pods start from the user's pod template (podtemplate.py lays the manager's parts on it), run as
the image's non-root user with no capability and no privilege escalation (Pod Security "restricted"), request
cpu and memory per GPU (never BestEffort) and get a memory-backed /dev/shm. A pod that talks across nodes
over a fabric requests the plan's share of the node's fabric devices with its GPUs (planner.Entry.fabric)
and gets the fabric's NCCL and libfabric settings as defaults the template may override (`fabric_env`).
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from distributetrain import hostfile, naming
from distributetrain.manager import watchdog
from distributetrain.manager.sshkeys import KeyPair
from distributetrain.placement import fabric, namespacefit
from distributetrain.placement.inventory import PodDemand
from distributetrain.placement.namespacefit import NamespacePolicies
from distributetrain.placement.planner import Entry
from distributetrain.placement.podrequests import pod_requests
from distributetrain.placement.tolerations import parse_tolerations
from distributetrain.quantity import format_quantity
from distributetrain.request import podtemplate
from distributetrain.request.fieldparsers import split_cidr_port
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

# Mounted read-only, owned by root and the pods' fsGroup: the non-root user reads the keys through the group
# and the entrypoint copies them to 0600 files it owns (ssh and sshd refuse group-readable keys).
SSH_FILE_MODE = 0o440
HOSTFILE_FILE_MODE = 0o444
# A graceful notice's time (a drain, a preemption): the worker's entrypoint tells its ranks, rank 0 saves a
# checkpoint of the step (Train.py); a pod with no training running ends at once, whatever this says.
GRACE_SECONDS = 60
# what the chief's Horovod and launcher wait beyond the manager's --replace-timeout, so that the manager, who
# knows why, is the one that gives up: a kubelet's ConfigMap refresh (up to about 90 s) and a worker's start
RECOVERY_MARGIN = 180
# NCCL's init and network lines name the transport it chose (NET/OFI, NET/IB, NET/Socket), which the manager
# reports (observe/chieflog.py) and the pre-flight checks; INIT,NET keeps them to about a dozen per rank.
# A template that sets NCCL_DEBUG=WARN (after a first run proved the fabric) quiets them.
NCCL_DEBUG_ENV = (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET"))
# EFA through libfabric: the efa provider only, so a pod without its device fails over to NCCL's own socket
# transport, which the pre-flight names, rather than libfabric's tcp provider. FI_EFA_USE_DEVICE_RDMA is not
# set: aws-ofi-nccl >= 1.7 with libfabric >= 1.18 (the base image's) enable RDMA where the instance has it,
# and forcing it on an EFA instance without RDMA read fails (aws/aws-ofi-nccl doc/efa-env-var.md).
FABRIC_ENV = {fabric.EFA: (("FI_PROVIDER", "efa"),), fabric.IB: ()}
# where a cluster's DNS answers, for a job whose egress is restricted: kube-dns (or CoreDNS under its label)
# on port 53, NodeLocal DNSCache on its link-local address (the kubelet's --cluster-dns there), and
# OpenShift's DNS operator's pods, which listen on 5353 behind the dns-default Service's 53
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
NODE_LOCAL_DNS = "169.254.20.10/32"
OPENSHIFT_DNS_NAMESPACE = "openshift-dns"
OPENSHIFT_DNS_POD_LABELS = {"dns.operator.openshift.io/daemonset-dns": "default"}
OPENSHIFT_DNS_PORT = 5353


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def owner_references(owner: ManagerIdentity | None, namespace: str, *, controller: bool = True
                     ) -> list[dict[str, Any]]:
    """The manager's Job as owner when it runs under one (its next pod adopts the job; deleting the Job
    garbage-collects it), else the manager pod. Not the controller reference: the Job controller would release
    our pods from it, as pods its selector does not match. Only within the owner's own namespace: the garbage
    collector treats a cross-namespace owner as absent and would delete the object at once. Not the controller
    either with `controller` False: Kueue leaves a pod whose controller is a Pod to that pod's own queueing
    (pod_webhook.go, IsOwnerManagedByKueue), so a queued gang must have none."""
    if owner is None or (owner.namespace is not None and owner.namespace != namespace):
        return []
    if owner.durable:
        return [{"apiVersion": "batch/v1", "kind": "Job", "name": owner.job_name, "uid": owner.job_uid}]
    ref: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "name": owner.name, "uid": owner.uid}
    if controller:
        ref["controller"] = True
    return [ref]


def metadata(spec: JobSpec, name: str, role: str, owner: ManagerIdentity | None,
             annotations: Mapping[str, str] | None = None, *, labels: Mapping[str, str] | None = None,
             controller: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": spec.namespace,
                            "labels": {**(labels or {}), **naming.job_labels(spec.job_name, role)}}
    if annotations:
        meta["annotations"] = dict(annotations)
    refs = owner_references(owner, spec.namespace, controller=controller)
    if refs:
        meta["ownerReferences"] = refs
    return meta


def disruption_budget(spec: JobSpec, *, pods: int, owner: ManagerIdentity | None) -> dict[str, Any]:
    """No voluntary eviction of any of the job's `pods` (minAvailable: all of them): a `kubectl drain` of
    their node waits, and the eviction API answers 429, while the job runs. A whole number, not
    maxUnavailable 0 or 100%: those need each pod's controller to have a scale subresource, and job pods
    have none (the disruption controller's getExpectedPodCount would report SyncFailed). Pods that are not
    Ready are evictable (unhealthyPodEvictionPolicy AlwaysAllow), so a gang that never started blocks no
    drain."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": metadata(spec, naming.disruption_budget_name(spec.job_name), naming.ROLE_DISRUPTION,
                                 owner),
            "spec": {"minAvailable": pods, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                     "selector": {"matchLabels": naming.job_pods_selector(spec.job_name)}}}


def ssh_secret(spec: JobSpec, keys: KeyPair, *, owner: ManagerIdentity | None) -> dict[str, Any]:
    """The job's key pair and authorized_keys. Type Opaque, not kubernetes.io/ssh-auth: that type insists on a
    key named `ssh-privatekey`, which would need an items remap on every mount to become the file name ssh
    looks for; with Opaque the key names are the file names. Immutable: it never changes during a job."""
    secret = ssh_secret_shape(spec, owner=owner)
    secret["data"] = {naming.SSH_PRIVATE_KEY: _b64(keys.private_openssh()),
                      naming.SSH_PUBLIC_KEY: _b64(keys.public + "\n"),
                      naming.SSH_AUTHORIZED_KEYS: _b64(keys.authorized_keys())}
    return secret


PLACEHOLDER_KEY = "(made by the manager when the job starts; never shown)"


def placeholder_secret(spec: JobSpec, *, owner: ManagerIdentity | None) -> dict[str, Any]:
    """The job's Secret as a dry run shows it: its keys, with a placeholder instead of key material."""
    secret = ssh_secret_shape(spec, owner=owner)
    secret["data"] = {key: _b64(PLACEHOLDER_KEY) for key in secret["data"]}
    return secret


def ssh_secret_shape(spec: JobSpec, *, owner: ManagerIdentity | None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
        "metadata": metadata(spec, naming.ssh_secret_name(spec.job_name), naming.ROLE_SSH, owner),
        "data": dict.fromkeys((naming.SSH_PRIVATE_KEY, naming.SSH_PUBLIC_KEY, naming.SSH_AUTHORIZED_KEYS),
                              ""),
    }


def placeholder_hostfile(spec: JobSpec, workers: Iterable[tuple[str, int]], *,
                         owner: ManagerIdentity | None) -> dict[str, Any]:
    """The hostfile ConfigMap as a dry run shows it: each worker's pod IP is known only once it runs."""
    workers = list(workers)
    lines = "".join(f"<pod IP of {name}> slots={slots}\n" for name, slots in workers)
    names = "".join(f"<pod IP of {name}> {name}\n" for name, _ in workers)
    return _hostfile_object(spec, lines, names, owner)


def hostfile_configmap(spec: JobSpec, workers: Iterable[hostfile.HostSlots], *,
                       owner: ManagerIdentity | None, names: Mapping[str, str] | None = None,
                       mutable: bool = False, nodes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The workers' `IP slots=N` lines, sorted; the launcher in the chief adds its own line. A job that
    survives lost workers (spec.recovery) also gets `names` (`IP POD`, from `names`: address -> pod), and its
    ConfigMap is not immutable: the manager keeps it current (keeper.py). `mutable`: a gang made at once
    (groupstart.py) gets it empty first and its lines once the workers run. `nodes` (address -> node): the
    `IP NODE` lines by which the chief's pre-flight names the node of a pod it blames."""
    workers = list(workers)
    made = _hostfile_object(spec, hostfile.render(workers), hostnames_text(workers, names or {}), owner)
    if nodes:
        made["data"][naming.NODES_KEY] = "".join(f"{ip} {nodes[ip]}\n" for ip in sorted(nodes))
    if mutable:
        made["immutable"] = False
    return made


def hostnames_text(workers: Iterable[hostfile.HostSlots], names: Mapping[str, str]) -> str:
    """`IP POD` lines in the hostfile's order: elastic Horovod knows each worker by its pod's name, never
    reused, where an address may come back for a new pod (and Horovod never takes back a host it saw fail)."""
    return "".join(f"{w.host} {names[w.host]}\n" for w in hostfile.sort_hosts(workers) if w.host in names)


def _hostfile_object(spec: JobSpec, lines: str, names: str, owner: ManagerIdentity | None) -> dict[str, Any]:
    data = {naming.HOSTFILE_KEY: lines}
    if spec.recovery:
        data[naming.HOSTNAMES_KEY] = names
    return {
        "apiVersion": "v1", "kind": "ConfigMap", "immutable": spec.recovery is None,
        "metadata": metadata(spec, naming.hostfile_configmap_name(spec.job_name), naming.ROLE_HOSTFILE,
                             owner),
        "data": data,
    }


def restricts_egress(spec: JobSpec) -> bool:
    """--restrict-egress, or --allow-egress given (which restricted egress before it was open by default)."""
    return spec.restrict_egress or bool(spec.allow_egress)


def _job_pods(spec: JobSpec) -> dict[str, Any]:
    return {"matchLabels": {naming.MANAGED_BY_KEY: naming.MANAGED_BY, naming.JOB_LABEL: spec.job_name}}


def _both(port: int) -> list[dict[str, Any]]:
    return [{"protocol": "UDP", "port": port}, {"protocol": "TCP", "port": port}]


def egress_rules(spec: JobSpec) -> list[dict[str, Any]]:
    """The job pods' egress: everywhere (one empty rule, which also outweighs a namespace's default-deny
    egress policy), or, restricted, the job's own pods on every port, the cluster DNS wherever it runs
    (kube-dns and NodeLocal DNSCache on 53, OpenShift DNS on 5353) and the --allow-egress entries."""
    if not restricts_egress(spec):
        return [{}]
    namespace_of = "kubernetes.io/metadata.name"
    kube_dns = {"namespaceSelector": {"matchLabels": {namespace_of: DNS_NAMESPACE}},
                "podSelector": {"matchLabels": dict(DNS_POD_LABELS)}}
    openshift_dns = {"namespaceSelector": {"matchLabels": {namespace_of: OPENSHIFT_DNS_NAMESPACE}},
                     "podSelector": {"matchLabels": dict(OPENSHIFT_DNS_POD_LABELS)}}
    rules: list[dict[str, Any]] = [
        {"to": [{"podSelector": _job_pods(spec)}]},
        {"to": [kube_dns, {"ipBlock": {"cidr": NODE_LOCAL_DNS}}], "ports": _both(53)},
        {"to": [openshift_dns], "ports": _both(OPENSHIFT_DNS_PORT)}]
    anywhere: list[dict[str, Any]] = []
    by_port: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for entry in spec.allow_egress:
        cidr, port, protocol = split_cidr_port(entry)
        peer = {"ipBlock": {"cidr": cidr}}
        if port is None:
            anywhere.append(peer)
        else:
            by_port.setdefault((port, str(protocol)), []).append(peer)
    if anywhere:
        rules.append({"to": anywhere})
    for (port, protocol), peers in by_port.items():
        rules.append({"to": peers, "ports": [{"protocol": protocol, "port": port}]})
    return rules


def egress_text(spec: JobSpec) -> str:
    """The effective egress of job pods, in words, for the manager's log."""
    if not spec.network_policy:
        return "no NetworkPolicy (--no-network-policy): job pods are not isolated; the namespace's own apply"
    if not restricts_egress(spec):
        return ("ingress only from the job's pods; egress open (to anywhere; --restrict-egress limits it to "
                "the job's pods and DNS)")
    beyond = ", ".join(spec.allow_egress)
    return (f"ingress only from the job's pods; egress only to them, DNS (kube-dns and NodeLocal DNSCache "
            f"{NODE_LOCAL_DNS.split('/')[0]} on 53, OpenShift DNS on {OPENSHIFT_DNS_PORT})"
            + (f" and {beyond}" if beyond else ""))


def network_policy(spec: JobSpec, *, owner: ManagerIdentity | None) -> dict[str, Any]:
    """Admit traffic to the job's pods only from the job's pods (as Volcano's svc plugin does), on every port:
    besides ssh, Horovod's Gloo and MPI pick theirs at run time. Egress: egress_rules (open by default;
    either way a namespace's default-deny egress policy does not cut the job)."""
    job_pods = _job_pods(spec)
    egress = egress_rules(spec)
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(spec, naming.network_policy_name(spec.job_name), naming.ROLE_NETWORK, owner),
        "spec": {"podSelector": job_pods, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": [{"podSelector": job_pods}]}], "egress": egress},
    }


def memory_text(amount: Fraction) -> str:
    """Bytes as the largest binary unit that divides them exactly (`41Gi`, `1536Mi`)."""
    value = int(amount)
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def _default_resources(spec: JobSpec, gpus: int) -> dict[str, Any]:
    """cpu and memory for a pod of `gpus` GPUs: cpu requested, not limited (a limit throttles the input
    pipeline); memory requested = limited, /dev/shm included (a memory-backed emptyDir counts against the
    container's limit): the scheduler reserves what the pod may use, the kubelet never evicts it for using
    what it asked for, and a LimitRange's default limit does not apply."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.cpu_per_gpu:
        requests["cpu"] = format_quantity(spec.cpu_per_gpu * gpus)
    if spec.memory_per_gpu:
        requests["memory"] = limits["memory"] = memory_text(spec.memory_per_gpu * gpus + spec.shm_size)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _mounts_and_volumes(spec: JobSpec, *, with_hostfile: bool, read_only_claim: bool = False
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The manager's volumes: the ssh Secret, the hostfile (chief), /dev/shm, the claim; and, for the chief of
    a restart job without a claim, the emptyDir rank 0 checkpoints into (the chief outlives relaunches)."""
    mounts: list[dict[str, Any]] = [
        {"name": naming.SSH_VOLUME, "mountPath": naming.SSH_MOUNT_PATH, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": naming.SSH_VOLUME, "secret": {
        "secretName": naming.ssh_secret_name(spec.job_name), "defaultMode": SSH_FILE_MODE}}]
    if with_hostfile:
        mounts.append({"name": naming.HOSTFILE_VOLUME, "mountPath": naming.HOSTFILE_MOUNT_PATH,
                       "readOnly": True})
        volumes.append({"name": naming.HOSTFILE_VOLUME, "configMap": {
            "name": naming.hostfile_configmap_name(spec.job_name), "defaultMode": HOSTFILE_FILE_MODE}})
    if spec.shm_size:
        mounts.append({"name": naming.SHM_VOLUME, "mountPath": naming.SHM_MOUNT_PATH})
        volumes.append({"name": naming.SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                                                "sizeLimit": memory_text(spec.shm_size)}})
    if spec.volume_claim:
        claim: dict[str, Any] = {"claimName": spec.volume_claim}
        mount: dict[str, Any] = {"name": naming.WORK_VOLUME, "mountPath": spec.mount_path}
        if read_only_claim:  # a ReadOnlyMany claim mounts read-only or not at all
            claim["readOnly"] = mount["readOnly"] = True
        mounts.append(mount)
        volumes.append({"name": naming.WORK_VOLUME, "persistentVolumeClaim": claim})
    elif with_hostfile and spec.recovery == naming.RECOVERY_RESTART:
        mounts.append({"name": naming.CHECKPOINT_VOLUME, "mountPath": naming.CHECKPOINT_MOUNT_PATH})
        volumes.append({"name": naming.CHECKPOINT_VOLUME, "emptyDir": {}})
    return mounts, volumes


@dataclass(frozen=True)
class Gang:
    """A gang created at once and placed by others than the manager (groupstart.py): by the scheduler on
    nodes an autoscaler adds, or by Kueue, which admits its pods as one pod group. Its pods are not pinned,
    and its chief waits up to `hostfile_wait` seconds for the hostfile the manager writes once the workers
    run."""

    pods: int                                    # workers and chief
    hostfile_wait: float
    queue: str | None = None                     # the Kueue LocalQueue
    group: str | None = None                     # its pod group (and Workload) name
    topology_key: str | None = None              # Kueue TAS: the job's topology request
    provisioning: tuple[str, str] | None = None  # the ProvisioningRequest consumed, and its class

    def labels(self) -> dict[str, str]:
        if self.queue is None:
            return {}
        return {naming.KUEUE_QUEUE_LABEL: self.queue, naming.KUEUE_GROUP_LABEL: str(self.group)}

    def annotations(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.queue is not None:
            # Kueue never replaces a group's pods: the group ends once none is active, freeing its quota
            out.update({naming.KUEUE_TOTAL_COUNT: str(self.pods), naming.KUEUE_RETRIABLE_IN_GROUP: "false"})
            if self.topology_key:
                out[naming.KUEUE_PREFERRED_TOPOLOGY] = self.topology_key
        if self.provisioning is not None:
            out.update({naming.CONSUME_PROVISIONING_REQUEST: self.provisioning[0],
                        naming.PROVISIONING_CLASS_ANNOTATION: self.provisioning[1]})
        return out


def pinned_to(node: str) -> dict[str, Any]:
    """Required node affinity on the node's name (matchFields metadata.name, as the DaemonSet controller
    pins its pods): the pod goes there or nowhere. Not the hostname label, which may differ from the name."""
    term = {"matchFields": [{"key": naming.NODE_NAME_FIELD, "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def fabric_env(entry: Entry) -> list[dict[str, str]]:
    """The NCCL settings every job pod gets, and its fabric's (the template may override each)."""
    pairs = NCCL_DEBUG_ENV + (FABRIC_ENV[entry.fabric.kind] if entry.fabric is not None else ())
    return [{"name": name, "value": value} for name, value in pairs]


def _defaults(spec: JobSpec, entry: Entry) -> dict[str, Any]:
    """What the pod template may override: see podtemplate.py."""
    gpus = entry.gpus
    pod_spec: dict[str, Any] = {
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        # the base image's non-root account; fsGroup makes the mounted Secret readable to it
        "securityContext": {"runAsNonRoot": True, "runAsUser": naming.IMAGE_UID,
                            "runAsGroup": naming.IMAGE_GID, "fsGroup": naming.IMAGE_GID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"resources": _default_resources(spec, gpus), "env": fabric_env(entry),
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}}}],
    }
    if not spec.service_account:
        pod_spec["automountServiceAccountToken"] = False  # job pods never talk to the API
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    annotations = dict(naming.DEFAULT_POD_ANNOTATIONS)
    if spec.disruption_budget:
        annotations.update(naming.DO_NOT_DISRUPT_ANNOTATIONS)
    return {"metadata": {"annotations": annotations}, "spec": pod_spec}


def _pod(spec: JobSpec, name: str, role: str, entry: Entry, container: dict[str, Any],
         volumes: list[dict[str, Any]], owner: ManagerIdentity | None,
         annotations: Mapping[str, str] | None = None, policies: NamespacePolicies | None = None,
         gang: Gang | None = None) -> dict[str, Any]:
    share = {spec.resource: str(entry.gpus)}
    if entry.fabric is not None:
        share[entry.fabric.resource] = str(entry.fabric.devices)
    container = {**container, "image": spec.image, "command": [naming.ENTRYPOINT_PATH],
                 "resources": {"requests": dict(share), "limits": dict(share)}}
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [t.to_dict() for t in spec.all_tolerations()],
        "containers": [container],
        "volumes": volumes,
    }
    if entry.node:  # pinned to the planned node: the plan counted that node's free GPUs for this pod
        pod_spec["affinity"] = pinned_to(entry.node)
    if spec.node_selector:
        pod_spec["nodeSelector"] = spec.node_selector_dict
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in spec.image_pull_secrets]
    if spec.active_deadline is not None:
        # a safety net should the manager die without its ownerReference (laptop runs): the kubelet ends it
        pod_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.active_deadline))
    marks = gang.annotations() if gang else {}
    owned = {"metadata": metadata(spec, name, role, owner,
                                  {naming.GPUS_ANNOTATION: str(entry.gpus), **marks, **(annotations or {})},
                                  labels=gang.labels() if gang else None,
                                  controller=gang is None or gang.queue is None),
             "spec": pod_spec}
    pod = podtemplate.merge(spec.template_for(role), defaults=_defaults(spec, entry), owned=owned)
    # fitted to the namespace: limit = request where a LimitRange default or a limits.* quota would decide
    # it, no fixed uid where OpenShift assigns one (namespacefit.py)
    return namespacefit.shape(pod, policies, image_uid=naming.IMAGE_UID) if policies is not None else pod


def _common_env(spec: JobSpec) -> list[dict[str, Any]]:
    return [{"name": naming.ENV_JOB_NAME, "value": spec.job_name},
            {"name": naming.ENV_SSH_PORT, "value": str(spec.ssh_port)},
            {"name": naming.ENV_SSH_DIR, "value": naming.SSH_MOUNT_PATH}]


def worker_pod(spec: JobSpec, *, index: int, entry: Entry, owner: ManagerIdentity | None,
               read_only_claim: bool = False, policies: NamespacePolicies | None = None,
               gang: Gang | None = None) -> dict[str, Any]:
    """Worker `index`: sshd on the job's port, ready once the port accepts connections. `read_only_claim`:
    the volume claim is ReadOnlyMany; `policies`: the namespace's, which the pod is shaped to; `gang`: one of
    a gang made at once (not on `entry.node`)."""
    mounts, volumes = _mounts_and_volumes(spec, with_hostfile=False, read_only_claim=read_only_claim)
    env = _common_env(spec)
    own = template_env_names(spec, naming.ROLE_WORKER)
    if own:
        env.append({"name": naming.ENV_POD_ENV, "value": ",".join(own)})
    container = {"name": naming.WORKER_CONTAINER, "args": [naming.ENTRYPOINT_WORKER],
                 "env": env, "volumeMounts": mounts,
                 "ports": [{"name": "ssh", "containerPort": spec.ssh_port, "protocol": "TCP"}],
                 # 1 s: the gang (and so the chief, and the first step) waits for the last worker's first
                 # passing probe, on average half a period after its sshd listens; a TCP connect a second
                 # is nothing beside the training
                 "readinessProbe": {"tcpSocket": {"port": spec.ssh_port}, "periodSeconds": 1,
                                    "timeoutSeconds": 1, "failureThreshold": 3}}
    return _pod(spec, naming.worker_name(spec.job_name, index), naming.ROLE_WORKER, entry, container, volumes,
                owner, policies=policies, gang=gang)


def gang(spec: JobSpec, workers: Sequence[Entry], chief: Entry, *, owner: ManagerIdentity | None,
         read_only_claim: bool = False, policies: NamespacePolicies | None = None,
         gang: Gang | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The pods a plan makes, as they would be created (shaped to the namespace), each named for messages
    ("worker 0 (5 GPUs)", "the chief (1 GPU)"): what a run creates, a dry run shows and `plan --namespace`
    and the manager check against the namespace's policies (fit.check_namespace). `gang`: made at once, for
    others to place (a Kueue pod group, a scale-up)."""
    def gpus(count: int) -> str:
        return f"{count} GPU" + ("" if count == 1 else "s")

    pods = [(f"worker {i} ({gpus(e.gpus)})",
             worker_pod(spec, index=i, entry=e, owner=owner, read_only_claim=read_only_claim,
                        policies=policies, gang=gang)) for i, e in enumerate(workers)]
    pods.append((f"the chief ({gpus(chief.gpus)})",
                 chief_pod(spec, entry=chief, owner=owner, read_only_claim=read_only_claim,
                           policies=policies, gang=gang)))
    return pods


def template_env_names(spec: JobSpec, role: str) -> tuple[str, ...]:
    """The variables the role's pod template sets on its job container (`env`, values and valueFrom alike;
    not envFrom, whose names are known only in the pod), in order. A worker passes them to its ranks: the
    rule is that a rank on a worker sees its worker's own value of each, over the chief's (Horovod's Gloo
    launcher gives every rank the chief's environment, horovod/runner/gloo_run.py)."""
    template = spec.template_for(role)
    containers = (template.spec.get("containers") or []) if template else []
    env = (containers[0].get("env") or []) if containers else []
    return tuple(dict.fromkeys(str(e["name"]) for e in env
                               if e.get("name") and not str(e["name"]).startswith("DT_")))


def chief_pod(spec: JobSpec, *, entry: Entry, owner: ManagerIdentity | None,
              read_only_claim: bool = False, policies: NamespacePolicies | None = None,
              gang: Gang | None = None) -> dict[str, Any]:
    """The chief: the launcher, which checks every worker's sshd, then runs horovodrun over all of them and
    itself, and exits with the training's exit code. `args` after `--` is the user's command."""
    mounts, volumes = _mounts_and_volumes(spec, with_hostfile=True, read_only_claim=read_only_claim)
    env = [*_common_env(spec),
           {"name": naming.ENV_HOSTFILE, "value": f"{naming.HOSTFILE_MOUNT_PATH}/{naming.HOSTFILE_KEY}"},
           {"name": naming.ENV_NUM_PROCESSES, "value": str(spec.gpus)},
           {"name": naming.ENV_SLOTS, "value": str(entry.gpus)},
           {"name": naming.ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": naming.ENV_POD_IPS, "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
           {"name": naming.ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": naming.ENV_TRANSPORT, "value": spec.transport},
           {"name": naming.ENV_SSH_TIMEOUT, "value": f"{spec.ssh_timeout:g}"}]
    if spec.network_interface:
        env.append({"name": naming.ENV_NETWORK_INTERFACE, "value": spec.network_interface})
    if spec.preflight or spec.min_busbw is not None:
        env.append({"name": naming.ENV_PREFLIGHT, "value": "true"})
    if spec.min_busbw is not None:
        env.append({"name": naming.ENV_MIN_BUSBW, "value": f"{spec.min_busbw:g}"})
    if entry.fabric is not None:  # the pre-flight proves NCCL uses it
        env.append({"name": naming.ENV_FABRIC, "value": entry.fabric.kind})
    env += _recovery_env(spec)
    if gang is not None:  # it runs before its workers' addresses are known: the hostfile comes later
        env.append({"name": naming.ENV_HOSTFILE_WAIT, "value": f"{gang.hostfile_wait:g}"})
    stall = watchdog.stall_check_seconds(spec.hang_timeout)
    if stall is not None:  # horovodrun passes it on to every rank; rank 0's stall inspector uses it
        env.append({"name": watchdog.ENV_STALL_CHECK, "value": str(stall)})
    container = {"name": naming.CHIEF_CONTAINER, "args": [naming.ENTRYPOINT_LAUNCHER, "--", *spec.command],
                 "env": env, "volumeMounts": mounts}
    annotations = {naming.RECOVERY_ANNOTATION: spec.recovery} if spec.recovery else None
    return _pod(spec, naming.chief_name(spec.job_name), naming.ROLE_CHIEF, entry, container, volumes, owner,
                annotations, policies=policies, gang=gang)


def pod_template(spec: JobSpec, pod: Mapping[str, Any], *, gpus: int, owner: ManagerIdentity | None
                 ) -> dict[str, Any]:
    """The PodTemplate a ProvisioningRequest names for pods like `pod` (its spec, as the scheduler and the
    autoscaler judge it)."""
    role = str(pod["metadata"]["labels"][naming.ROLE_LABEL])
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": metadata(spec, naming.pod_template_name(spec.job_name, role, gpus),
                                 naming.ROLE_CAPACITY, owner),
            "template": {"metadata": {"labels": naming.job_labels(spec.job_name, role)},
                         "spec": dict(pod["spec"])}}


def provisioning_request(spec: JobSpec, *, name: str, cls: str, templates: Sequence[tuple[str, int]],
                         owner: ManagerIdentity | None) -> dict[str, Any]:
    """A ProvisioningRequest (autoscaling.x-k8s.io/v1) for the gang: `templates` (PodTemplate name, count)."""
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": metadata(spec, name, naming.ROLE_CAPACITY, owner),
            "spec": {"provisioningClassName": cls,
                     "podSets": [{"podTemplateRef": {"name": t}, "count": n} for t, n in templates]}}


def _recovery_env(spec: JobSpec) -> list[dict[str, Any]]:
    """What the chief's launcher needs to survive a lost worker: elastic, horovodrun's --min-np/--max-np and
    how long Horovod may wait for its minimum; restart, the relaunches allowed, how long to wait for the
    replaced workers, and where rank 0 checkpoints (the claim's output directory, else the chief's emptyDir).
    Horovod and the launcher wait RECOVERY_MARGIN longer than the manager, which knows why and decides."""
    wait = f"{spec.replace_timeout + RECOVERY_MARGIN:g}"
    if spec.recovery == naming.RECOVERY_ELASTIC:
        return [{"name": naming.ENV_MIN_PROCESSES, "value": str(spec.min_gpus)},
                {"name": naming.ENV_MAX_PROCESSES, "value": str(spec.max_gpus or spec.gpus)},
                {"name": naming.ENV_ELASTIC_TIMEOUT, "value": wait}]
    if spec.recovery == naming.RECOVERY_RESTART:
        env = [{"name": naming.ENV_RESTARTS, "value": str(spec.restarts)},
               {"name": naming.ENV_RESTART_WAIT, "value": wait}]
        if not spec.volume_claim:
            env.append({"name": naming.ENV_CHECKPOINT_DIR, "value": naming.CHECKPOINT_MOUNT_PATH})
        return env
    return []


def pod_demand(spec: JobSpec, role: str) -> PodDemand:
    """What a job pod of `role` asks of a node besides its GPUs, for the inventory: its tolerations, node
    selector and required node affinity (the request's and the template's), and its requests for g GPUs, read
    from the very pod that would be created (sidecars, init containers, /dev/shm and all)."""
    probe = _build(spec, role, 1)["spec"]
    template = spec.template_for(role)
    # the template's own terms: the pod's also carry the pin, which names the one node it was planned for
    user_terms = tuple((((template.spec.get("affinity") or {}).get("nodeAffinity") or {})
                        .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
                       or ()) if template else ()

    @functools.lru_cache(maxsize=64)
    def requests(gpus: int) -> Mapping[str, Fraction]:
        amounts = pod_requests(_build(spec, role, gpus))
        return {name: amount for name, amount in amounts.items() if name != spec.resource}

    return PodDemand(role=role, tolerations=parse_tolerations(list(probe.get("tolerations") or [])),
                     node_selector=dict(probe.get("nodeSelector") or {}), node_affinity=user_terms,
                     requests=requests)


def pod_demands(spec: JobSpec, roles: Sequence[str] = (naming.ROLE_WORKER, naming.ROLE_CHIEF)
                ) -> tuple[PodDemand, ...]:
    """What a pod of each role asks of a node besides GPUs: what every placement of the job is judged by."""
    return tuple(pod_demand(spec, role) for role in roles)


def _build(spec: JobSpec, role: str, gpus: int) -> dict[str, Any]:
    entry = Entry("", gpus)
    if role == naming.ROLE_WORKER:
        return worker_pod(spec, index=0, entry=entry, owner=None)
    return chief_pod(spec, entry=entry, owner=None)
