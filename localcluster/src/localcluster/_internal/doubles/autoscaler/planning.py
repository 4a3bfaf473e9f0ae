"""cluster-autoscaler's scale-up decision, pure (cluster-autoscaler 1.31, core/scaleup/orchestrator and FAQ.md
"How does scale-up work?"): the unschedulable pods, oldest first, are placed in a simulation on the nodes
already coming up, then on new nodes made from each pool's template, the first pool (in the order given,
as the `priority` expander would) whose template fits and which is below its maximum; the scheduler's own
filters judge every fit. Each pod helped hears TriggeredScaleUp, each pod no pool can help
NotTriggerScaleUp with every pool's reason, counted (`pod didn't trigger scale-up: 1 max node group size
reached`).

The same simulation answers a ProvisioningRequest all at once (provisioning.py): `place_all` places every
pod or none.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from localcluster._internal.doubles.autoscaler.pools import NodePool

Obj = dict[str, Any]
MAX_SIZE_REACHED = "max node group size reached"


class Fit(Protocol):
    """What the scheduler's filters answer (controllers/scheduler.py ScheduleResult)."""

    @property
    def node_name(self) -> str | None: ...

    @property
    def reasons(self) -> Mapping[str, tuple[str, ...]]: ...


# schedule(pod, nodes, pods bound to them): where the scheduler would bind the pod, or why nowhere
Schedule = Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]], Iterable[Mapping[str, Any]]], Fit]


@dataclass(frozen=True)
class Group:
    """A pool as the planner sees it: its target size (nodes registered and coming) and one node of it."""

    pool: NodePool
    size: int
    template: Obj


@dataclass
class Simulation:
    """Nodes and the pods bound to them, real or imagined, that the scheduler's filters judge against."""

    schedule: Schedule
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    added: Counter[str] = field(default_factory=Counter)  # pool -> new nodes imagined

    def bind(self, pod: Mapping[str, Any]) -> bool:
        """Place `pod` on one of the nodes, if one fits."""
        if not self.nodes:
            return False
        fit = self.schedule(pod, self.nodes, self.pods)
        if fit.node_name is None:
            return False
        self.pods.append(_bound(pod, fit.node_name))
        return True

    def grow(self, pod: Mapping[str, Any], groups: Sequence[Group]) -> tuple[str | None, dict[str, str]]:
        """Place `pod` on a new node of the first pool that can take it: (that pool, None) or (None, each
        pool's reason)."""
        reasons: dict[str, str] = {}
        for group in groups:
            name = group.pool.name
            if group.size + self.added[name] >= group.pool.max_size:
                reasons[name] = MAX_SIZE_REACHED
                continue
            node = copy.deepcopy(group.template)
            node["metadata"]["name"] = f"template-node-for-{name}-{self.added[name]}"
            fit = self.schedule(pod, [node], ())
            if fit.node_name is None:
                refused = next(iter(fit.reasons.values()), ("no template node fits",))
                reasons[name] = refused[0]
                continue
            self.nodes.append(node)
            self.pods.append(_bound(pod, node["metadata"]["name"]))
            self.added[name] += 1
            return name, {}
        return None, reasons


@dataclass(frozen=True)
class ScaleUp:
    """Nodes to add per pool, and what each pending pod is told (pod key -> message)."""

    increases: Mapping[str, int]
    triggered: Mapping[tuple[str, str], str]
    not_triggered: Mapping[tuple[str, str], str]


def plan_scale_up(pending: Sequence[Obj], groups: Sequence[Group], nodes: Sequence[Obj],
                  schedule: Schedule, bound: Sequence[Obj] = ()) -> ScaleUp:
    """`pending`: the unschedulable pods, oldest first; `nodes`: the Ready nodes (holding the `bound` pods)
    and those asked for and not Ready yet: a pod that fits there waits for them, as CA's filter of pods
    schedulable on existing and upcoming nodes does."""
    simulation = Simulation(schedule, nodes=[copy.deepcopy(n) for n in nodes], pods=list(bound))
    helped: list[tuple[str, str]] = []
    refused: dict[tuple[str, str], str] = {}
    for pod in pending:
        if simulation.bind(pod):
            continue
        pool, reasons = simulation.grow(pod, groups)
        if pool is not None:
            helped.append(_key(pod))
        else:
            refused[_key(pod)] = "pod didn't trigger scale-up: " + _histogram(reasons.values())
    sizes = {g.pool.name: g for g in groups}
    infos = ", ".join(f"{{{name} {sizes[name].size}->{sizes[name].size + n} "
                      f"(max: {sizes[name].pool.max_size})}}" for name, n in simulation.added.items())
    triggered = {key: f"pod triggered scale-up: [{infos}]" for key in helped}
    return ScaleUp(dict(simulation.added), triggered, refused)


def place_all(pods: Sequence[Obj], groups: Sequence[Group], *, nodes: Sequence[Obj], bound: Sequence[Obj],
              schedule: Schedule, grow: bool) -> dict[str, int] | None:
    """Every pod placed on `nodes` (holding `bound` pods), then, with `grow`, on new pool nodes: the nodes to
    add per pool; None when some pod fits nowhere (all or nothing)."""
    simulation = Simulation(schedule, nodes=[copy.deepcopy(n) for n in nodes], pods=list(bound))
    for pod in pods:
        if simulation.bind(pod):
            continue
        if not grow or simulation.grow(pod, groups)[0] is None:
            return None
    return dict(simulation.added)


def _bound(pod: Mapping[str, Any], node: str) -> Obj:
    out = copy.deepcopy(dict(pod))
    out.setdefault("spec", {})["nodeName"] = node
    out.setdefault("status", {})["phase"] = "Running"
    return out


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _histogram(reasons: Iterable[str]) -> str:
    counts = Counter(reasons)
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items())) or "no node group to scale up"
