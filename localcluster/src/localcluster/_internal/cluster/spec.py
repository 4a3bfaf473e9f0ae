"""What a local cluster is made of: `ClusterSpec` (its nodes, runtime and rules), the Node objects it seeds,
and the runtime it runs pods with. Pure, apart from importing the runtime chosen."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.auth import certs
from localcluster._internal.errors import InvalidInput
from localcluster._internal.podspec.requests import GPU_RESOURCE
from localcluster._internal.runtime.base import PodRuntime
from localcluster._internal.runtime.images import ImageMap
from localcluster._internal.storage.store import now_iso

Obj = dict[str, Any]
RUNTIMES = {"sim": "localcluster._internal.runtime.sim:SimRuntime",
            "process": "localcluster._internal.runtime.process:ProcessRuntime"}


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[int, ...] = (5, 3, 2)    # one node per entry, with that many GPUs
    cpu_nodes: int = 0                     # untainted nodes cpu-1, cpu-2, ... without any GPU resource
    gpu_taint: bool = True                 # GPU nodes carry nvidia.com/gpu=present:NoSchedule
    runtime: str = "sim"                   # "sim" or "process"
    bind_host: str = "127.0.0.1"
    port: int = 0                          # 0: any free port
    sans: tuple[str, ...] = certs.DEFAULT_SANS
    history: int = 100_000                 # watch events kept for resuming watches (older: 410 Gone)
    bookmark_interval: float = 5.0
    node_cpu: str = "64"
    node_memory: str = "512Gi"
    node_pods: str = "110"
    runtime_options: dict[str, Any] = field(default_factory=dict)
    # Pod Security for namespaces without labels (the admission configuration's defaults), e.g.
    # {"enforce": "baseline", "warn": "restricted"}; empty: privileged, as upstream's default
    pod_security_defaults: dict[str, str] = field(default_factory=dict)
    # appended to each node's kubernetes.io/hostname label (".ec2.internal"): a label that differs from the
    # node's name, as on EKS, so pods pinned by that label to a node name stay Pending there too
    hostname_label_suffix: str = ""
    event_ttl: float = 3600.0              # seconds an event lives after its last occurrence (--event-ttl)
    # each node's link to the other nodes, "RATE[,DELAY]" like "1gbit" (process runtime, netns mode only;
    # runtime/nodelink.py); empty: pods of different nodes talk as fast as pods of one node
    node_link: str = ""
    # the images the process runtime can run: each a Dockerfile (its files and defaults) or the host's own
    # files (runtime/images.py); empty: every image fails to pull (ErrImagePull), as on a node without a
    # registry. The simulated runtime runs no image and ignores it.
    images: ImageMap = field(default_factory=ImageMap)
    # fabric devices each GPU node advertises beside its GPUs, as a device plugin does: "efa:4" (4 of
    # vpc.amazonaws.com/efa, the EFA device plugin's resource, on every GPU node), "efa:4,4,2" (one count per
    # --nodes entry) or "RESOURCE:COUNT" (e.g. rdma/hca_shared_devices_a:1000); empty: none
    fabric: str = ""


def pod_cidr(index: int) -> str:
    """Node `index`'s /24 of 10.244.0.0/14 (the runtimes give pods addresses from it)."""
    return f"10.{244 + index // 256}.{index % 256}.0/24"


FABRIC_ALIASES = {"efa": "vpc.amazonaws.com/efa"}  # the EFA device plugin's (aws/eks-charts)


def parse_fabric(text: str, gpu_nodes: int) -> tuple[str, tuple[int, ...]]:
    """`KIND:COUNT[,COUNT...]` as (the extended resource, its count on each of the `gpu_nodes` GPU nodes)."""
    name, colon, counts = text.partition(":")
    resource = FABRIC_ALIASES.get(name.strip(), name.strip())
    try:
        numbers = tuple(int(c) for c in counts.split(","))
    except ValueError:
        numbers = ()
    if not colon or "/" not in resource or not numbers or any(n < 0 for n in numbers):
        raise InvalidInput(f"--fabric {text!r}: expected efa:COUNT or RESOURCE:COUNT (e.g. efa:4, "
                           "rdma/ib:8), or one count per node (efa:4,4,2)")
    if len(numbers) == 1:
        numbers *= gpu_nodes
    if len(numbers) != gpu_nodes:
        raise InvalidInput(f"--fabric {text!r}: {len(numbers)} counts for {gpu_nodes} GPU node(s); give one "
                           "count for all or one per node")
    return resource, numbers


def node_object(index: int, gpus: int | None, spec: ClusterSpec, *, name: str | None = None) -> Obj:
    """Node number `index` (1-based over every node); `gpus` None: a CPU node, with no GPU resource at all,
    as a real cluster's CPU nodes have (no device plugin, so no nvidia.com/gpu in capacity)."""
    name = name or f"node-{index}"
    hostname = name + spec.hostname_label_suffix
    resources = {"cpu": spec.node_cpu, "memory": spec.node_memory, "pods": spec.node_pods,
                 "ephemeral-storage": "1Ti"}
    if gpus is not None:
        resources[GPU_RESOURCE] = str(gpus)
        if spec.fabric and 1 <= index <= len(spec.nodes):
            resource, counts = parse_fabric(spec.fabric, len(spec.nodes))
            resources[resource] = str(counts[index - 1])
    tainted = bool(gpus) and spec.gpu_taint
    taints = [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}] if tainted else []
    now = now_iso()
    pressure = (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    conditions = [{"type": kind, "status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now,
                   "reason": reason, "message": message} for kind, reason, message in pressure]
    conditions.append({"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now,
                       "reason": "KubeletReady", "message": "kubelet is posting ready status"})
    spec_out: Obj = {"podCIDR": pod_cidr(index), "podCIDRs": [pod_cidr(index)]}
    if taints:
        spec_out["taints"] = taints
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": hostname, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}},
        "spec": spec_out,
        "status": {"capacity": dict(resources), "allocatable": dict(resources), "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": f"127.1.{index // 250}.{index % 250 + 1}"},
                                 {"type": "Hostname", "address": hostname}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": f"{index:032x}", "systemUUID": f"{index:032x}",
                                "bootID": f"{index:032x}", "kernelVersion": os.uname().release,
                                "osImage": "localcluster", "containerRuntimeVersion":
                                    f"localcluster-{spec.runtime}://0.1", "kubeletVersion": "v1.37.0",
                                "kubeProxyVersion": "v1.37.0", "operatingSystem": "linux",
                                "architecture": "amd64"}},
    }


def make_runtime(name: str, options: dict[str, Any]) -> PodRuntime:
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime {name!r}: choose one of {', '.join(sorted(RUNTIMES))}")
    module, _, attr = RUNTIMES[name].partition(":")
    runtime: PodRuntime = getattr(importlib.import_module(module), attr)(**options)
    return runtime


def runtime_options(spec: ClusterSpec) -> dict[str, Any]:
    """The runtime's keyword arguments: `spec.runtime_options`, plus the node link and the image map for the
    process runtime."""
    options = dict(spec.runtime_options)
    if spec.runtime == "process":
        options.setdefault("images", spec.images)
    if spec.node_link:
        if spec.runtime != "process":
            raise InvalidInput(f"--node-link {spec.node_link}: node links need the process runtime "
                               "(--runtime process); simulated pods send no traffic")
        options["node_link"] = spec.node_link
    return options
