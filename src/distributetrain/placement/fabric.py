"""The fabric beside the GPUs: the network devices a job pod requests with its GPUs so that NCCL crosses nodes
over RDMA instead of TCP sockets. Pure.

Two kinds, told apart by the resource's name:
- EFA on AWS: `vpc.amazonaws.com/efa`, one per EFA interface, from the EFA device plugin
  (aws/eks-charts stable/aws-efa-k8s-device-plugin); NCCL reaches it through the aws-ofi-nccl plugin and
  libfabric's `efa` provider (NCCL's log: `NET/OFI Selected Provider is efa`).
- InfiniBand or RoCE: any other resource, e.g. `rdma/...` from an RDMA device plugin
  (Mellanox/k8s-rdma-shared-dev-plugin) or SR-IOV virtual functions from the NVIDIA Network Operator; NCCL's
  own IB transport over rdma-core's libibverbs (`NET/IB : Using [0]mlx5_0:1/IB`).

How many a pod requests. Exclusive devices (EFA, SR-IOV functions) are shared out in proportion to the
GPUs: a pod of g GPUs on a node of G GPUs and F devices requests max(1, floor(g * F / G)) - 6 of 8 GPUs on a
p4d (4 EFA) get 3. Rounding down never asks a node for more devices than it has when its GPUs are split
among several pods (the floors add up to at most F), and every pod gets at least one. A shared device
plugin's resource (`rdma/...` of k8s-rdma-shared-dev-plugin, whose every pod sees all of the node's HCAs
and whose count, rdmaHcaMax, is a sharing limit, not a number of HCAs) is asked for a fixed number per pod:
`--fabric-resource rdma/hca_shared_devices_a=1`, what a detected `rdma/` resource gets.

`--fabric-resource` is `auto` by default: the one fabric resource the GPU nodes advertise, if there is
exactly one (vpc.amazonaws.com/efa, or a single rdma/... name); none when they advertise none; refused with
the names (exit 2) when they advertise several. `none` runs over TCP whatever the nodes have.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain.errors import InvalidInput
from distributetrain.quantity import parse_count

EFA_RESOURCE = "vpc.amazonaws.com/efa"
RDMA_PREFIX = "rdma/"
EFA, IB = "efa", "ib"          # the kinds: what NCCL's log must show (NET/OFI with provider efa; NET/IB)
KINDS = (EFA, IB)
AUTO, NONE = "auto", "none"


@dataclass(frozen=True)
class Fabric:
    """A fabric resource job pods request: `per_pod` devices each, or (None) in proportion to their GPUs."""

    resource: str
    per_pod: int | None = None

    @property
    def kind(self) -> str:
        return EFA if self.resource == EFA_RESOURCE else IB

    def devices(self, gpus: int, *, node_gpus: int, node_devices: int) -> int:
        """What a pod of `gpus` GPUs requests on a node that has `node_gpus` GPUs and `node_devices` devices
        allocatable (see the module's notes)."""
        if self.per_pod is not None:
            return self.per_pod
        if node_gpus <= 0 or node_devices <= 0:
            return 1
        return max(1, gpus * node_devices // node_gpus)

    def __str__(self) -> str:
        return self.resource if self.per_pod is None else f"{self.resource}={self.per_pod}"


@dataclass(frozen=True)
class Request:
    """What `--fabric-resource` asks: `auto` (detect), `none`, or a given fabric."""

    mode: str                      # AUTO, NONE or "given"
    fabric: Fabric | None = None

    def __str__(self) -> str:
        return str(self.fabric) if self.fabric is not None else self.mode


AUTO_REQUEST = Request(AUTO)
NO_FABRIC = Request(NONE)


def parse_request(text: Any) -> Request:
    """`auto`, `none`, `NAME` (in proportion to the GPUs) or `NAME=N` (N per pod)."""
    raw = str(text).strip()
    if raw.lower() in (AUTO, NONE):
        return Request(raw.lower())
    name, equals, count = raw.partition("=")
    name = name.strip()
    if "/" not in name or name.startswith("/") or name.endswith("/") or " " in name:
        raise ValueError(f"{raw!r} is not auto, none, an extended resource (vpc.amazonaws.com/efa, rdma/...) "
                         "or RESOURCE=N")
    if not equals:
        return Request("given", Fabric(name))
    if not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"{raw!r}: the count after = must be a whole number of devices per pod, at least 1")
    return Request("given", Fabric(name, int(count)))


def _allocatable(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((node.get("status") or {}).get("allocatable")) or {}


def _positive(node: Mapping[str, Any], resource: str) -> bool:
    name = str((node.get("metadata") or {}).get("name") or "")
    raw = _allocatable(node).get(resource)
    return raw is not None and parse_count(raw, what=f"node {name} status.allocatable.{resource}") > 0


def _looks_like_fabric(resource: str) -> bool:
    return resource == EFA_RESOURCE or resource.startswith(RDMA_PREFIX)


def resolve(request: Request, nodes: Iterable[Mapping[str, Any]], *, gpu_resource: str,
            claimed: Collection[str] = ()) -> Fabric | None:
    """The fabric job pods request, from the request and the nodes that have GPUs. `claimed`: the resources
    the user's pod templates request themselves; the fabric's devices are the manager's, as the GPUs are."""
    if request.mode == NONE:
        return None
    if request.fabric is not None:
        fabric: Fabric | None = request.fabric
    else:
        found = sorted({name for node in nodes if _positive(node, gpu_resource)
                        for name in _allocatable(node) if _looks_like_fabric(name) and _positive(node, name)})
        if len(found) > 1:
            raise InvalidInput(f"fabric_resource (--fabric-resource, DT_FABRIC_RESOURCE): the GPU nodes "
                               f"advertise several fabric resources ({', '.join(found)}); pass the one job "
                               "pods should request, or none for TCP; nothing was created")
        if not found:
            return None
        # a detected rdma/ resource is the shared device plugin's: every pod sees all the node's HCAs
        fabric = Fabric(found[0], 1 if found[0].startswith(RDMA_PREFIX) else None)
    assert fabric is not None
    if fabric.resource in claimed:
        raise InvalidInput(f"fabric_resource (--fabric-resource, DT_FABRIC_RESOURCE): the pod template "
                           f"requests {fabric.resource} itself, and the manager requests it for each pod "
                           "with its GPUs; remove it from the template, or pass --fabric-resource none to "
                           "manage it in the template; nothing was created")
    return fabric


@dataclass(frozen=True)
class Room:
    """A node's fabric devices for a job pod: allocatable, requested by pods bound there, free; `offered`,
    the most GPUs a job pod can take there with its share of devices (at most the GPUs it may take), and
    `note`, why that is fewer than those GPUs."""

    fabric: Fabric
    gpus: int              # the node's allocatable GPUs: the proportion's denominator
    allocatable: int
    requested: int
    offered: int
    note: str | None = None

    @property
    def free(self) -> int:
        return max(0, self.allocatable - self.requested)

    def devices(self, gpus: int) -> int:
        return self.fabric.devices(gpus, node_gpus=self.gpus, node_devices=self.allocatable)

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.fabric.resource, "allocatable": self.allocatable,
                "requested": self.requested, "free": self.free, "offered": self.offered, "note": self.note}


def room(fabric: Fabric, *, node_gpus: int, allocatable: int, requested: int, gpus_offered: int) -> Room:
    """How many of the `gpus_offered` GPUs a job pod can take with its devices (the fewest GPUs need the
    fewest devices: the share only grows with the GPUs)."""
    base = Room(fabric, node_gpus, allocatable, requested, 0)
    resource = fabric.resource
    if allocatable <= 0:
        return Room(fabric, node_gpus, allocatable, requested, 0, f"no {resource} allocatable")
    most = next((g for g in range(gpus_offered, 0, -1) if base.devices(g) <= base.free), 0)
    if most == gpus_offered:
        return Room(fabric, node_gpus, allocatable, requested, most)
    step = most + 1
    plural = "s" if step > 1 else ""
    why = f"a pod of {step} GPU{plural} needs {base.devices(step)} {resource}, {base.free} free"
    note = why if most == 0 else f"{most} of {gpus_offered} with {resource}: {why}"
    return Room(fabric, node_gpus, allocatable, requested, most, note)


@dataclass(frozen=True)
class Share:
    """The fabric devices one pod of a plan requests."""

    fabric: Fabric
    devices: int

    @property
    def resource(self) -> str:
        return self.fabric.resource

    @property
    def kind(self) -> str:
        return self.fabric.kind
