"""NetworkPolicy applied to the process runtime's pods with nftables (the rules: runtime/netpol.py).

Per pod, a table `inet networkpolicy` in the pod's network namespace (`nsenter --net=... nft -f -`: one
transaction replacing the previous rules; none while no policy selects the pod); per cluster, the bridge table
`dtb<id>` (a pod sends only from its own address). The rules are recomputed when a pod gets its network (the
runtime awaits `sync()` before the pod's containers start) and after a pod's network is gone, and a store
listener queues a sync when a NetworkPolicy, a namespace or a running pod's labels change. Syncs coalesce:
callers waiting together share one computation that includes every change made before it began.
A pod's table dies with its network namespace; the bridge table goes with `teardown()` (`localcluster down`),
and a crashed cluster's is removed by the next start (`remove_stale_tables`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localcluster._internal.runtime.base import RuntimeHost
from localcluster._internal.runtime.netns import BRIDGE_PREFIX, NetworkError, run
from localcluster._internal.runtime.netpol import Endpoint, bridge_ruleset, isolation_by_pod, pod_ruleset

log = logging.getLogger(__name__)

POLICIES = "networkpolicies.networking.k8s.io"


def nft_missing() -> str | None:
    """Why NetworkPolicy cannot be enforced by a root runtime here (no nft), or None."""
    if shutil.which("nft") is None:
        return "NetworkPolicy is not enforced: nft is not installed (`make system-deps` installs nftables)"
    return None


@dataclass(frozen=True)
class Member:
    """A pod with a network namespace: its endpoint, the process holding the namespace, its node's address."""

    endpoint: Endpoint
    pause_pid: int
    node_ip: str


def container_ports(pod: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Named container ports, for policies that name them."""
    ports: dict[str, tuple[int, str]] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name"):
                ports[port["name"]] = (int(port["containerPort"]), str(port.get("protocol") or "TCP"))
    return ports


class PolicyEnforcer:
    def __init__(self, *, table: str, members: Callable[[], list[Member]],
                 host_addresses: Callable[[], list[str]]) -> None:
        self.table = table
        self._members = members
        self._host_addresses = host_addresses
        self._host: RuntimeHost | None = None
        self._lock = asyncio.Lock()
        self._requested = 0      # changes seen
        self._covered = 0        # changes the rules in force include
        self._applied: dict[str, str] = {}  # pod uid (or the bridge table) -> the ruleset in force
        self._pending: set[asyncio.Task[None]] = set()

    def start(self, host: RuntimeHost) -> None:
        self._host = host
        host.on_change(("pods", "namespaces", POLICIES), self._changed)

    def _changed(self, resource: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if resource == "pods":
            uid = (new or old or {}).get("metadata", {}).get("uid")
            labels = [(o or {}).get("metadata", {}).get("labels") for o in (old, new)]
            if uid not in self._applied or new is None or labels[0] == labels[1]:
                return  # the runtime syncs itself when its pods come and go
        elif resource == "namespaces" and old is not None and new is not None and (
                old["metadata"].get("labels") == new["metadata"].get("labels")):
            return
        task = asyncio.ensure_future(self._sync_logged())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _sync_logged(self) -> None:
        try:
            await self.sync()
        except Exception:
            log.exception("could not apply NetworkPolicy rules")

    async def sync(self) -> None:
        """Bring every pod's rules up to date with the cluster as it is now."""
        self._requested += 1
        wanted = self._requested
        async with self._lock:
            if self._covered >= wanted:
                return  # a computation that began after our change already applied it
            covering = self._requested
            await self._apply()
            self._covered = covering

    async def _apply(self) -> None:
        assert self._host is not None, "PolicyEnforcer.start() was not called"
        members = self._members()
        labels = {p["metadata"].get("uid"): p["metadata"].get("labels") or {}
                  for p in self._host.list_objects("pods")}
        members = [Member(Endpoint(m.endpoint.uid, m.endpoint.namespace,
                                   labels.get(m.endpoint.uid, m.endpoint.labels), m.endpoint.ip,
                                   m.endpoint.ports, m.endpoint.interface), m.pause_pid, m.node_ip)
                   for m in members]
        namespaces = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {}
                      for ns in self._host.list_objects("namespaces")}
        endpoints = [m.endpoint for m in members]
        isolation = isolation_by_pod(self._host.list_objects(POLICIES), endpoints, namespaces)
        bridge = bridge_ruleset(self.table, endpoints)
        if self._applied.get(self.table) != bridge:
            await run("nft", "-f", "-", stdin=bridge.encode())
            self._applied[self.table] = bridge
        hosts = self._host_addresses()
        live = {self.table}
        for member in members:
            uid = member.endpoint.uid
            live.add(uid)
            text = pod_ruleset(isolation[uid], host_addresses=hosts, node_ip=member.node_ip)
            if self._applied.get(uid) == text:
                continue
            try:
                await run("nsenter", f"--net=/proc/{member.pause_pid}/ns/net", "nft", "-f", "-",
                          stdin=text.encode())
            except NetworkError:
                if os.path.exists(f"/proc/{member.pause_pid}"):
                    raise
                continue  # the pod's namespace went meanwhile, and its rules with it
            self._applied[uid] = text
        for uid in set(self._applied) - live:
            del self._applied[uid]

    async def teardown(self) -> None:
        for task in list(self._pending):
            task.cancel()
        if self._applied.pop(self.table, None) is not None:
            await run("nft", "-f", "-", stdin=f"table bridge {self.table}\ndelete table bridge {self.table}\n"
                      .encode(), check=False)
        self._applied.clear()


async def remove_stale_tables() -> list[str]:
    """Bridge tables of local clusters whose bridge is gone (a cluster that crashed: its bridge was removed by
    netns.remove_stale_bridges). A live cluster makes its bridge before its table and deletes it after."""
    if shutil.which("nft") is None:
        return []
    tables = json.loads(await run("nft", "-j", "list", "tables", "bridge"))
    links = {link.get("ifname") for link in json.loads(await run("ip", "-j", "link", "show"))}
    removed = []
    for item in tables.get("nftables", []):
        name = (item.get("table") or {}).get("name", "")
        if name.startswith(BRIDGE_PREFIX) and name not in links:
            await run("nft", "delete", "table", "bridge", name, check=False)
            removed.append(name)
    return removed
