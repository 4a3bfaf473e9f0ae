"""The autoscaler's loop (the I/O around planning.py and provisioning.py): every `scan_interval` seconds, as
cluster-autoscaler's RunOnce does, it

1. registers the nodes it asked for once `provision_delay` has passed (NotReady, with the node's Lease), and
   makes them Ready `ready_delay` later, as a cloud VM boots and its kubelet reports in;
2. scales up for the unschedulable pods (PodScheduled=False, Unschedulable; not gated, not consuming a
   ProvisioningRequest) with the pools' events: ScaledUpGroup on its status ConfigMap, TriggeredScaleUp or
   NotTriggerScaleUp on each pod;
3. answers ProvisioningRequests (when the cluster serves them);
4. removes a pool's node that has held no pod for `unneeded_time` (--scale-down-unneeded-time), down to the
   pool's minimum: tainted ToBeDeletedByClusterAutoscaler, then deleted (ScaleDownEmpty, ScaleDown);
5. writes kube-system/cluster-autoscaler-status.
Left out: scale-down of nodes that still hold pods (draining), --scale-down-delay-after-add, back-off after
a failed scale-up, expanders other than "first pool that fits", cloud quotas and stockouts (a pool's maximum
size plays them).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from localcluster._internal.admission.schedulinggates import is_gated
from localcluster._internal.doubles.autoscaler import planning, provisioning, status
from localcluster._internal.doubles.autoscaler.pools import NodePool, dressed, pool_of, set_ready
from localcluster._internal.podspec.requests import holds_resources
from localcluster._internal.storage.store import AlreadyExists, NotFound, Store, now_iso

log = logging.getLogger(__name__)
Obj = dict[str, Any]
COMPONENT = "cluster-autoscaler"
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"


class Recorder(Protocol):
    def __call__(self, obj: Mapping[str, Any], *, reason: str, message: str, type: str = "Normal",
                 component: str = "kubelet", host: str = "", field_path: str = "") -> None: ...


# new_node(name, gpus, index): a plain Ready node (cluster/spec.py node_object), index numbering its podCIDR
NewNode = Callable[[str, int, int], Obj]


@dataclass
class Upcoming:
    """A node asked for: registered at `register_at` (monotonic), Ready `ready_delay` after."""

    pool: NodePool
    name: str
    index: int
    register_at: float
    registered: bool = False
    booked_by: tuple[str, str] | None = None  # the ProvisioningRequest it was added for


@dataclass(frozen=True)
class Timing:
    scan_interval: float = 10.0      # --scan-interval
    provision_delay: float = 30.0    # from the decision to the node's registration (the cloud's part)
    ready_delay: float = 5.0         # from registration to Ready (kubelet, device plugin)
    unneeded_time: float = 600.0     # --scale-down-unneeded-time


class Autoscaler:
    def __init__(self, *, store: Store, pools: Sequence[NodePool], schedule: planning.Schedule,
                 record: Recorder, new_node: NewNode, first_index: int, gpu_taint: bool = True,
                 timing: Timing = Timing(), provisioning_requests: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.pools, self.schedule, self.record = store, tuple(pools), schedule, record
        self.new_node, self.gpu_taint, self.timing, self.clock = new_node, gpu_taint, timing, clock
        self.provisioning_requests = provisioning_requests
        self.next_index = first_index
        self.serial: Counter[str] = Counter()
        self.upcoming: dict[str, Upcoming] = {}
        self.ready_at: dict[str, float] = {}       # registered nodes not Ready yet -> when they are
        self.empty_since: dict[str, float] = {}
        self._told: dict[str, str] = {}            # pod uid -> the last scale-up message it was given
        # nodes added for a provisioned request, kept for its pods until then (monotonic) or its deletion
        self._booked: dict[str, tuple[tuple[str, str], float]] = {}

    async def run(self) -> None:
        self._write_status()
        while True:
            try:
                self.run_once()
            except Exception:  # the loop goes on, as CA's does after a failed pass
                log.exception("autoscaler pass failed")
            await asyncio.sleep(self.timing.scan_interval)

    def run_once(self) -> None:
        now = self.clock()
        self._bring_up(now)
        self._scale_up(now)
        if self.provisioning_requests:
            self._provisioning(now)
        self._scale_down(now)
        self._write_status()

    # ---- nodes coming up ---------------------------------------------------------------------------------
    def _bring_up(self, now: float) -> None:
        for name, coming in list(self.upcoming.items()):
            if not coming.registered and now >= coming.register_at:
                node = dressed(self.new_node(name, coming.pool.gpus, coming.index), coming.pool,
                               gpu_taint=self.gpu_taint, ready=False)
                try:
                    created = self.store.create("nodes", node)
                except AlreadyExists:
                    continue
                self._lease(created)
                coming.registered = True
                self.ready_at[name] = now + self.timing.ready_delay
                self.record(created, reason="RegisteredNode", message=f"Node {name} event: Registered Node "
                            f"{name} in Controller", component="node-controller")
        for name, when in list(self.ready_at.items()):
            if now < when:
                continue
            del self.ready_at[name]
            booked_by = self.upcoming.pop(name).booked_by if name in self.upcoming else None
            with contextlib.suppress(NotFound):
                node = self.store.mutate("nodes", None, name, lambda n: set_ready(n, True, now=now_iso()))
                self.record(node, reason="NodeReady", message=f"Node {name} status is now: NodeReady",
                            host=name)
                if booked_by is not None:
                    self._booked[name] = (booked_by, now + BOOKING_SECONDS)

    def _lease(self, node: Obj) -> None:
        owner = {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"],
                 "uid": node["metadata"]["uid"]}
        with contextlib.suppress(AlreadyExists):
            self.store.create("leases.coordination.k8s.io", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node["metadata"]["name"], "namespace": "kube-node-lease",
                             "ownerReferences": [owner]},
                "spec": {"holderIdentity": node["metadata"]["name"], "leaseDurationSeconds": 40}})

    def _ask(self, pool: NodePool, count: int, now: float, *, booked_by: tuple[str, str] | None = None
             ) -> None:
        before = self._target(pool)
        for _ in range(count):
            self.serial[pool.name] += 1
            name = f"{pool.name}-{self.serial[pool.name]}"
            self.upcoming[name] = Upcoming(pool, name, self.next_index, now + self.timing.provision_delay,
                                           booked_by=booked_by)
            self.next_index += 1
        self.record(self._status_object(), reason="ScaledUpGroup",
                    message=f"Scale-up: setting group {pool.name} size to {before + count} instead of "
                            f"{before} (max: {pool.max_size})", component=COMPONENT)

    # ---- scale-up ----------------------------------------------------------------------------------------
    def _groups(self) -> list[planning.Group]:
        template = {}
        for pool in self.pools:
            template[pool.name] = dressed(self.new_node(f"template-{pool.name}", pool.gpus, 0), pool,
                                          gpu_taint=self.gpu_taint, ready=True)
        return [planning.Group(pool, self._target(pool), template[pool.name]) for pool in self.pools]

    def _upcoming_nodes(self) -> list[Obj]:
        """Nodes asked for and not Ready yet, as they will be once Ready (for the simulation)."""
        groups = {g.pool.name: g.template for g in self._groups()}
        out = []
        for name, coming in list(self.upcoming.items()):
            node = copy.deepcopy(groups[coming.pool.name])
            node["metadata"]["name"] = name
            out.append(node)
        return out

    def _scale_up(self, now: float) -> None:
        pending = sorted((p for p in self.store.objects("pods") if _unschedulable(p)),
                         key=lambda p: p["metadata"].get("creationTimestamp", ""))
        if not pending:
            return
        ready = [n for n in self.store.objects("nodes") if n["metadata"]["name"] not in self.ready_at]
        bound = [p for p in self.store.objects("pods") if holds_resources(p)]
        plan = planning.plan_scale_up(pending, self._groups(), ready + self._upcoming_nodes(), self.schedule,
                                      bound)
        by_name = {p.name: p for p in self.pools}
        for pool, count in plan.increases.items():
            self._ask(by_name[pool], count, now)
        for pod in pending:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if key in plan.triggered:
                self._tell(pod, "TriggeredScaleUp", plan.triggered[key])
            elif key in plan.not_triggered:
                self._tell(pod, "NotTriggerScaleUp", plan.not_triggered[key])

    def _tell(self, pod: Obj, reason: str, message: str) -> None:
        uid = pod["metadata"].get("uid", "")
        if self._told.get(uid) == message:
            return
        self._told[uid] = message
        self.record(pod, reason=reason, message=message, component=COMPONENT)

    # ---- ProvisioningRequests ----------------------------------------------------------------------------
    def _provisioning(self, now: float) -> None:
        for request in self.store.objects(provisioning.RESOURCE):
            cls = (request.get("spec") or {}).get("provisioningClassName")
            if cls not in provisioning.CLASSES or provisioning.is_settled(request):
                continue
            meta = request["metadata"]
            templates = {t["metadata"]["name"]: t
                         for t in self.store.objects("podtemplates", meta["namespace"])}
            pods = provisioning.requested_pods(request, templates)
            if isinstance(pods, str):
                log.warning("ProvisioningRequest %s/%s: %s", meta["namespace"], meta["name"], pods)
                continue
            nodes = [n for n in self.store.objects("nodes") if not n["metadata"].get("deletionTimestamp")]
            bound = [p for p in self.store.objects("pods") if holds_resources(p)]
            increases = planning.place_all(pods, self._groups(), nodes=nodes + self._upcoming_nodes(),
                                           bound=bound, schedule=self.schedule,
                                           grow=cls == provisioning.BEST_EFFORT_ATOMIC)
            verdict = provisioning.verdict(str(cls), increases)
            if verdict.provisioned and increases:
                by_name = {p.name: p for p in self.pools}
                for pool, count in increases.items():
                    self._ask(by_name[pool], count, now, booked_by=(meta["namespace"], meta["name"]))
            self._set_conditions(request, verdict)

    def _set_conditions(self, request: Obj, verdict: provisioning.Verdict) -> None:
        stamp = now_iso()

        def change(obj: Obj) -> None:
            state = obj.setdefault("status", {})
            generation = int(obj["metadata"].get("generation", 1))
            provisioning.with_condition(state, "Accepted", True, "Accepted", provisioning.ACCEPTED_MESSAGE,
                                        now=stamp, generation=generation)
            provisioning.with_condition(state, "Provisioned", verdict.provisioned, verdict.reason,
                                        verdict.message, now=stamp, generation=generation)

        meta = request["metadata"]
        if (provisioning.condition(request, "Provisioned").get("reason") == verdict.reason
                and provisioning.condition(request, "Accepted")):
            return
        with contextlib.suppress(NotFound):
            self.store.mutate(provisioning.RESOURCE, meta["namespace"], meta["name"], change)

    # ---- scale-down --------------------------------------------------------------------------------------
    def _scale_down(self, now: float) -> None:
        busy = {p["spec"]["nodeName"] for p in self.store.objects("pods") if holds_resources(p)}
        sizes = Counter(pool_of(n) for n in self.store.objects("nodes") if pool_of(n))
        by_name = {p.name: p for p in self.pools}
        for node in list(self.store.objects("nodes")):
            name, pool = node["metadata"]["name"], by_name.get(pool_of(node))
            if pool is None or name in self.ready_at or name in busy or self._is_booked(name, now):
                self.empty_since.pop(name, None)
                continue
            since = self.empty_since.setdefault(name, now)
            if now - since < self.timing.unneeded_time or sizes[pool.name] <= pool.min_size:
                continue
            self._remove(node, pool)
            sizes[pool.name] -= 1
            self.empty_since.pop(name, None)

    def _is_booked(self, name: str, now: float) -> bool:
        booked = self._booked.get(name)
        if booked is None:
            return False
        (namespace, request), until = booked
        if now < until and self.store.get(provisioning.RESOURCE, namespace, request) is not None:
            return True
        del self._booked[name]
        return False

    def _remove(self, node: Obj, pool: NodePool) -> None:
        name = node["metadata"]["name"]

        def taint(obj: Obj) -> None:
            obj["spec"].setdefault("taints", []).append(
                {"key": TO_BE_DELETED_TAINT, "value": str(int(time.time())), "effect": "NoSchedule"})

        with contextlib.suppress(NotFound):
            tainted = self.store.mutate("nodes", None, name, taint)
            self.record(tainted, reason="ScaleDown", message="marked the node as toBeDeleted/unschedulable",
                        component=COMPONENT)
            self.store.delete("nodes", None, name)
            self.record(self._status_object(), reason="ScaleDownEmpty",
                        message=f'Scale-down: removing empty node "{name}"', component=COMPONENT)
            log.info("node pool %s: removed empty node %s", pool.name, name)

    # ---- status ------------------------------------------------------------------------------------------
    def _target(self, pool: NodePool) -> int:
        registered = sum(1 for n in self.store.objects("nodes") if pool_of(n) == pool.name)
        return registered + sum(1 for c in self.upcoming.values() if c.pool is pool and not c.registered)

    def _status_object(self) -> Obj:
        found = self.store.get("configmaps", status.NAMESPACE, status.NAME)
        return found if found is not None else status.config_map("", now=now_iso())

    def _write_status(self) -> None:
        nodes = self.store.objects("nodes")
        counts = []
        for pool in self.pools:
            mine = [n for n in nodes if pool_of(n) == pool.name]
            ready = sum(1 for n in mine if n["metadata"]["name"] not in self.ready_at)
            empty = sum(1 for n in mine if n["metadata"]["name"] in self.empty_since)
            counts.append(status.GroupCounts(pool.name, len(mine), ready, self._target(pool), pool.min_size,
                                             pool.max_size, empty))
        stamp = now_iso()
        text = status.status_text(counts, now=stamp)
        current = self.store.get("configmaps", status.NAMESPACE, status.NAME)
        if current is None:
            with contextlib.suppress(AlreadyExists):
                self.store.create("configmaps", status.config_map(text, now=stamp))
            return

        def change(obj: Obj) -> None:
            obj.setdefault("data", {})["status"] = text
            obj["metadata"].setdefault("annotations", {})[status.LAST_UPDATED] = stamp

        self.store.mutate("configmaps", status.NAMESPACE, status.NAME, change)


BOOKING_SECONDS = 600.0  # CA keeps a provisioned request's capacity this long for its pods


def _unschedulable(pod: Obj) -> bool:
    """A pod CA would scale up for: pending, unbound, not gated, marked Unschedulable by the scheduler, and
    not consuming a ProvisioningRequest (whose capacity was asked for already)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp") or is_gated(pod):
        return False
    if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
        return False
    if provisioning.CONSUME_ANNOTATION in (meta.get("annotations") or {}):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") ==
               "Unschedulable" for c in (pod.get("status") or {}).get("conditions") or [])
