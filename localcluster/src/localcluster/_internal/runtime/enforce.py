"""What the process runtime enforces around its pods, as a real node does: NetworkPolicy (the network plugin,
runtime/policyenforcer.py), memory and CPU limits (the container runtime's cgroups, runtime/cgroups.py), the
attachment of single-node volumes (the attach/detach controller, runtime/attach.py) and memory-backed volumes
(runtime/tmpfs.py). ProcessRuntime calls it at each step of a pod's life; `notices()` says what this machine
cannot enforce (`localcluster up` prints it).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable

from localcluster._internal.runtime import podstatus as ps
from localcluster._internal.runtime.attach import Attachments, claim_names
from localcluster._internal.runtime.base import RuntimeHost
from localcluster._internal.runtime.cgroups import Cgroups, ContainerCgroups, remove_stale
from localcluster._internal.runtime.cgroups import notice as cgroup_notice
from localcluster._internal.runtime.netns import ClusterNetwork
from localcluster._internal.runtime.netpol import Endpoint
from localcluster._internal.runtime.pods import ContainerRun, PodRun
from localcluster._internal.runtime.policyenforcer import (
    Member,
    PolicyEnforcer,
    container_ports,
    nft_missing,
    remove_stale_tables,
)
from localcluster._internal.runtime.tmpfs import unmount_under

log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0
OOM_KILLED = "OOMKilled"


class Enforcement:
    def __init__(self, *, network: ClusterNetwork, pods: Callable[[], Iterable[PodRun]], network_policy: bool,
                 memory_limits: bool, isolate: bool) -> None:
        self.network = network
        self._pods = pods
        self._policy_wanted = network_policy
        self.policy: PolicyEnforcer | None = None
        if network_policy and network.mode == "netns" and nft_missing() is None:
            self.policy = PolicyEnforcer(table=network.bridge, members=self._members,
                                         host_addresses=self._host_addresses)
        # containers join cgroups only where they get namespaces of their own (root)
        self.cgroups = Cgroups(network.cluster_id, enabled=memory_limits and isolate and os.geteuid() == 0)
        self._memory_wanted = memory_limits
        self.attachments = Attachments()
        self._host: RuntimeHost | None = None

    def notices(self) -> list[str]:
        """What is not enforced here, once each, for `localcluster up` to print."""
        out = []
        if not self._policy_wanted:
            out.append("NetworkPolicy is not enforced: switched off (--no-network-policy)")
        elif self.network.mode != "netns":
            out.append("NetworkPolicy is not enforced: pods share the host's network (loopback mode)")
        elif self.policy is None:
            out.append(nft_missing() or "NetworkPolicy is not enforced")
        if self._memory_wanted and not self.cgroups.enabled:
            out.append(cgroup_notice() or "memory limits are not enforced: containers have no namespaces of "
                                          "their own here (no root)")
        return [line for line in out if line]

    async def start(self, host: RuntimeHost) -> None:
        self._host = host
        if self.cgroups.enabled:
            await remove_stale()
        if self.policy is not None:
            await remove_stale_tables()
            self.policy.start(host)
            await self.policy.sync()  # the bridge's table exists as long as the bridge does

    # ---- NetworkPolicy ------------------------------------------------------------------------------------
    def _members(self) -> list[Member]:
        out = []
        for run in self._pods():
            if run.net is None or not run.ip:
                continue
            labels = run.pod["metadata"].get("labels") or {}
            endpoint = Endpoint(run.uid, run.namespace, labels, run.ip, container_ports(run.pod),
                                run.net.veth or "")
            out.append(Member(endpoint, run.net.pause.pid, run.host_ip))
        return out

    def _host_addresses(self) -> list[str]:
        return [self.network.api_host, *(self.network.pool.node_ip(i) for i in self.network.nodes.values())]

    async def network_changed(self) -> None:
        """A pod got its network or lost it: every pod's rules follow before its containers start."""
        if self.policy is not None:
            await self.policy.sync()

    # ---- volumes ------------------------------------------------------------------------------------------
    async def wait_for_attach(self, run: PodRun, report: Callable[[], Awaitable[None]]) -> None:
        """Attach the pod's claims to its node, waiting (ContainerCreating, a FailedAttachVolume event per new
        reason) while a single-node volume is in use on another node."""
        assert self._host is not None
        last = None
        states = [ctr.view.state for ctr in run.all_containers]
        while not run.deleting:
            claims = {name: claim for name in claim_names(run.pod)
                      if (claim := self._host.get("persistentvolumeclaims", run.namespace, name)) is not None}
            message = self.attachments.attach(run.pod, claims)
            if message is None:
                for ctr, state in zip(run.all_containers, states, strict=True):
                    ctr.view.state = state
                return
            if message != last:
                last = message
                for ctr in run.all_containers:
                    ctr.view.state = ps.waiting("ContainerCreating", message)
                await report()
                await self._host.record_event(run.pod, reason="FailedAttachVolume", message=message,
                                              type="Warning", component="attachdetach-controller")
            await asyncio.sleep(RETRY_SECONDS)

    def pod_finished(self, run: PodRun) -> None:
        self.attachments.detach(run.uid)

    # ---- containers ---------------------------------------------------------------------------------------
    def container_cgroups(self, run: PodRun, ctr: ContainerRun) -> ContainerCgroups:
        try:
            return self.cgroups.create(run.uid, ctr.spec, start=ctr.generation)
        except OSError:
            log.exception("container %s of %s/%s runs without its limits", ctr.name, run.namespace, run.name)
            return ContainerCgroups([], None)

    async def container_ended(self, cgroups: ContainerCgroups) -> str | None:
        """The reason the container ended for the kernel's part (OOMKilled), and its cgroups removed."""
        reason = OOM_KILLED if cgroups.oom_kills() > 0 else None
        await self.cgroups.remove(cgroups)
        return reason

    # ---- the end ------------------------------------------------------------------------------------------
    async def release(self, run: PodRun) -> None:
        """After the pod's containers and network are gone: volumes detached and unmounted, cgroups removed,
        the other pods' rules without it."""
        self.attachments.detach(run.uid)
        unmount_under(run.dir)
        await self.cgroups.remove_pod(run.uid)
        await self.network_changed()

    async def shutdown(self) -> None:
        if self.policy is not None:
            await self.policy.teardown()
        await self.cgroups.teardown()
