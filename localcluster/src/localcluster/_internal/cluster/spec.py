"""What a local cluster is made of: `ClusterSpec` (its nodes, runtime and rules), the Node objects it seeds,
and the runtime it runs pods with. Pure, apart from importing the runtime chosen."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.auth import certs
from localcluster._internal.doubles.autoscaler import NodePool
from localcluster._internal.errors import InvalidInput
from localcluster._internal.podspec.requests import GPU_RESOURCE
from localcluster._internal.runtime.base import PodRuntime
from localcluster._internal.runtime.imagepulls import PullSettings, PullTime
from localcluster._internal.runtime.images import ImageMap
from localcluster._internal.storage.registry import KUEUE, PROVISIONING_REQUESTS
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
    # the links of the nodes named, instead of node_link: {"node-2": "84mbit"} (one node's slow NIC)
    node_links: dict[str, str] = field(default_factory=dict)
    # OpenShift's restricted-v2 SCC admission in every namespace annotated openshift.io/sa.scc.uid-range
    # (doubles/openshift.py): UIDs assigned from the range, others refused with the SCC's message
    openshift: bool = False
    # the images the process runtime can run: each a Dockerfile (its files and defaults) or the host's own
    # files (runtime/images.py); empty: every image fails to pull (ErrImagePull), as on a node without a
    # registry. The simulated runtime runs no image and ignores it.
    images: ImageMap = field(default_factory=ImageMap)
    # fabric devices each GPU node advertises beside its GPUs, as a device plugin does: "efa:4" (4 of
    # vpc.amazonaws.com/efa, the EFA device plugin's resource, on every GPU node), "efa:4,4,2" (one count per
    # --nodes entry) or "RESOURCE:COUNT" (e.g. rdma/hca_shared_devices_a:1000); a single count also goes to
    # the nodes node_pools add; empty: none
    fabric: str = ""
    # how long the first pull of an image takes on each node (runtime/imagepulls.py), e.g.
    # (PullTime("distributetrain/base", 180.0),); before these, the image map's own `pull_time` entries.
    # Images without one are on every node from the start.
    pull_times: tuple[PullTime, ...] = ()
    # images no registry has (fnmatch on the repository path): their pulls fail, ErrImagePull then
    # ImagePullBackOff, on both runtimes (the process runtime also fails every image its map does not name)
    missing_images: tuple[str, ...] = ()
    # the Job controller's back-off before it replaces a failed pod (DefaultJobPodFailureBackOff: 10 s,
    # doubling per failure up to 10 min); tests shorten it
    job_backoff: float = 10.0
    # Models of other systems (doubles/), each off unless asked for.
    # A node-pool autoscaler after cluster-autoscaler (doubles/autoscaler): these pools grow from their
    # minimum for pods the scheduler cannot place (a node registers `autoscaler_provision_delay` seconds after
    # the decision, Ready `autoscaler_ready_delay` later) and lose nodes that held no pod for
    # `autoscaler_unneeded_time`; it looks every `autoscaler_scan_interval` seconds. With
    # `provisioning_requests` it also serves and answers autoscaling.x-k8s.io/v1 ProvisioningRequests.
    node_pools: tuple[NodePool, ...] = ()
    autoscaler_scan_interval: float = 10.0
    autoscaler_provision_delay: float = 30.0
    autoscaler_ready_delay: float = 5.0
    autoscaler_unneeded_time: float = 600.0
    provisioning_requests: bool = False
    # Kueue's plain-pod protocol (doubles/kueue): its kinds served, its webhook gating queued pods, admission
    # against ClusterQueue quota; with `kueue_manage_without_queue_name`, every pod outside kube-system is
    # queued (manageJobsWithoutQueueName)
    kueue: bool = False
    kueue_manage_without_queue_name: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_pools", tuple(self.node_pools))
        if self.provisioning_requests and not self.node_pools:
            raise InvalidInput("provisioning_requests: ProvisioningRequests are answered by the node-pool "
                               "autoscaler; give node_pools too")
        names = [p.name for p in self.node_pools]
        if len(set(names)) != len(names):
            raise InvalidInput(f"node_pools: pool names must differ ({', '.join(names)})")

    @property
    def served(self) -> frozenset[str]:
        """The doubles whose kinds the API server serves (storage/registry.py)."""
        out = set()
        if self.kueue:
            out.add(KUEUE)
        if self.provisioning_requests:
            out.add(PROVISIONING_REQUESTS)
        return frozenset(out)


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
        elif spec.fabric and "," not in spec.fabric:
            # a node an autoscaled pool adds: the device plugin's DaemonSet runs there too, with one count
            # for every GPU node
            resource, counts = parse_fabric(spec.fabric, 1)
            resources[resource] = str(counts[0])
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


def pull_settings(spec: ClusterSpec) -> PullSettings:
    """What image pulls take on this cluster: the spec's pull times, then the image map's, and its missing
    images."""
    mapped = tuple(PullTime(pattern, seconds, size) for pattern, seconds, size in spec.images.pull_times())
    return PullSettings(times=(*spec.pull_times, *mapped), missing=spec.missing_images)


def runtime_options(spec: ClusterSpec) -> dict[str, Any]:
    """The runtime's keyword arguments: `spec.runtime_options`, the pull settings, plus the node link and the
    image map for the process runtime."""
    options = dict(spec.runtime_options)
    options.setdefault("pulls", pull_settings(spec))
    if spec.runtime == "process":
        options.setdefault("images", spec.images)
    if spec.node_link:
        if spec.runtime != "process":
            raise InvalidInput(f"--node-link {spec.node_link}: node links need the process runtime "
                               "(--runtime process); simulated pods send no traffic")
        options["node_link"] = spec.node_link
    if spec.node_links:
        if spec.runtime != "process":
            raise InvalidInput(f"node links {spec.node_links}: node links need the process runtime "
                               "(--runtime process); simulated pods send no traffic")
        options["node_links"] = dict(spec.node_links)
    return options
