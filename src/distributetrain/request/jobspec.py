"""A job's request, `JobSpec`: every field typed, documented and validated before anything is created.

Each field is declared once, on JobSpec: its default, its parser, its option and help (fields.py); the CLI's
options are made from it. Sources, highest precedence first: command-line arguments, environment variables
(DT_ + the field's name in capitals, which `manifests/DistributeTrain_Manager.yaml` sets), defaults. Every
problem is collected and reported at once, each naming its field and the option or variable that set it.
`JobRef` is a job by name and namespace, read the way the request reads those two fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from fractions import Fraction
from typing import Any

from distributetrain import naming
from distributetrain.placement import fabric
from distributetrain.placement.planner import POLICIES
from distributetrain.placement.tolerations import Toleration, job_tolerations, parse_tolerations
from distributetrain.request import podtemplate
from distributetrain.request.fieldparsers import (
    PULL_POLICIES,
    parse_amount,
    parse_bool,
    parse_cidrs,
    parse_command,
    parse_duration,
    parse_factor,
    parse_gbps,
    parse_gpus,
    parse_image,
    parse_int_range,
    parse_interface,
    parse_job_name,
    parse_label_key,
    parse_mount_path,
    parse_names,
    parse_namespace,
    parse_node_selector,
    parse_positive_duration,
    parse_resource,
    parse_subdomain_name,
)
from distributetrain.request.fields import describe, invalid, read, request_fields
from distributetrain.request.podtemplate import PodTemplate

PLACEMENT_POLICIES = tuple(POLICIES)
ON_HANG = ("fail", "restart", "replace")  # what the manager does with a hung training (manager/watchdog.py)
DEFAULT_MOUNT_PATH = "/workspace"
GIB = 2**30
# Requests per GPU when neither the flags nor the template say: small enough for the smallest GPU nodes
# (4 vCPU and 16 GiB per GPU, e.g. g4dn.xlarge), never BestEffort. Most GPU nodes offer 8-12 cores and 60+ GiB
# per GPU: raise them for real input pipelines.
DEFAULT_CPU_PER_GPU = Fraction(2)
DEFAULT_MEMORY_PER_GPU = Fraction(8 * GIB)
# NCCL puts about 10 MB per peer of each rank in /dev/shm on PCIe nodes (NVIDIA/nccl#290): 8 ranks in a pod
# use about 8 x 7 x 10 MB = 560 MB. 1 GiB covers a pod of 8 GPUs with room to spare.
DEFAULT_SHM_SIZE = Fraction(GIB)
MIG_PREFIX = "nvidia.com/mig-"

# The manager pod learns its own identity from the downward API (manifests/DistributeTrain_Manager.yaml).
ENV_MANAGER_POD_NAME = "DT_MANAGER_POD_NAME"
ENV_MANAGER_POD_UID = "DT_MANAGER_POD_UID"
ENV_MANAGER_NAMESPACE = "DT_MANAGER_NAMESPACE"
ENV_MANAGER_POD_IPS = "DT_MANAGER_POD_IPS"  # status.podIPs: tells an IPv6-only pod network before any pod
# The manager's Job, when it runs as one (manifests/DistributeTrain_Manager.yaml): the downward API gives the
# labels the Job controller puts on its pods: batch.kubernetes.io/job-name and .../controller-uid
ENV_MANAGER_JOB_NAME = "DT_MANAGER_JOB_NAME"
ENV_MANAGER_JOB_UID = "DT_MANAGER_JOB_UID"


@dataclass(frozen=True)
class ManagerIdentity:
    """The manager pod, when running in a cluster, and the Job it runs under, if any. Every object the job
    creates is owned by the Job when there is one - it outlives any one manager pod, whose successor adopts
    the running job - else by the manager pod itself."""

    name: str
    uid: str
    namespace: str | None = None
    pod_ips: tuple[str, ...] = ()
    job_name: str | None = None
    job_uid: str | None = None

    @staticmethod
    def from_env(env: Mapping[str, str]) -> ManagerIdentity | None:
        name, uid = env.get(ENV_MANAGER_POD_NAME, ""), env.get(ENV_MANAGER_POD_UID, "")
        if not name or not uid:
            return None
        ips = tuple(ip.strip() for ip in env.get(ENV_MANAGER_POD_IPS, "").split(",") if ip.strip())
        job_name, job_uid = env.get(ENV_MANAGER_JOB_NAME, ""), env.get(ENV_MANAGER_JOB_UID, "")
        return ManagerIdentity(name=name, uid=uid, namespace=env.get(ENV_MANAGER_NAMESPACE) or None,
                               pod_ips=ips, job_name=job_name or None,
                               job_uid=job_uid if job_name and job_uid else None)

    def ref(self, fallback_namespace: str) -> tuple[str, str, str, str]:
        """(kind, namespace, name, uid) of what stands for the manager - its Job when it runs under one (it
        outlives any one pod), else its pod: its Events, phase label and progress annotations go there."""
        namespace = self.namespace or fallback_namespace
        if self.durable:
            return "Job", namespace, str(self.job_name), str(self.job_uid)
        return "Pod", namespace, self.name, self.uid

    @property
    def durable(self) -> bool:
        """The job's objects outlive this manager pod: a Job owns them, and its next pod adopts them."""
        return self.job_uid is not None


def _selector_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """node_selector's value: sorted (key, value) pairs, so equal selectors compare equal."""
    return tuple(sorted(parse_node_selector(value).items()))


@dataclass(frozen=True)
class JobSpec:
    """One training job's request. Durations are in seconds.

    Each field is declared once, here: its default, its parser, its option and help line (`describe`,
    fields.py); its variable is DT_ + its name in capitals."""

    gpus: int = field(metadata=describe(
        parse_gpus, "N", help="GPUs (= Horovod processes) in total, at least 1.",
        doc="How many GPUs (= Horovod processes) in total, over every pod."))
    image: str = field(metadata=describe(
        parse_image, "IMAGE", help="The training image of every job pod (the base image with your Train.py).",
        doc="The base training image of every job pod (sshd in workers, the launcher in the chief)."))
    job_name: str = field(default=naming.DEFAULT_JOB_NAME, metadata=describe(
        parse_job_name, "NAME",
        help="Names and labels the job's objects; a manager restarted with the same name adopts them.",
        doc="Names and labels every object of the job; a manager restarted with the same name adopts or "
            "cleans up the old objects. Lower-case DNS label of at most naming.JOB_NAME_MAX characters."))
    namespace: str = field(default=naming.DEFAULT_NAMESPACE, metadata=describe(
        parse_namespace, "NS", short="-n", help="The job's namespace: where its objects go.",
        doc="Where the job's pods, Secret, ConfigMap and NetworkPolicy live."))
    command: tuple[str, ...] = field(default=naming.DEFAULT_COMMAND, metadata=describe(
        parse_command, "'CMD ARGS'", help="What every rank runs; or give it after --.",
        doc="What horovodrun starts on every rank: words, a shell-quoted string or a JSON list."))
    resource: str = field(default=naming.DEFAULT_RESOURCE, metadata=describe(
        parse_resource, "R",
        help="The extended resource counted as GPUs (e.g. amd.com/gpu, nvidia.com/mig-1g.10gb).",
        doc="The extended resource counted as GPUs (nvidia.com/gpu, amd.com/gpu, nvidia.com/mig-1g.10gb, "
            "...)."))
    fabric_resource: fabric.Request = field(default=fabric.AUTO_REQUEST, metadata=describe(
        fabric.parse_request, "auto|none|R[=N]",
        help="The fabric devices pods request with their GPUs (EFA: vpc.amazonaws.com/efa; InfiniBand/RoCE: "
             "rdma/...), in proportion to them, or N per pod; auto: the one the GPU nodes advertise; none: "
             "TCP.",
        doc="The extended resource of the nodes' fabric devices (EFA: vpc.amazonaws.com/efa; InfiniBand or "
            "RoCE: an RDMA device plugin's rdma/... or SR-IOV functions), which every pod that talks across "
            "nodes requests with its GPUs: in proportion to them (6 of a node's 8 GPUs get 3 of its 4 EFA), "
            "or N per pod with R=N (a shared device plugin). The pods get the fabric's NCCL and libfabric "
            "settings, and the pre-flight check (when on) fails a pod whose NCCL does not use it. auto: the "
            "one fabric resource the GPU nodes advertise, if any (vpc.amazonaws.com/efa, or a single rdma/ "
            "resource, 1 per pod); none: TCP whatever the nodes have (docs/real-cluster.md)."))
    tolerations: tuple[Toleration, ...] = field(default=(), metadata=describe(
        parse_tolerations, "KEY[=VALUE][:EFFECT]", option="--toleration", multiple=True,
        help="A taint job pods tolerate, besides `nvidia.com/gpu` and R (any value, any effect). Without "
             "=VALUE any value matches; `*` tolerates every taint. Repeatable.",
        doc="Extra tolerations for job pods, besides those of the resource's own taint (the ones the "
            "ExtendedResourceToleration admission plugin would add): KEY[=VALUE][:EFFECT] each, `*` for "
            "every taint, or a JSON list of tolerations."))
    node_selector: tuple[tuple[str, str], ...] = field(default=(), metadata=describe(
        _selector_pairs, "KEY=VALUE", multiple=True,
        help="Only nodes with this label value are used. Repeatable (all must match).",
        doc="Only nodes with all these labels are used: KEY=VALUE each."))
    topology_key: str | None = field(default=None, metadata=describe(
        parse_label_key, "LABEL",
        help="Keep the job in the fewest domains of this node label first (e.g. a rack label).",
        doc="A node label (e.g. topology.kubernetes.io/zone): the planner spans the fewest of its domains "
            "first, then the fewest nodes (docs/planner.md)."))
    placement_policy: str = field(default="optimal", metadata=describe(
        option="--policy", choices=PLACEMENT_POLICIES, help="How to split the request (docs/planner.md).",
        doc="The planner's policy (see docs/planner.md)."))
    ssh_port: int = field(default=naming.DEFAULT_SSH_PORT, metadata=describe(
        parse_int_range(1, 65535), "PORT", help="Workers' sshd port.",
        doc="The port the workers' sshd listens on and the chief connects to."))
    schedule_timeout: float = field(default=300.0, metadata=describe(
        parse_positive_duration, "DURATION",
        help="How long the job's pods may take to be bound to their nodes before a re-plan (300, 90s, 5m).",
        doc="How long the gang's pods may take to be bound to their nodes by the scheduler before the gang "
            "is deleted and re-planned (their GPUs were taken since the plan, say). Pulling the image and "
            "starting the containers is start_timeout's."))
    start_timeout: float = field(default=1200.0, metadata=describe(
        parse_positive_duration, "DURATION",
        help="How long a bound pod may take to pull its image and start (workers: Ready), then a re-plan.",
        doc="How long each pod may take, once bound to its node, to pull its image and start (a worker: "
            "Running and Ready; the chief: running), before the gang is deleted and re-planned. The first "
            "pull of a 6-8 GB training image onto a fresh node takes minutes. An image that cannot be "
            "pulled at all (ErrImagePull for 30s, InvalidImageName) or a container that cannot be "
            "configured (CreateContainerConfigError) ends the job at once (exit 78): no re-plan would help."))
    retries: int = field(default=3, metadata=describe(
        parse_int_range(0, 100), "N", help="Re-plans after a schedule timeout.",
        doc="How many times a gang that missed the schedule timeout is re-planned and re-created."))
    backoff: float = field(default=10.0, metadata=describe(
        parse_duration, "DURATION", help="Pause before the first re-plan; it doubles.",
        doc="Wait before the first retry; doubles on each further retry."))
    ssh_timeout: float = field(default=120.0, metadata=describe(
        parse_duration, "DURATION", help="How long the chief waits for every worker's sshd.",
        doc="How long the launcher in the chief waits for every worker's sshd to accept the job key."))
    active_deadline: float | None = field(default=None, metadata=describe(
        parse_positive_duration, "DURATION", help="Stop the whole job after this long (exit 74).",
        doc="Wall-clock limit of the whole job, from the manager's start; None: no limit."))
    api_outage_tolerance: float = field(default=1800.0, metadata=describe(
        parse_positive_duration, "DURATION",
        help="How long the API server may not answer while the job runs before the manager gives up "
             "(exit 77, the pods left to their owner).",
        doc="While the job runs, failed API calls (refused or cut connections, timeouts, 429 and 5xx) are "
            "retried for this long, honouring Retry-After: a control-plane upgrade or outage does not end "
            "the training. Past it the manager exits 77 and leaves the job's pods to their owner, the "
            "manager's Job, whose next manager pod adopts them. Creating the job keeps its short, bounded "
            "retries."))
    wait_for_gpus: float = field(default=0.0, metadata=describe(
        parse_duration, "DURATION",
        help="When the GPUs are not free, wait this long for room (creating nothing).",
        doc="When the request does not fit the free GPUs, wait up to this long for room (creating nothing "
            "while waiting) instead of failing at once."))
    scale_up: str = field(default=naming.SCALE_UP_AUTO, metadata=describe(
        choices=naming.SCALE_UP_MODES,
        help="When the free GPUs do not cover the request: create the gang as pending pods for the node-pool "
             "autoscaler (on), only where the cluster says it autoscales (auto), or fail (off, exit 3).",
        doc="What happens when the request does not fit the free GPUs (after --wait-for-gpus): `on` creates "
            "the whole gang as pending pods shaped for the GPU pool (gpus_per_node each, not pinned to any "
            "node) for cluster-autoscaler or Karpenter to add nodes for, within schedule_timeout; `auto` "
            "does so where the cluster says it autoscales (its kube-system/cluster-autoscaler-status "
            "ConfigMap or Karpenter NodePools); `off` fails at once (exit 3). Where a ProvisioningRequest "
            "API is served, the scale-up is all-or-nothing (provisioning_class). docs/real-cluster.md, "
            "autoscaled pools."))
    gpus_per_node: int | None = field(default=None, metadata=describe(
        parse_gpus, "N",
        help="GPUs of one node of the pool: each pod's share when the gang is created for a scale-up or a "
             "Kueue queue (default: the most any eligible node has).",
        doc="The GPUs of one node of the pool the gang goes to when it is not placed on free GPUs by the "
            "manager (scale-up and Kueue): every pod asks for this many, the last one for the rest. None: "
            "the most GPUs any eligible node has (busy or not), else what a Karpenter NodePool's "
            "instance-gpu-count requirement says; with neither, it must be given."))
    provisioning_class: str = field(default=naming.PROVISIONING_AUTO, metadata=describe(
        parse_subdomain_name, "CLASS",
        help="Scale-up through a ProvisioningRequest of this class (auto: best-effort-atomic-scale-up when "
             "the API is served; none: pending pods only).",
        doc="How a scale-up asks for nodes: `auto` creates a ProvisioningRequest "
            "(autoscaling.x-k8s.io/v1) of class best-effort-atomic-scale-up.autoscaling.x-k8s.io when the "
            "cluster serves that API - all the gang's nodes or none - and plain pending pods otherwise; "
            "`none` always pending pods; any other value is the class to ask for (check-capacity."
            "autoscaling.x-k8s.io, or a cloud's own such as queued-provisioning.gke.io)."))
    queue: str | None = field(default=None, metadata=describe(
        parse_subdomain_name, "NAME",
        help="The Kueue LocalQueue the whole gang waits in and is admitted from as one pod group (default: "
             "the namespace's LocalQueue `default` if there is one; none: never queued).",
        doc="Kueue: the LocalQueue of the job's namespace the gang is queued in. Workers and chief are "
            "created at once as one pod group, not placed by the manager; Kueue admits them together against "
            "its ClusterQueue's quota and the scheduler places them; the chief gets the hostfile once they "
            "run. None: the namespace's LocalQueue named `default` when Kueue serves one, else no queue; "
            "`none`: no queue even then. docs/real-cluster.md, Kueue."))
    keep_chief: bool = field(default=True, metadata=describe(
        parse_bool, help="Keep the ended chief pod for its log.",
        doc="Keep the ended chief pod so its log survives."))
    volume_claim: str | None = field(default=None, metadata=describe(
        parse_subdomain_name, "PVC", help="A PersistentVolumeClaim mounted in every job pod.",
        doc="A PersistentVolumeClaim mounted in every job pod (Train.py and data)."))
    mount_path: str = field(default=DEFAULT_MOUNT_PATH, metadata=describe(
        parse_mount_path, "PATH", help="Where the claim is mounted.", doc="Where the claim is mounted."))
    network_interface: str | None = field(default=None, metadata=describe(
        parse_interface, "IF", help="Horovod's interface between pods, e.g. eth0.",
        doc="The interface Horovod uses between pods (e.g. eth0); None: Horovod picks."))
    transport: str = field(default=naming.TRANSPORTS[0], metadata=describe(
        choices=naming.TRANSPORTS, help="Horovod controller.", doc="Horovod's controller: gloo or mpi."))
    disruption_budget: bool = field(default=True, metadata=describe(
        parse_bool, help="Keep drains and autoscalers from evicting the running job's pods.",
        doc="A PodDisruptionBudget that allows no voluntary eviction of the job's pods (a `kubectl drain` "
            "waits, an eviction is refused with 429) and the annotations that keep cluster-autoscaler "
            "(safe-to-evict: false) and Karpenter (do-not-disrupt) from removing their nodes. Involuntary "
            "losses - a node that dies, a spot reclaim, a preemption - are what --min-gpus and --restarts "
            "survive."))
    priority_class: str | None = field(default=None, metadata=describe(
        parse_subdomain_name, "NAME",
        help="The PriorityClass of the job's pods (a template's priorityClassName wins).",
        doc="The PriorityClass of the job's pods: a class above the cluster's default keeps them from being "
            "preempted by ordinary pods. The class must exist (kubectl get priorityclasses); the pod "
            "template's priorityClassName, if it sets one, wins."))
    network_policy: bool = field(default=True, metadata=describe(
        parse_bool, help="Admit traffic to job pods only from job pods.",
        doc="Create a NetworkPolicy that admits traffic to job pods only from job pods."))
    service_account: str | None = field(default=None, metadata=describe(
        parse_subdomain_name, "SA", help="ServiceAccount of job pods (default: no API token mounted).",
        doc="The ServiceAccount of job pods; None: the namespace default, with no API token mounted."))
    image_pull_policy: str | None = field(default=None, metadata=describe(
        choices=PULL_POLICIES, help="Image pull policy of job pods.",
        doc="Always, IfNotPresent or Never; None: Kubernetes' default for the tag."))
    image_pull_secrets: tuple[str, ...] = field(default=(), metadata=describe(
        parse_names, "SECRET", option="--image-pull-secret", multiple=True,
        help="A docker-registry Secret job pods pull their image with. Repeatable.",
        doc="Secrets (type kubernetes.io/dockerconfigjson) job pods pull their image with, besides the "
            "template's."))
    pod_template: PodTemplate | None = field(default=None, metadata=describe(
        podtemplate.load, "FILE",
        help="A PodTemplateSpec YAML every job pod starts from (annotations, env, resources, volumes, "
             "imagePullSecrets, priorityClassName, affinity...; docs/real-cluster.md).",
        doc="A PodTemplateSpec YAML file every job pod starts from (podtemplate.py says what it may set); "
            "the shipped manifest points DT_POD_TEMPLATE at the distributetrain-pod-template ConfigMap."))
    worker_template: PodTemplate | None = field(default=None, metadata=describe(
        podtemplate.load, "FILE", help="The template of the workers, instead of --pod-template.",
        doc="The template of worker pods, instead of pod_template."))
    chief_template: PodTemplate | None = field(default=None, metadata=describe(
        podtemplate.load, "FILE", help="The template of the chief, instead of --pod-template.",
        doc="The template of the chief, instead of pod_template."))
    cpu_per_gpu: Fraction = field(default=DEFAULT_CPU_PER_GPU, metadata=describe(
        parse_amount, "CPU", help="CPU requested per GPU of a job pod (no CPU limit); 0: none.",
        doc="CPU requested per GPU of a job pod (no CPU limit: throttling slows the input pipeline); 0: "
            "none. The template's own cpu, if it names one, wins."))
    memory_per_gpu: Fraction = field(default=DEFAULT_MEMORY_PER_GPU, metadata=describe(
        parse_amount, "MEM",
        help="Memory requested and limited per GPU of a job pod, /dev/shm added; 0: none.",
        doc="Memory per GPU of a job pod, requested and limited alike (plus shm_size); 0: none. The "
            "template's own memory, if it names one, wins."))
    shm_size: Fraction = field(default=DEFAULT_SHM_SIZE, metadata=describe(
        parse_amount, "MEM",
        help="The memory-backed /dev/shm of job containers (NCCL); 0: the runtime's 64 MiB.",
        doc="Size of the memory-backed /dev/shm of job containers (NCCL's shared-memory transport needs more "
            "than a container's 64 MiB); counted in the pod's memory; 0: no such volume."))
    preflight: bool = field(default=False, metadata=describe(
        parse_bool,
        help="Before training, a short all-reduce over every rank: a node it blames (unreachable, hung, "
             "below --min-busbw) is excluded and the job re-planned, else exit 76. Off by default: a few "
             "seconds per start (docs/manager.md, \"The pre-flight\").",
        doc="Before the training, the chief runs a short all-reduce check over every rank (TCP ring "
            "all-reduces without TensorFlow; Horovod's own, NCCL's, with a fabric: docs/images.md). A node "
            "it blames (a pod unreachable, hung, off the fabric, below min_busbw) is excluded and the job "
            "re-planned (preflight_attempts), else exit 76. Off by default: it adds a few seconds to every "
            "start (docs/manager.md, \"The pre-flight\", has the measurements and the decision)."))
    min_busbw: float | None = field(default=None, metadata=describe(
        parse_gbps, "GBPS",
        help="The pre-flight's bus bandwidth must reach this (GB/s), else exit 76 naming the slowest pod; "
             "turns the pre-flight on.",
        doc="With the pre-flight check (which this turns on): the bus bandwidth, in GB/s, its all-reduce "
            "must reach at its largest size, else the job fails naming the slowest pod."))
    preflight_attempts: int = field(default=2, metadata=describe(
        parse_int_range(1, 10), "N",
        help="How many times the pre-flight may run: a node it blames is excluded and the job re-planned "
             "without it, until N checks ran (1: no re-plan, exit 76 at once).",
        doc="With the pre-flight check: how many times it may run. When it blames nodes (a link below "
            "min_busbw, a pod that never started its ranks or hung), the manager deletes the placed pods, "
            "excludes those nodes and places the job again, until N checks ran; then, or when no plan is "
            "left without the excluded nodes, exit 76 naming them."))
    allow_egress: tuple[str, ...] = field(default=(), metadata=describe(
        parse_cidrs, "CIDR[:PORT[/PROTO]]", multiple=True,
        help="With restricted egress: where job pods may connect besides each other and DNS (a CIDR, "
             "optionally one port). Implies --restrict-egress. Repeatable.",
        doc="Where job pods may connect besides each other and DNS when egress is restricted: CIDRs, each "
            "optionally with one port (10.0.0.0/8:443, 10.0.0.53/32:53/UDP). Giving any implies "
            "restrict_egress, as before egress was open by default."))
    restrict_egress: bool = field(default=False, metadata=describe(
        parse_bool,
        help="Job pods reach only each other, DNS and --allow-egress (default: anywhere; ingress is "
             "isolated either way).",
        doc="Restrict the job pods' egress in the job's NetworkPolicy to the job's own pods, the cluster DNS "
            "(kube-dns, NodeLocal DNSCache, OpenShift DNS) and allow_egress. Off: egress is open (data "
            "from S3/GCS, a package index, a metrics gateway work on a first run); ingress is isolated to "
            "the job's pods either way."))
    min_gpus: int | None = field(default=None, metadata=describe(
        parse_gpus, "M", help="Elastic Horovod: train on as few as M GPUs while a lost worker is replaced.",
        doc="Elastic Horovod: the fewest GPUs the job may train on, `gpus` being its target. A lost worker "
            "(its pod or its node) then does not end the job: the other ranks go on from the last committed "
            "state while at least this many remain, and the manager replaces the worker on the best free "
            "GPUs. None: not elastic."))
    max_gpus: int | None = field(default=None, metadata=describe(
        parse_gpus, "X", help="Elastic: grow up to X GPUs when more free up (default: --gpus).",
        doc="Elastic: the most GPUs the job may grow to when more free up (default: gpus)."))
    restarts: int = field(default=0, metadata=describe(
        parse_int_range(0, 100), "K",
        help="Relaunch a training whose worker or node was lost up to K times, from its checkpoint.",
        doc="Not elastic: how many times a training that failed because a worker or its node was lost is "
            "relaunched on replaced workers, resuming from rank 0's latest checkpoint. 0: a lost worker ends "
            "the job (exit 70)."))
    replace_timeout: float = field(default=600.0, metadata=describe(
        parse_positive_duration, "DURATION",
        help="How long lost workers may wait for free GPUs before the job fails (exit 70).",
        doc="How long lost workers may wait for free GPUs to be replaced before the job fails (exit 70): an "
            "elastic job while fewer than min_gpus run, a restart job before each relaunch."))
    hang_timeout: float | None = field(default=None, metadata=describe(
        parse_positive_duration, "DURATION",
        help="A training rank that makes no step for this long is hung (default: max(10 x the median step "
             "time, 5m)); --on-hang says what then.",
        doc="The watchdog (docs/manager.md, \"Hangs\"): every rank's heartbeat (Train.py, or "
            "distributetrain.observe.heartbeat in your script) says its step count; a rank whose count does "
            "not grow for this long is hung, and the manager names the rank that stopped first, its pod and "
            "node. None: max(10 x the median step time seen, 300 s)."))
    on_hang: str | None = field(default=None, metadata=describe(
        choices=ON_HANG,
        help="On a hang: fail (exit 79, the default), restart (from the checkpoint without the stuck "
             "node; needs --restarts), replace (elastic: the stuck worker re-placed; the default with "
             "--min-gpus).",
        doc="What the manager does with a hung training: fail (an Event, a line naming the stuck pod, node "
            "and step, exit 79, everything deleted but the kept chief), restart (the stuck worker deleted "
            "and replaced on another node, the training relaunched from its checkpoint; --restarts), replace "
            "(elastic: the stuck worker deleted and re-placed elsewhere while the others go on). None: "
            "replace for an elastic job, restart with --restarts, else fail."))
    straggler_factor: float = field(default=1.5, metadata=describe(
        parse_factor, "X",
        help="A rank slower than X times the other ranks' median (compute time per step) is a straggler.",
        doc="The watchdog (docs/manager.md, \"Stragglers\"): a rank whose pace - its compute time per step "
            "(forward and backward, before the all-reduce) when every rank reports one, else its step time "
            "- is above this many times the other ranks' median for straggler_reports heartbeats in a row "
            "is reported: an Event on its pod and the job, a log line naming rank, pod and node."))
    straggler_reports: int = field(default=3, metadata=describe(
        parse_int_range(1, 1000), "Y",
        help="How many heartbeats in a row a rank must be slow to be a straggler (10 s each by default).",
        doc="How many of a rank's heartbeats in a row (DT_HEARTBEAT_SECONDS apart, 10 s by default) its pace "
            "must be above straggler_factor times the others' median before it is reported: one slow period "
            "(a checkpoint, a noisy neighbour's burst) is no straggler."))
    replace_stragglers: bool = field(default=False, metadata=describe(
        parse_bool,
        help="Elastic: delete a straggler's worker and re-place it on another node (needs --min-gpus).",
        doc="Elastic (min_gpus): once a straggler is reported, delete its worker and re-place it on another "
            "node while the others train on - the same path as --on-hang replace. A straggler in the "
            "chief (rank 0) is only reported."))
    grow_interval: float = field(default=30.0, metadata=describe(
        parse_positive_duration, "DURATION",
        help="How often free GPUs are looked for while the job runs short of its size.",
        doc="How often the manager looks for free GPUs while the job runs short of its target (lost workers "
            "not yet replaced), or, elastic, below max_gpus."))

    @property
    def recovery(self) -> str | None:
        """How the job survives a lost worker: naming.RECOVERY_ELASTIC, RECOVERY_RESTART, or None: it
        ends."""
        if self.min_gpus is not None:
            return naming.RECOVERY_ELASTIC
        return naming.RECOVERY_RESTART if self.restarts else None

    @property
    def hang_action(self) -> str:
        """What a hang leads to: on_hang, else by the job's mode (replace elastic, restart with restarts)."""
        if self.on_hang is not None:
            return self.on_hang
        if self.min_gpus is not None:
            return ON_HANG[2]
        return ON_HANG[1] if self.restarts else ON_HANG[0]

    @property
    def node_selector_dict(self) -> dict[str, str]:
        return dict(self.node_selector)

    def all_tolerations(self) -> tuple[Toleration, ...]:
        """What job pods tolerate: the GPU resource's own taints, then the user's (tolerations.py)."""
        return job_tolerations(self.resource, self.tolerations)

    def template_resources(self) -> frozenset[str]:
        """Every resource a container of any of the job's templates requests or limits."""
        templates = (self.pod_template, self.worker_template, self.chief_template)
        return frozenset(name for t in templates if t is not None for name in podtemplate.named_resources(t))

    def template_for(self, role: str) -> PodTemplate | None:
        """The pod template of a role (worker or chief): its own, else the shared one, else none."""
        own = self.worker_template if role == naming.ROLE_WORKER else self.chief_template
        return own or self.pod_template

    @staticmethod
    def from_sources(args: Mapping[str, Any], env: Mapping[str, str]) -> JobSpec:
        """Build and validate a JobSpec from arguments (by field name; None: not given), else the DT_*
        variables, else the defaults; raise InvalidInput listing every bad field."""
        reading = read(FIELDS, args, env)
        problems = list(reading.problems)
        if (reading.values.get("volume_claim") is None and "mount_path" in reading.sources
                and "mount_path" in reading.values):
            problems.append("mount_path: given without volume_claim; set --volume-claim to the claim to "
                            "mount")
        if not problems:
            problems += _cross_checks(JobSpec(**reading.values), sources=reading.sources)
        if problems:
            raise invalid(INVALID_REQUEST, problems)
        return JobSpec(**reading.values)

    @property
    def ref(self) -> JobRef:
        return JobRef(name=self.job_name, namespace=self.namespace)


FIELDS = request_fields(JobSpec)
FIELD = {spec_field.name: spec_field for spec_field in FIELDS}
INVALID_REQUEST = "invalid request, nothing was created"


@dataclass(frozen=True)
class JobRef:
    """A job on the cluster by its name and namespace: what `wait`, `status`, `logs`, `delete` and
    PostTraining act on. Read as the request reads its job_name and namespace fields (the same parsers and
    variables)."""

    name: str
    namespace: str

    @staticmethod
    def from_sources(args: Mapping[str, Any], env: Mapping[str, str], *, name_required: bool = False,
                     name_given_as: str | None = None) -> JobRef:
        """The job from args["job_name"] and args["namespace"] (None: not given), else DT_JOB_NAME and
        DT_NAMESPACE, else the defaults; with `name_required`, a name must be given (no default job).
        `name_given_as`: how problems call the argument holding the name (e.g. JOB, a positional one)."""
        name_field = FIELD["job_name"]
        if name_required:
            name_field = dataclasses.replace(name_field, default=MISSING)
        reading = read((name_field, FIELD["namespace"]), args, env,
                       given_as={"job_name": name_given_as} if name_given_as else None,
                       hint={"job_name": "list jobs with kubectl get pods -l "
                                         f"{naming.MANAGED_BY_KEY}={naming.MANAGED_BY}"})
        reading.check("invalid job, nothing was changed")
        return JobRef(name=reading.values["job_name"], namespace=reading.values["namespace"])


def read_field(name: str, given: Any, env: Mapping[str, str]) -> Any:
    """One field of the request, from its argument (None: not given), else its variable, else its default;
    for a process that needs only that field of a request given in full (PostTraining's keep_chief)."""
    reading = read((FIELD[name],), {name: given}, env)
    reading.check(INVALID_REQUEST)
    return reading.values[name]


def _cross_checks(spec: JobSpec, *, sources: Mapping[str, str]) -> list[str]:
    """Problems of fields together: templates against the request, MIG, a job whose pods would be
    BestEffort."""
    problems = []
    for name in ("pod_template", "worker_template", "chief_template"):
        template = getattr(spec, name)
        if template is None:
            continue
        for problem in podtemplate.conflicts(
                template, resource=spec.resource, node_selector=spec.node_selector_dict,
                mount_path=spec.mount_path if spec.volume_claim else None,
                shm_bytes=int(spec.shm_size) if spec.memory_per_gpu else 0):
            problems.append(f"{name} ({sources[name]} {template.source}): {problem}")
    if spec.resource.startswith(MIG_PREFIX) and spec.gpus > 1:
        problems.append(f"resource ({spec.resource}): MIG devices suit 1-GPU jobs only: a process sees one "
                        "MIG device, and NCCL, which the base image's Horovod reduces GPU tensors with, "
                        "cannot use MIG (NVIDIA/nccl#1716); ask for whole GPUs (nvidia.com/gpu), or --gpus 1")
    problems += _recovery_checks(spec)
    if spec.queue not in (None, naming.QUEUE_NONE) and spec.recovery:
        problems.append(f"queue ({spec.queue}): a Kueue pod group is admitted whole and Kueue does not "
                        "replace its pods; --min-gpus and --restarts are for jobs outside a queue (--queue "
                        "none)")
    for role in (naming.ROLE_WORKER, naming.ROLE_CHIEF):
        if not spec.cpu_per_gpu and not spec.memory_per_gpu and not podtemplate.names_resources(
                spec.template_for(role), "cpu", "memory"):
            problems.append(f"cpu_per_gpu, memory_per_gpu: both 0 and the {role} template names no cpu or "
                            "memory: the pods would be BestEffort, the first evicted under pressure; give "
                            "--cpu-per-gpu or --memory-per-gpu, or resources in the template")
            break
    return problems


def _recovery_checks(spec: JobSpec) -> list[str]:
    """Elastic and restart settings together: min <= gpus <= max, one mode at a time, Gloo for elastic."""
    problems = []
    if spec.max_gpus is not None and spec.min_gpus is None:
        problems.append("max_gpus: only elastic jobs grow; give --min-gpus too (the fewest GPUs to train on)")
    if spec.min_gpus is not None and spec.min_gpus > spec.gpus:
        problems.append(f"min_gpus: {spec.min_gpus} is more than the job's {spec.gpus} GPU(s); the minimum "
                        "must be at most --gpus")
    if spec.max_gpus is not None and spec.max_gpus < spec.gpus:
        problems.append(f"max_gpus: {spec.max_gpus} is less than the job's {spec.gpus} GPU(s); the maximum "
                        "must be at least --gpus")
    if spec.min_gpus is not None and spec.restarts:
        problems.append("restarts: an elastic job (--min-gpus) goes on without its lost workers and never "
                        "relaunches; give either --min-gpus or --restarts")
    if spec.on_hang == ON_HANG[1] and not spec.restarts:
        problems.append("on_hang (restart): relaunching needs --restarts K (how many times at most); give "
                        "it, or --on-hang fail")
    if spec.on_hang == ON_HANG[2] and spec.min_gpus is None:
        problems.append("on_hang (replace): only an elastic job (--min-gpus) trains on while a worker is "
                        "re-placed; give --min-gpus, or --on-hang fail or restart")
    if spec.on_hang == ON_HANG[1] and spec.min_gpus is not None:
        problems.append("on_hang (restart): an elastic job never relaunches; use --on-hang replace")
    if spec.replace_stragglers and spec.min_gpus is None:
        problems.append("replace_stragglers: only an elastic job (--min-gpus) trains on while a worker is "
                        "re-placed; give --min-gpus, or drop --replace-stragglers (stragglers are reported "
                        "either way)")
    if spec.min_gpus is not None and spec.transport != naming.TRANSPORTS[0]:
        problems.append(f"transport ({spec.transport}): elastic Horovod runs on Gloo only; use --transport "
                        f"{naming.TRANSPORTS[0]} or drop --min-gpus")
    return problems
