"""Whether, and where, a request fits: the one set of fit rules every path shares - the manager's first gang,
an elastic or restart job's replacements, `run --dry-run` and `plan` - so a preview and a run cannot
disagree. Pure: the caller fetched the nodes and pods (manager/placing.py does, for the live cluster).

`survey` turns nodes and pods into per-node rows (free GPUs, and room for each pod's cpu, memory, template
and taints: inventory.py; the fabric's devices, fabric.py); `place` splits GPUs over the eligible rows
(planner.py), within an optional set of nodes, avoiding others, inside one topology domain. With a fabric,
pods that must talk across nodes get devices in proportion to their GPUs, so a node offers only the GPUs
whose share of devices it still has; a whole job that fits in one pod needs none (nothing crosses a node).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.placement import fabric as fabrics
from distributetrain.placement import inventory, namespacefit, planner
from distributetrain.placement.inventory import NodeGpus, PodDemand
from distributetrain.placement.namespacefit import NamespacePolicies

EXCLUDED_SHOWN = 10  # nodes listed by name in a refusal; the rest are counted


class UnknownResource(InvalidInput):
    """No node advertises the GPU resource: a typo (exit 2), unless its nodes are yet to come from a pool
    that scales from zero (manager/capacity.py)."""


def check_resource_known(nodes: Iterable[Mapping[str, Any]], resource: str, *,
                         option: str = "--resource") -> None:
    """A resource no node advertises is a typo (exit 2), not a shortage (exit 3)."""
    known: set[str] = set()
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if resource in allocatable:
            return
        known.update(k for k in allocatable if "/" in k)
    listed = ", ".join(sorted(known)) or "none"
    field = option.removeprefix("--").replace("-", "_")
    raise UnknownResource(f"{field}: no node advertises {resource!r} (extended resources in this cluster: "
                          f"{listed}); pass {option} with one of them; nothing was created")


def survey(nodes: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *, resource: str,
           demands: Sequence[PodDemand] | None, job_gpus: int, resource_known: bool = True,
           fabric: fabrics.Request = fabrics.NO_FABRIC, claimed: Collection[str] = ()
           ) -> tuple[NodeGpus, ...]:
    """Per node: free GPUs and whether (and how many of them) a job pod can use. `demands`: what each of the
    job's pod roles asks of a node besides GPUs (manifests.pod_demand); None for GPUs only. With
    `resource_known`, a resource no node advertises is refused (UnknownResource). `fabric`: the request's
    --fabric-resource, resolved against these nodes (`claimed`: resources the pod templates request
    themselves); the rows then count its devices."""
    if resource_known:
        check_resource_known(nodes, resource)
    resolved = fabrics.resolve(fabric, nodes, gpu_resource=resource, claimed=claimed)
    if resolved is not None and fabric.mode != fabrics.AUTO and resource_known:
        check_resource_known(nodes, resolved.resource, option="--fabric-resource")
    return inventory.inventory(nodes, pods, resource=resource, demands=demands, job_gpus=job_gpus,
                               fabric=resolved)


def fabric_of(rows: Iterable[NodeGpus]) -> fabrics.Fabric | None:
    """The fabric the rows were surveyed with, if any."""
    return next((row.fabric.fabric for row in rows if row.fabric is not None), None)


def place(rows: Sequence[NodeGpus], gpus: int, *, policy: str, topology_key: str | None = None,
          allow: Collection[str] | None = None, avoid: Collection[str] = (),
          domain: str | None = None, one_pod_fabric: bool = True) -> planner.Plan:
    """Split `gpus` over the eligible rows by `policy`: only nodes in `allow` (when given), none in `avoid`,
    and with `topology_key`, the fewest domains of that label - only `domain` when it is given (a
    replacement stays beside the job). CannotPlace (planner.InsufficientGpus) when it does not fit; exit 2
    when no eligible node carries the topology label at all (a typo, not a shortage).

    With a fabric, each entry carries its share of its node's devices. `one_pod_fabric` False: the plan is
    a whole job that will never grow, so one that fits in one pod takes no devices (it crosses no node)."""
    fabric = fabric_of(rows)
    plan = _place(rows, gpus, policy=policy, topology_key=topology_key, allow=allow, avoid=avoid,
                  domain=domain, with_fabric=False)
    if fabric is None or (plan.nodes_spanned == 1 and not one_pod_fabric):
        return plan
    try:
        plan = _place(rows, gpus, policy=policy, topology_key=topology_key, allow=allow, avoid=avoid,
                      domain=domain, with_fabric=True)
    except planner.InsufficientGpus as err:
        raise planner.InsufficientGpus(requested=err.requested, free_total=err.free_total,
                                       eligible_nodes=err.eligible_nodes, largest=err.largest,
                                       detail=fabric_text(rows, allow=allow, avoid=avoid)) from None
    by_node = {row.node: row.fabric for row in rows if row.fabric is not None}
    allocation = tuple(dataclasses.replace(e, fabric=fabrics.Share(fabric, by_node[e.node].devices(e.gpus)))
                       for e in plan.allocation)
    return dataclasses.replace(plan, allocation=allocation)


def _place(rows: Sequence[NodeGpus], gpus: int, *, policy: str, topology_key: str | None,
           allow: Collection[str] | None, avoid: Collection[str], domain: str | None,
           with_fabric: bool) -> planner.Plan:
    free = {node: count for node, count in inventory.free_gpus(rows, with_fabric=with_fabric).items()
            if (allow is None or node in allow) and node not in avoid}
    topology = None
    if topology_key:
        topology = inventory.topology(rows, topology_key)
        if inventory.free_gpus(rows) and not topology:
            raise InvalidInput(f"topology_key (--topology-key, DT_TOPOLOGY_KEY): no eligible node has the "
                               f"label {topology_key!r}; check the name: kubectl get nodes --show-labels")
        if domain is not None:
            topology = {node: d for node, d in topology.items() if d == domain}
            free = {node: count for node, count in free.items() if node in topology}
    return planner.plan(free, gpus, topology=topology, policy=policy)


def check_namespace(pods: Sequence[tuple[str, Mapping[str, Any]]], policies: NamespacePolicies, *,
                    network_policy: bool) -> None:
    """The gang's pods, as they would be created (each with a name for messages: "the worker of 4 GPUs"),
    against the namespace's LimitRanges, Pod Security level and ResourceQuotas (namespacefit.py). What can
    never fit is bad input (exit 2): a LimitRange or Pod Security refusal, a quota whose hard limit is below
    what the job needs. What does not fit now (the quota used by others) is CannotPlace (exit 3, or a wait
    under --wait-for-gpus). Each names the policy, the field and both numbers."""
    found: list[str] = []
    for what, pod in pods:
        for problem in namespacefit.problems(pod, policies, what=what):
            if problem not in found:
                found.append(problem)
    shortfalls = namespacefit.quota_shortfalls([pod for _, pod in pods], policies,
                                               network_policy=network_policy)
    found += [s.message(policies.namespace) for s in shortfalls if s.never]
    if found:
        raise InvalidInput(f"namespace {policies.namespace}: the job's pods cannot fit its policies:\n  "
                           + "\n  ".join(found))
    if shortfalls:
        raise CannotPlace(f"namespace {policies.namespace}: the quota has no room for the job now: "
                          + "; ".join(s.message(policies.namespace) for s in shortfalls))


def fabric_text(rows: Sequence[NodeGpus], *, allow: Collection[str] | None = None,
                avoid: Collection[str] = ()) -> str:
    """Which eligible nodes offer fewer GPUs with their fabric devices than without, with the numbers: the
    first EXCLUDED_SHOWN."""
    short = [row for row in rows if row.eligible and row.fabric is not None
             and row.fabric.offered < row.offered and (allow is None or row.node in allow)
             and row.node not in avoid]
    if not short:
        return ""
    resource = short[0].fabric.fabric.resource if short[0].fabric else ""
    parts = [f"{row.node} offers {row.fabric.offered} of {row.offered} free GPU(s) ({row.fabric.note})"
             for row in short[:EXCLUDED_SHOWN] if row.fabric is not None]
    more = f"; and {len(short) - EXCLUDED_SHOWN} more" if len(short) > EXCLUDED_SHOWN else ""
    return (f"Pods that cross nodes request {resource} with their GPUs: " + "; ".join(parts) + more
            + " (--fabric-resource none runs over TCP instead)")


def excluded_text(rows: Sequence[NodeGpus]) -> str:
    """Which nodes were not eligible and why, for a refusal: the first EXCLUDED_SHOWN by name."""
    excluded = [row for row in rows if not row.eligible]
    if not excluded:
        return "No node was excluded."
    held = sum(row.free for row in excluded)
    lines = [f"Excluded {len(excluded)} of {len(rows)} node(s), with {held} GPU(s) free on them:"]
    lines += [f"  {row.node} ({row.free} free): {row.reason}" for row in excluded[:EXCLUDED_SHOWN]]
    if len(excluded) > EXCLUDED_SHOWN:
        lines.append(f"  ... and {len(excluded) - EXCLUDED_SHOWN} more (see `distributetrain inventory`)")
    return "\n".join(lines)
