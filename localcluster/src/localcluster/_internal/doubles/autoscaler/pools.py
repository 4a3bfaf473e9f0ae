"""Node pools (cluster-autoscaler's node groups): identical nodes made from one template, between a minimum
and a maximum size. Pure: what a pool is, how its text form reads, and how one of its nodes looks."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from localcluster._internal.apimachinery.names import label_key_errors, label_value_errors
from localcluster._internal.errors import InvalidInput
from localcluster._internal.podspec.requests import GPU_RESOURCE

Obj = dict[str, Any]
# on every node of a pool, as GKE's cloud.google.com/gke-nodepool or Karpenter's karpenter.sh/nodepool do
POOL_LABEL = "localcluster.io/node-pool"
_TAINT = re.compile(r"^(?P<key>[^=:]+)(=(?P<value>[^:]*))?:"
                    r"(?P<effect>NoSchedule|PreferNoSchedule|NoExecute)$")


@dataclass(frozen=True)
class NodePool:
    """A node group the autoscaler may grow from `min_size` up to `max_size` nodes, each with `gpus` GPUs (0:
    a CPU pool), the pool's label, `labels` and `taints` ("key=value:NoSchedule"); GPU pools are also
    tainted nvidia.com/gpu=present:NoSchedule when the cluster taints its GPU nodes."""

    name: str
    gpus: int
    max_size: int
    min_size: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = [f"name {self.name!r}: {why}" for why in label_value_errors(self.name)]
        if not self.name:
            problems.append("name: empty")
        if self.gpus < 0:
            problems.append(f"gpus {self.gpus}: expected 0 or more")
        if not 0 <= self.min_size <= self.max_size or self.max_size < 1:
            problems.append(f"sizes {self.min_size}..{self.max_size}: expected 0 <= min <= max and max >= 1")
        for key, value in self.labels:
            problems += [f"label {key!r}: {why}" for why in label_key_errors(key)]
            problems += [f"label {key}={value!r}: {why}" for why in label_value_errors(value)]
        problems += [f"taint {taint!r}: expected KEY[=VALUE]:EFFECT" for taint in self.taints
                     if not _TAINT.match(taint)]
        if problems:
            raise InvalidInput(f"node pool {self.name!r}: " + "; ".join(problems))

    def taint_objects(self, *, gpu_taint: bool) -> list[Obj]:
        taints = []
        if self.gpus and gpu_taint:
            taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
        for text in self.taints:
            match = _TAINT.match(text)
            assert match is not None
            taint = {"key": match["key"], "effect": match["effect"]}
            if match["value"]:
                taint["value"] = match["value"]
            taints.append(taint)
        return taints


def parse_node_pool(text: str) -> NodePool:
    """`NAME:GPUS:MAX[:MIN]`, e.g. `gpu-pool:2:3` (up to 3 nodes of 2 GPUs, from none)."""
    parts = text.split(":")
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        numbers = [int(p) for p in parts[1:]]
    except ValueError:
        raise InvalidInput(f"--node-pool {text!r}: expected NAME:GPUS:MAX[:MIN], like gpu-pool:2:3") from None
    return NodePool(parts[0], numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else 0)


def dressed(node: Obj, pool: NodePool, *, gpu_taint: bool, ready: bool) -> Obj:
    """A node of `pool` made from a plain `node` (its resources and addresses): the pool's labels and taints,
    and Ready or not yet (a node registers NotReady until its kubelet and device plugin report in)."""
    out = copy.deepcopy(node)
    out["metadata"]["labels"].update({POOL_LABEL: pool.name, **dict(pool.labels)})
    taints = pool.taint_objects(gpu_taint=gpu_taint)
    out["spec"].pop("taints", None)
    if taints:
        out["spec"]["taints"] = taints
    set_ready(out, ready, now=None)
    return out


def set_ready(node: Obj, ready: bool, *, now: str | None) -> None:
    for condition in node["status"]["conditions"]:
        if condition["type"] != "Ready":
            continue
        condition["status"] = "True" if ready else "False"
        condition["reason"] = "KubeletReady" if ready else "KubeletNotReady"
        condition["message"] = ("kubelet is posting ready status" if ready else
                                "container runtime status check may not have completed yet")
        if now is not None:
            condition["lastTransitionTime"] = condition["lastHeartbeatTime"] = now


def pool_of(node: Obj) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL) or "")
