"""Builders of every object a job creates: plain dicts as the API takes them. No I/O here.

The contract with the base image (base-image/) is the entrypoint, its two modes and the DT_* environment
variables, all named in naming.py: a worker runs sshd on the job's port, the chief runs the launcher.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from typing import Any

from distributetrain import hostfile, naming
from distributetrain.jobspec import JobSpec, ManagerIdentity
from distributetrain.planner import Entry
from distributetrain.sshkeys import KeyPair

SSH_VOLUME = "ssh"
HOSTFILE_VOLUME = "hostfile"
WORK_VOLUME = "work"

# sshd starts as root and drops to its privilege-separation user: it needs to change uid/gid, chroot into
# /run/sshd, chown the session's files, signal its children and write audit records. Nothing else.
SSHD_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "KILL", "SETGID", "SETUID", "SYS_CHROOT")
SSH_FILE_MODE = 0o400  # sshd's StrictModes and ssh's key check both refuse group- or world-readable files
HOSTFILE_FILE_MODE = 0o444
GRACE_SECONDS = 10


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def owner_references(owner: ManagerIdentity | None, namespace: str) -> list[dict[str, Any]]:
    """The manager pod as owner, so deleting it garbage-collects the job. Only within its own namespace: the
    garbage collector treats a cross-namespace owner as absent and would delete the object at once."""
    if owner is None or (owner.namespace is not None and owner.namespace != namespace):
        return []
    return [{"apiVersion": "v1", "kind": "Pod", "name": owner.name, "uid": owner.uid, "controller": True}]


def metadata(spec: JobSpec, name: str, role: str, owner: ManagerIdentity | None,
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": spec.namespace,
                            "labels": naming.job_labels(spec.job_name, role)}
    if annotations:
        meta["annotations"] = dict(annotations)
    refs = owner_references(owner, spec.namespace)
    if refs:
        meta["ownerReferences"] = refs
    return meta


def ssh_secret(spec: JobSpec, keys: KeyPair, *, owner: ManagerIdentity | None) -> dict[str, Any]:
    """The job's key pair and authorized_keys. Type Opaque, not kubernetes.io/ssh-auth: that type insists on a
    key named `ssh-privatekey`, which would need an items remap on every mount to become the file name ssh
    looks for; with Opaque the key names are the file names. Immutable: it never changes during a job."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
        "metadata": metadata(spec, naming.ssh_secret_name(spec.job_name), naming.ROLE_SSH, owner),
        "data": {naming.SSH_PRIVATE_KEY: _b64(keys.private_openssh()),
                 naming.SSH_PUBLIC_KEY: _b64(keys.public + "\n"),
                 naming.SSH_AUTHORIZED_KEYS: _b64(keys.authorized_keys())},
    }


def hostfile_configmap(spec: JobSpec, workers: Iterable[hostfile.HostSlots], *,
                       owner: ManagerIdentity | None) -> dict[str, Any]:
    """The workers' `IP slots=N` lines, sorted; the launcher in the chief adds its own line."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
        "metadata": metadata(spec, naming.hostfile_configmap_name(spec.job_name), naming.ROLE_HOSTFILE,
                             owner),
        "data": {naming.HOSTFILE_KEY: hostfile.render(workers)},
    }


def network_policy(spec: JobSpec, *, owner: ManagerIdentity | None) -> dict[str, Any]:
    """Admit traffic to the job's pods only from the job's pods (as Volcano's svc plugin does). Every port:
    besides ssh, Horovod's Gloo and MPI pick their ports at run time."""
    job_pods = {"matchLabels": {naming.MANAGED_BY_KEY: naming.MANAGED_BY, naming.JOB_LABEL: spec.job_name}}
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(spec, naming.network_policy_name(spec.job_name), naming.ROLE_NETWORK, owner),
        "spec": {"podSelector": job_pods, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": job_pods}]}]},
    }


def _container(spec: JobSpec, name: str, entry: Entry, args: list[str], env: list[dict[str, Any]],
               mounts: list[dict[str, Any]], capabilities: dict[str, Any]) -> dict[str, Any]:
    share = {spec.resource: str(entry.gpus)}
    container: dict[str, Any] = {
        "name": name, "image": spec.image, "command": [naming.ENTRYPOINT_PATH], "args": args, "env": env,
        "resources": {"requests": dict(share), "limits": dict(share)},
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": capabilities},
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    return container


def _mounts_and_volumes(spec: JobSpec, *, with_hostfile: bool) -> tuple[list[dict[str, Any]],
                                                                         list[dict[str, Any]]]:
    mounts: list[dict[str, Any]] = [
        {"name": SSH_VOLUME, "mountPath": naming.SSH_MOUNT_PATH, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": SSH_VOLUME, "secret": {
        "secretName": naming.ssh_secret_name(spec.job_name), "defaultMode": SSH_FILE_MODE}}]
    if with_hostfile:
        mounts.append({"name": HOSTFILE_VOLUME, "mountPath": naming.HOSTFILE_MOUNT_PATH, "readOnly": True})
        volumes.append({"name": HOSTFILE_VOLUME, "configMap": {
            "name": naming.hostfile_configmap_name(spec.job_name), "defaultMode": HOSTFILE_FILE_MODE}})
    if spec.volume_claim:
        mounts.append({"name": WORK_VOLUME, "mountPath": spec.mount_path})
        volumes.append({"name": WORK_VOLUME, "persistentVolumeClaim": {"claimName": spec.volume_claim}})
    return mounts, volumes


def pinned_to(node: str) -> dict[str, Any]:
    """Required node affinity on the node's hostname label: the pod goes there or nowhere."""
    term = {"matchExpressions": [{"key": naming.HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _pod(spec: JobSpec, name: str, role: str, entry: Entry, container: dict[str, Any],
         volumes: list[dict[str, Any]], owner: ManagerIdentity | None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # pinned to the planned node: the plan counted that node's free GPUs for this pod
        "affinity": pinned_to(entry.node),
        "tolerations": [t.to_dict() for t in spec.all_tolerations()],
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = spec.node_selector_dict
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    else:
        pod_spec["automountServiceAccountToken"] = False  # job pods never talk to the API
    if spec.active_deadline is not None:
        # a safety net should the manager die without its ownerReference (laptop runs): the kubelet ends it
        pod_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.active_deadline))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": metadata(spec, name, role, owner, {naming.GPUS_ANNOTATION: str(entry.gpus)}),
            "spec": pod_spec}


def _common_env(spec: JobSpec) -> list[dict[str, Any]]:
    return [{"name": naming.ENV_JOB_NAME, "value": spec.job_name},
            {"name": naming.ENV_SSH_PORT, "value": str(spec.ssh_port)},
            {"name": naming.ENV_SSH_DIR, "value": naming.SSH_MOUNT_PATH}]


def worker_pod(spec: JobSpec, *, index: int, entry: Entry, owner: ManagerIdentity | None) -> dict[str, Any]:
    """Worker `index`: sshd on the job's port, ready once the port accepts connections."""
    mounts, volumes = _mounts_and_volumes(spec, with_hostfile=False)
    container = _container(spec, naming.WORKER_CONTAINER, entry, [naming.ENTRYPOINT_WORKER],
                           _common_env(spec), mounts, {"drop": ["ALL"], "add": list(SSHD_CAPABILITIES)})
    container["ports"] = [{"name": "ssh", "containerPort": spec.ssh_port, "protocol": "TCP"}]
    container["readinessProbe"] = {"tcpSocket": {"port": spec.ssh_port}, "periodSeconds": 2,
                                   "timeoutSeconds": 1, "failureThreshold": 3}
    return _pod(spec, naming.worker_name(spec.job_name, index), naming.ROLE_WORKER, entry, container, volumes,
                owner)


def chief_pod(spec: JobSpec, *, entry: Entry, owner: ManagerIdentity | None) -> dict[str, Any]:
    """The chief: the launcher, which checks every worker's sshd, then runs horovodrun over all of them and
    itself, and exits with the training's exit code. `args` after `--` is the user's command."""
    mounts, volumes = _mounts_and_volumes(spec, with_hostfile=True)
    env = [*_common_env(spec),
           {"name": naming.ENV_HOSTFILE, "value": f"{naming.HOSTFILE_MOUNT_PATH}/{naming.HOSTFILE_KEY}"},
           {"name": naming.ENV_NUM_PROCESSES, "value": str(spec.gpus)},
           {"name": naming.ENV_SLOTS, "value": str(entry.gpus)},
           {"name": naming.ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": naming.ENV_TRANSPORT, "value": spec.transport},
           {"name": naming.ENV_SSH_TIMEOUT, "value": f"{spec.ssh_timeout:g}"}]
    if spec.network_interface:
        env.append({"name": naming.ENV_NETWORK_INTERFACE, "value": spec.network_interface})
    args = [naming.ENTRYPOINT_LAUNCHER, "--", *spec.command]
    container = _container(spec, naming.CHIEF_CONTAINER, entry, args, env, mounts, {"drop": ["ALL"]})
    return _pod(spec, naming.chief_name(spec.job_name), naming.ROLE_CHIEF, entry, container, volumes, owner)
