"""The pure rules behind claims, attachments, memory-backed volumes and limits (admission/claims.py,
runtime/attach.py, runtime/tmpfs.py, runtime/cgroups.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster._internal.admission.claims import claim_causes, missing_claim, scheduler_message
from localcluster._internal.runtime.attach import Attachments, multi_attach_allowed
from localcluster._internal.runtime.cgroups import _limits, cfs_quota_us, notice
from localcluster._internal.runtime.enforce import Enforcement
from localcluster._internal.runtime.netns import ClusterNetwork
from localcluster._internal.runtime.tmpfs import memory_volume_bytes, shm_bytes


def pvc(*modes: str, storage: Any = "1Gi", uid: str = "u-1") -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": list(modes)}
    if storage is not None:
        spec["resources"] = {"requests": {"storage": storage}}
    return {"metadata": {"name": "data", "namespace": "default", "uid": uid}, "spec": spec}


@pytest.mark.parametrize("claim, messages", [
    (pvc("ReadWriteOnce"), []),
    (pvc("ReadWriteOncePod"), []),
    (pvc("ReadOnlyMany", "ReadWriteMany"), []),
    (pvc(), ["spec.accessModes: Required value: at least 1 access mode is required"]),
    (pvc("ReadWriteOncePod", "ReadOnlyMany"),
     ["spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"]),
    (pvc("Sometimes"), ['spec.accessModes: Unsupported value: "Sometimes": supported values: "ReadOnlyMany", '
                        '"ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"']),
    (pvc("ReadWriteOnce", storage=None), ["spec.resources[storage]: Required value"]),
    (pvc("ReadWriteOnce", storage="0"),
     ['spec.resources[storage]: Invalid value: "0": must be greater than zero']),
])
def test_claim_validation(claim: dict[str, Any], messages: list[str]) -> None:
    assert [str(c) for c in claim_causes(claim)] == messages


def test_a_missing_claim_is_the_schedulers_reason() -> None:
    pod = {"metadata": {"namespace": "ns"}, "spec": {"volumes": [
        {"name": "a", "emptyDir": {}}, {"name": "b", "persistentVolumeClaim": {"claimName": "there"}},
        {"name": "c", "persistentVolumeClaim": {"claimName": "gone"}}]}}
    claims = {("persistentvolumeclaims", "ns", "there")}
    reason = missing_claim(pod, lambda r, ns, n: {} if (r, ns, n) in claims else None)
    assert reason == 'persistentvolumeclaim "gone" not found'
    assert scheduler_message(reason, 3) == (
        '0/3 nodes are available: persistentvolumeclaim "gone" not found. '
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")


def using(name: str, node: str, *claims: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}}
                                                   for c in claims]}}


def test_a_read_write_once_volume_attaches_to_one_node_at_a_time() -> None:
    attachments = Attachments()
    claims = {"data": pvc("ReadWriteOnce")}
    assert attachments.attach(using("a", "node-1", "data"), claims) is None
    assert attachments.attach(using("b", "node-1", "data"), claims) is None  # the same node shares it
    refused = attachments.attach(using("c", "node-2", "data"), claims)
    assert refused == 'Multi-Attach error for volume "pvc-u-1" Volume is already used by pod(s) a, b'
    attachments.detach("uid-a")
    assert attachments.attach(using("c", "node-2", "data"), claims) == (
        'Multi-Attach error for volume "pvc-u-1" Volume is already used by pod(s) b')
    attachments.detach("uid-b")
    assert attachments.attach(using("c", "node-2", "data"), claims) is None


def test_multi_node_modes_and_bound_volume_names() -> None:
    assert multi_attach_allowed(pvc("ReadWriteOnce", "ReadOnlyMany"))
    assert multi_attach_allowed(pvc())  # no modes: nothing to go by, as the controller says
    assert not multi_attach_allowed(pvc("ReadWriteOncePod"))
    attachments = Attachments()
    bound = pvc("ReadWriteOnce")
    bound["spec"]["volumeName"] = "pv-disk-7"
    attachments.attach(using("a", "node-1", "data"), {"data": bound})
    assert attachments.attach(using("b", "node-2", "data"), {"data": bound}) == (
        'Multi-Attach error for volume "pv-disk-7" Volume is already used by pod(s) a')


def container(memory: str | None = None, cpu: str | None = None) -> dict[str, Any]:
    limits = {k: v for k, v in (("memory", memory), ("cpu", cpu)) if v is not None}
    return {"name": "c", "resources": {"limits": limits}}


def test_memory_volume_size_follows_the_kubelet() -> None:
    volume = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    unlimited = {"spec": {"containers": [container()]}}
    assert memory_volume_bytes(volume, unlimited, "512Gi") == 1 << 30
    assert memory_volume_bytes({"emptyDir": {"medium": "Memory"}}, unlimited, "512Gi") == 512 << 30
    limited = {"spec": {"containers": [container("256Mi"), container("256Mi")]}}
    assert memory_volume_bytes(volume, limited, "512Gi") == 512 << 20  # the pod's limit is smaller
    partly = {"spec": {"containers": [container("256Mi"), container()]}}
    # no pod limit unless every container has one
    assert memory_volume_bytes(volume, partly, "512Gi") == 1 << 30


def test_shm_is_the_containers_own_unless_a_volume_is_mounted_there() -> None:
    assert shm_bytes(["/data", "/etc/hosts"]) == 64 << 20
    assert shm_bytes(["/dev/shm/"]) is None


def test_limits_as_the_kubelet_writes_them() -> None:
    assert _limits(container("64Mi", "500m")) == (64 << 20, 500)
    assert _limits(container()) == (None, None)
    assert _limits(container("1.5Gi", "2")) == (3 << 29, 2000)
    assert cfs_quota_us(500) == 50_000
    assert cfs_quota_us(1) == 1_000  # at least 1 ms per period


def test_what_cannot_be_enforced_is_said(tmp_path: Path) -> None:
    assert notice(tmp_path) == ("memory limits are not enforced: the cgroup v1 memory controller is not "
                                f"mounted at {tmp_path / 'memory'} (containers never end OOMKilled)")
    network = ClusterNetwork(mode="loopback")
    enforcement = Enforcement(network=network, pods=list, network_policy=True, memory_limits=True,
                              isolate=False)
    assert enforcement.notices()[0] == (
        "NetworkPolicy is not enforced: pods share the host's network (loopback mode)")
    assert enforcement.notices()[1].startswith("memory limits are not enforced")
    quiet = Enforcement(network=network, pods=list, network_policy=False, memory_limits=False, isolate=False)
    assert quiet.notices() == ["NetworkPolicy is not enforced: switched off (--no-network-policy)"]
