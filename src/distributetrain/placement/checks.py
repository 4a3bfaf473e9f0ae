"""Checks against the live cluster that a first real run would otherwise fail on, made before anything is
created: the pod network's IP family, and the shared volume's access modes against the plan. Pure: they
read objects the caller fetched.

IPv6. Horovod 0.28.1 is IPv4-only: its host parser splits `host:slots` on ':' and accepts only
`^[\\w.-]+:[0-9]+$` (horovod/runner/common/util/hosts.py, parse_hosts_and_slots, HostInfo.from_string), and
its driver and task services keep only AF_INET addresses and probe with AF_INET sockets
(horovod/runner/common/util/network.py, BasicService._get_local_addresses, BasicClient._probe_one). On a
pod network without IPv4 the job would fail after its pods started; a dual-stack one works (the job uses
each pod's IPv4 address).

Storage. A ReadWriteOnce volume attaches to one node at a time: the pods on other nodes would wait on
Multi-Attach forever; ReadWriteOncePod admits one pod. Only ReadWriteMany and ReadOnlyMany suit a job that
spans nodes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

SHARED_MODES = frozenset({"ReadWriteMany", "ReadOnlyMany"})


def is_ipv4(address: str) -> bool:
    try:
        return ipaddress.ip_network(address.strip(), strict=False).version == 4
    except ValueError:
        return False


def ipv6_only(*, manager_ips: Sequence[str], nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the pod network has no IPv4, or None. The manager pod's own addresses (downward API
    status.podIPs) decide when known; else the nodes' pod CIDRs."""
    ips = [ip for ip in manager_ips if ip.strip()]
    if ips:
        if any(is_ipv4(ip) for ip in ips):
            return None
        return f"the manager pod's own addresses are IPv6 only ({', '.join(ips)})"
    cidrs = []
    for node in nodes:
        spec = node.get("spec") or {}
        cidrs += list(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))
    if cidrs and not any(is_ipv4(c) for c in cidrs):
        shown = ", ".join(cidrs[:3]) + (", ..." if len(cidrs) > 3 else "")
        return f"every node's pod CIDR is IPv6 ({shown})"
    return None


def ipv6_message(why: str) -> str:
    return (f"IPv6: {why}: Horovod 0.28.1, which the base image runs, is IPv4-only (its host parser splits "
            "host:slots on ':' and its services use AF_INET sockets). Run the job on an IPv4 or dual-stack "
            "pod network; nothing was created")


def claim_modes(claim: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple((claim.get("spec") or {}).get("accessModes") or ())


def claim_read_only(claim: Mapping[str, Any]) -> bool:
    """A claim that can only be mounted read-only (ReadOnlyMany alone)."""
    return set(claim_modes(claim)) == {"ReadOnlyMany"}


def claim_problem(claim: Mapping[str, Any], *, nodes: Sequence[str]) -> str | None:
    """Why the claim cannot be mounted by every pod of a plan spanning `nodes` (one pod per node), or None."""
    meta = claim.get("metadata") or {}
    name = f"PersistentVolumeClaim {meta.get('namespace')}/{meta.get('name')}"
    modes = set(claim_modes(claim))
    phase = (claim.get("status") or {}).get("phase")
    if phase == "Lost":
        return f"{name} is Lost (its volume is gone); recreate it"
    if modes & SHARED_MODES or len(nodes) <= 1:
        return None
    spanned = f"the plan spans {len(nodes)} nodes ({', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''})"
    if "ReadWriteOncePod" in modes:
        return (f"{name} is ReadWriteOncePod: only one pod may mount it, and {spanned}; use a ReadWriteMany "
                "or ReadOnlyMany claim, or ask for GPUs that fit on one node")
    shown = ", ".join(sorted(modes)) or "no access modes"
    return (f"{name} is {shown}: it attaches to one node at a time, and {spanned}: the pods elsewhere would "
            "wait on Multi-Attach forever. Use a ReadWriteMany or ReadOnlyMany claim (NFS, CephFS, EFS, "
            "Filestore, Azure Files...), or ask for GPUs that fit on one node")
