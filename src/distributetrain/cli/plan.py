"""`distributetrain inventory` and `plan`: see the free GPUs and preview a placement, creating nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from distributetrain.cli.options import field_option
from distributetrain.errors import CannotPlace, Forbidden, InvalidInput
from distributetrain.placement import fabric as fabrics
from distributetrain.placement import fit
from distributetrain.placement import inventory as inv
from distributetrain.placement.clusterfiles import read_cluster_files
from distributetrain.placement.planner import InsufficientGpus, Plan, plan
from distributetrain.quantity import parse_count
from distributetrain.request.fieldparsers import MIN_GPUS, check_gpus
from distributetrain.request.jobspec import FIELD, JobSpec

_CLUSTER_HELP = ("A file of nodes and pods, as `kubectl get nodes,pods -A -o json` writes it (a v1 List), "
                 "or NodeList/PodList files, JSON or YAML. Repeat for several files. "
                 "Without it: the live cluster.")


# The request's fields that decide whether a job pod fits a node, besides the GPU count, topology and policy:
# both commands judge nodes by the very pods `run` would create from them (manifests.pod_demand), so a
# preview and a run cannot disagree.
POD_SHAPE_FIELDS = ("resource", "fabric_resource", "tolerations", "node_selector", "cpu_per_gpu",
                    "memory_per_gpu", "shm_size", "pod_template", "worker_template", "chief_template")
# `image` is required of a request but decides nothing about placement: a preview stands in this one
PREVIEW_IMAGE = "distributetrain/preview:plan"


def _cluster_options(command: Any) -> Any:
    """The options shared by both commands: where the cluster comes from and who a job pod is (the request's
    fields, without their variables: a preview reads only its options)."""
    options = [
        click.option("--cluster", "cluster_files", multiple=True, metavar="FILE", help=_CLUSTER_HELP),
        *[field_option(name, env=False) for name in POD_SHAPE_FIELDS],
        click.option("--json", "as_json", is_flag=True, help="Machine-readable output."),
        click.option("--kubeconfig", metavar="FILE", envvar="KUBECONFIG",
                     help="Kubeconfig of the live cluster; inside a pod the in-cluster config is used."),
        click.option("--context", metavar="NAME", help="The kubeconfig context to use."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _read_live(kubeconfig: str | None, context: str | None) -> tuple[list[Any], list[Any]]:
    # imported here: files, --free and --help must work without loading the kubernetes client
    from distributetrain.kube import gateway

    nodes, pods = gateway.list_nodes_and_pods(kubeconfig=kubeconfig, context=context)
    return nodes, pods


def _request(shape: dict[str, Any], **fields: Any) -> JobSpec:
    """The request a preview judges nodes for: the pod-shape options and `fields` (gpus, topology, policy)."""
    args = {**shape, **fields, "image": PREVIEW_IMAGE}
    for name in ("tolerations", "node_selector"):
        args[name] = list(args[name]) or None
    return JobSpec.from_sources(args, {})


def _rows(spec: JobSpec, cluster_files: Sequence[str], kubeconfig: str | None, context: str | None, *,
          to_place: bool = False) -> tuple[inv.NodeGpus, ...]:
    """The nodes as a worker and the chief of `spec` see them; `to_place`: by the fit rules a job is placed
    with (a resource no node advertises is then bad input, as the manager says, not an empty table)."""
    from distributetrain.manager import manifests  # pure, but only previews of a cluster need it

    demands = manifests.pod_demands(spec)
    if cluster_files:
        nodes, pods = read_cluster_files(paths=cluster_files)
    else:
        nodes, pods = _read_live(kubeconfig, context)
    if to_place:
        return fit.survey(nodes, pods, resource=spec.resource, demands=demands, job_gpus=spec.gpus,
                          fabric=spec.fabric_resource, claimed=spec.template_resources())
    fabric = fabrics.resolve(spec.fabric_resource, nodes, gpu_resource=spec.resource,
                             claimed=spec.template_resources())
    return inv.inventory(nodes, pods, resource=spec.resource, demands=demands, fabric=fabric)


def _notes(row: inv.NodeGpus) -> str:
    return "; ".join(n for n in (row.note, row.fabric.note if row.fabric else None) if n)


class _GpuCount(click.IntRange):
    """`--gpus`: a whole number (click's parsing and messages), then the request's one rule (check_gpus)."""

    def __init__(self) -> None:
        super().__init__(min=MIN_GPUS)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        count = super().convert(value, param, ctx)
        try:
            return check_gpus(count)
        except ValueError as err:
            self.fail(str(err), param, ctx)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)


@click.command("inventory", epilog="""\b
Examples:
  distributetrain inventory                                  # the live cluster
  kubectl get nodes,pods -A -o json > cluster.json
  distributetrain inventory --cluster cluster.json --json
  distributetrain inventory --cluster nodes.yaml --cluster pods.yaml \\
      --toleration dedicated=ml:NoSchedule --node-selector gpu-type=a100
""")
@_cluster_options
def inventory_command(cluster_files: tuple[str, ...], as_json: bool, kubeconfig: str | None,
                      context: str | None, **shape: Any) -> None:
    """Free GPUs per node, and why a node cannot take a worker.

    FREE is ALLOCATABLE minus what pods bound to the node request (pods that have not finished, including
    Pending ones already bound), never below 0. A node is not ELIGIBLE when it is not Ready, is cordoned, has
    a NoSchedule/NoExecute taint the workers do not tolerate, does not match --node-selector (or the pod
    template's selector and required affinity), or has no room for a job pod's cpu and memory.
    """
    spec = _request(shape, gpus=str(MIN_GPUS))
    resource = spec.resource
    rows = _rows(spec, cluster_files, kubeconfig, context)
    if as_json:
        click.echo(json.dumps([row.to_json() for row in rows], indent=2))
        return
    fabric = fit.fabric_of(rows)
    if fabric is None:
        click.echo(_table(["NODE", "ALLOCATABLE", "REQUESTED", "FREE", "ELIGIBLE", "REASON"],
                          [(r.node, r.allocatable, r.requested, r.free, "yes" if r.eligible else "no",
                            r.reason or r.note) for r in rows]))
    else:
        click.echo(_table(["NODE", "ALLOCATABLE", "REQUESTED", "FREE", "FABRIC FREE", "FREE WITH FABRIC",
                           "ELIGIBLE", "REASON"],
                          [(r.node, r.allocatable, r.requested, r.free,
                            f"{r.fabric.free}/{r.fabric.allocatable}" if r.fabric else "",
                            r.fabric.offered if r.fabric else "", "yes" if r.eligible else "no",
                            r.reason or _notes(r)) for r in rows]))
    free = inv.free_gpus(rows)
    largest = min(free.items(), key=lambda item: (-item[1], item[0]), default=None)
    where = f" (largest: {largest[0]} with {largest[1]})" if largest else ""
    total = sum(free.values())
    click.echo(f"\n{len(free)} of {len(rows)} node(s) eligible; {total} {resource} free on them{where}.")
    if fabric is not None:
        click.echo(f"Fabric {fabric}: pods that cross nodes request it with their GPUs; FREE WITH FABRIC is "
                   "what a pod can take with its share (--fabric-resource none: TCP).")


def _parse_free(items: Sequence[str]) -> dict[str, int]:
    free: dict[str, int] = {}
    for item in items:
        for part in item.split(","):
            name, equals, count = part.strip().partition("=")
            if not equals or not name.strip():
                raise InvalidInput(f"--free {item!r}: {part.strip()!r} is not NODE=COUNT "
                                   "(e.g. --free a=5,b=3,c=2)")
            if name.strip() in free:
                raise InvalidInput(f"--free: node {name.strip()} is given twice")
            free[name.strip()] = parse_count(count.strip(), what=f"--free {name.strip()}")
    return free


def _plan_json(result: Plan, resource: str, topology_key: str | None) -> dict[str, Any]:
    roles = ["worker"] * len(result.workers) + ["chief"]
    return {
        "requested": result.requested,
        "resource": resource,
        "policy": result.policy,
        "nodes_spanned": result.nodes_spanned,
        "topology_key": topology_key,
        "domains": list(result.domains),
        "allocation": [{"node": e.node, "gpus": e.gpus, "role": role}
                       | ({"fabric": {e.fabric.resource: e.fabric.devices}} if e.fabric else {})
                       for e, role in zip(result.allocation, roles, strict=True)],
        "free_after": dict(sorted(result.free_after.items())),
    }


def _plan_text(result: Plan, resource: str) -> str:
    roles = ["worker"] * len(result.workers) + ["chief"]
    title = f"Plan for {result.requested} {resource} (policy {result.policy}): {result.nodes_spanned} node(s)"
    if result.domains:
        title += f" in {len(result.domains)} domain(s): {', '.join(result.domains)}"
    fabric = next((e.fabric.resource for e in result.allocation if e.fabric), None)
    header = ["ROLE", "NODE", "GPUS", *([fabric.upper()] if fabric else []), "FREE AFTER"]
    rows = [(role, e.node, e.gpus, *([e.fabric.devices if e.fabric else 0] if fabric else []),
             result.free_after[e.node]) for e, role in zip(result.allocation, roles, strict=True)]
    lines = [title, _table(header, rows)]
    blocks = sorted(result.free_after.values(), reverse=True)
    shown = ", ".join(map(str, blocks[:8])) + (", ..." if len(blocks) > 8 else "")
    lines.append(f"Free blocks left on eligible nodes, largest first: {shown or 'none'}")
    return "\n".join(lines)


@click.command("plan", epilog="""\b
Examples:
  distributetrain plan --gpus 6 --free a=5,b=3,c=2         # -> a:5 (worker) + c:1 (chief)
  distributetrain plan --gpus 8 --free a=7,b=4,c=4,d=4 --policy largest-first
  distributetrain plan --gpus 16 --cluster cluster.json --topology-key topology.kubernetes.io/zone --json
\b
Policies:
  optimal        fewest topology domains, then fewest nodes, then the biggest free blocks left (default)
  largest-first  the original design: take the largest free counts first, the last one partially
""")
@field_option("gpus", env=False, type=_GpuCount())
@click.option("--free", "free_items", multiple=True, metavar="NODE=COUNT,...",
              help="Free GPUs per eligible node, instead of reading a cluster (e.g. a=5,b=3,c=2).")
@field_option("topology_key", env=False)
@field_option("placement_policy", env=False, dest="policy")
@field_option("namespace", env=False)
@_cluster_options
def plan_command(gpus: int, free_items: tuple[str, ...], topology_key: str | None, policy: str,
                 namespace: str, cluster_files: tuple[str, ...], as_json: bool, kubeconfig: str | None,
                 context: str | None, **shape: Any) -> None:
    """Preview where N GPUs would go: one worker pod per node, the smallest share being the chief.

    Nothing is created. Exit code 3 when the request does not fit the free GPUs of the eligible nodes, or
    (live) the namespace's quota now; 2 when the namespace's policies (LimitRanges, ResourceQuotas, Pod
    Security, read from the live cluster, as `run` reads them) can never take the job's pods.
    """
    rows: tuple[inv.NodeGpus, ...] = ()
    spec = _request(shape, gpus=str(gpus), topology_key=topology_key, placement_policy=policy,
                    namespace=namespace)
    resource = spec.resource
    try:
        if free_items:
            given = [FIELD[name].option for name in ("tolerations", "node_selector", "topology_key",
                                                      "pod_template", "worker_template", "chief_template")
                     if shape.get(name) or (name == "topology_key" and topology_key)]
            if cluster_files or given:
                named = ", ".join(["--cluster"] * bool(cluster_files) + given)
                raise InvalidInput(f"--free gives the free GPUs directly: it cannot be combined with "
                                   f"{named}, which describe the nodes")
            result = plan(_parse_free(free_items), gpus, policy=policy)
        else:
            rows = _rows(spec, cluster_files, kubeconfig, context, to_place=True)
            # a preview of a whole job: one that fits in one pod crosses no node and takes no fabric devices
            result = fit.place(rows, gpus, policy=spec.placement_policy, topology_key=spec.topology_key,
                               one_pod_fabric=False)
    except InsufficientGpus as err:
        detail = f"\n{fit.excluded_text(rows)}" if rows else ""
        raise CannotPlace(f"{err}.{detail}") from err
    if not free_items and not cluster_files:
        _check_namespace(spec, result, kubeconfig, context)
    if as_json:
        click.echo(json.dumps(_plan_json(result, resource, topology_key), indent=2))
    else:
        click.echo(_plan_text(result, resource))


def _check_namespace(spec: JobSpec, result: Plan, kubeconfig: str | None, context: str | None) -> None:
    """The plan's pods against the namespace's policies, by the rules `run` uses (fit.check_namespace)."""
    from distributetrain.kube import gateway
    from distributetrain.manager import manifests, placing

    kube = gateway.Kube.connect(kubeconfig=kubeconfig, context=context)
    try:
        policies = placing.namespace_policies(kube, spec.namespace)
    except Forbidden as err:  # a preview from a laptop's narrower rights: say what was not judged
        click.echo(f"namespace {spec.namespace}: its LimitRanges, ResourceQuotas and Pod Security were not "
                   f"read ({err}); the plan does not judge them", err=True)
        return
    fit.check_namespace(manifests.gang(spec, result.workers, result.chief, owner=None, policies=policies),
                        policies, network_policy=spec.network_policy)


def register(group: click.Group) -> None:
    """Add this module's commands to the `distributetrain` group."""
    group.add_command(inventory_command)
    group.add_command(plan_command)
