"""A job's request, `JobSpec`: every field typed, documented and validated before anything is created.

Sources, highest precedence first: command-line arguments, environment variables (the names below, which
`manifests/DistributeTrain_Manager.yaml` sets), defaults. Every problem is collected and reported at once,
each naming its field and the variable that would set it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from fractions import Fraction
from typing import Any

from distributetrain import naming
from distributetrain.errors import InvalidInput
from distributetrain.placement.planner import POLICIES
from distributetrain.placement.tolerations import Toleration, job_tolerations, parse_tolerations
from distributetrain.request import podtemplate
from distributetrain.request.fieldparsers import (
    PULL_POLICIES,
    Parser,
    optional,
    parse_amount,
    parse_bool,
    parse_choice,
    parse_cidrs,
    parse_command,
    parse_duration,
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
from distributetrain.request.podtemplate import PodTemplate

PLACEMENT_POLICIES = tuple(POLICIES)
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

# Environment variables: one per field, `DT_` + the field name in capitals.
ENV_PREFIX = "DT_"
# The manager pod learns its own identity from the downward API (manifests/DistributeTrain_Manager.yaml).
ENV_MANAGER_POD_NAME = "DT_MANAGER_POD_NAME"
ENV_MANAGER_POD_UID = "DT_MANAGER_POD_UID"
ENV_MANAGER_NAMESPACE = "DT_MANAGER_NAMESPACE"
ENV_MANAGER_POD_IPS = "DT_MANAGER_POD_IPS"  # status.podIPs: tells an IPv6-only pod network before any pod


@dataclass(frozen=True)
class ManagerIdentity:
    """The manager pod, when running in a cluster: every object the job creates is owned by it."""

    name: str
    uid: str
    namespace: str | None = None
    pod_ips: tuple[str, ...] = ()

    @staticmethod
    def from_env(env: Mapping[str, str]) -> ManagerIdentity | None:
        name, uid = env.get(ENV_MANAGER_POD_NAME, ""), env.get(ENV_MANAGER_POD_UID, "")
        if not name or not uid:
            return None
        ips = tuple(ip.strip() for ip in env.get(ENV_MANAGER_POD_IPS, "").split(",") if ip.strip())
        return ManagerIdentity(name=name, uid=uid, namespace=env.get(ENV_MANAGER_NAMESPACE) or None,
                               pod_ips=ips)


@dataclass(frozen=True)
class JobSpec:
    """One training job's request. Durations are in seconds."""

    gpus: int
    """How many GPUs (= Horovod processes) in total, over every pod. Env DT_GPUS. Required."""
    image: str
    """The base training image of every job pod (sshd in workers, the launcher in the chief). Env DT_IMAGE."""
    job_name: str = naming.DEFAULT_JOB_NAME
    """Names and labels every object of the job; a manager restarted with the same name adopts or cleans up
    the old objects. Lower-case DNS label of at most naming.JOB_NAME_MAX characters. Env DT_JOB_NAME."""
    namespace: str = naming.DEFAULT_NAMESPACE
    """Where the job's pods, Secret, ConfigMap and NetworkPolicy live. Env DT_NAMESPACE."""
    command: tuple[str, ...] = naming.DEFAULT_COMMAND
    """What horovodrun starts on every rank. Env DT_COMMAND: a shell-quoted string or a JSON list."""
    resource: str = naming.DEFAULT_RESOURCE
    """The extended resource counted as GPUs (nvidia.com/gpu, amd.com/gpu, nvidia.com/mig-1g.10gb...).
    Env DT_RESOURCE."""
    tolerations: tuple[Toleration, ...] = ()
    """Extra tolerations for job pods, besides those of the resource's own taint (the ones the
    ExtendedResourceToleration admission plugin would add). Env DT_TOLERATIONS: comma-separated
    KEY[=VALUE][:EFFECT], `*` for every taint, or a JSON list of tolerations."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """Only nodes with all these labels are used. Env DT_NODE_SELECTOR: KEY=VALUE,KEY=VALUE."""
    topology_key: str | None = None
    """A node label (e.g. topology.kubernetes.io/zone): every pod of the job lands in one domain of it.
    Env DT_TOPOLOGY_KEY."""
    placement_policy: str = "optimal"
    """The planner's policy (see docs/planner.md). Env DT_PLACEMENT_POLICY."""
    ssh_port: int = naming.DEFAULT_SSH_PORT
    """The port the workers' sshd listens on and the chief connects to. Env DT_SSH_PORT."""
    schedule_timeout: float = 300.0
    """How long the gang of workers may take to be Running and Ready before it is deleted and re-planned.
    Env DT_SCHEDULE_TIMEOUT (e.g. 300, 90s, 5m)."""
    retries: int = 3
    """How many times a gang that missed the schedule timeout is re-planned and re-created. Env DT_RETRIES."""
    backoff: float = 10.0
    """Wait before the first retry; doubles on each further retry. Env DT_BACKOFF."""
    ssh_timeout: float = 120.0
    """How long the launcher in the chief waits for every worker's sshd to accept the job key.
    Env DT_SSH_TIMEOUT."""
    active_deadline: float | None = None
    """Wall-clock limit of the whole job, from the manager's start; None: no limit. Env DT_ACTIVE_DEADLINE."""
    wait_for_gpus: float = 0.0
    """When the request does not fit the free GPUs, wait up to this long for room (creating nothing while
    waiting) instead of failing at once. Env DT_WAIT_FOR_GPUS."""
    keep_chief: bool = True
    """Keep the ended chief pod so its log survives. Env DT_KEEP_CHIEF (true/false)."""
    volume_claim: str | None = None
    """A PersistentVolumeClaim mounted in every job pod (Train.py and data). Env DT_VOLUME_CLAIM."""
    mount_path: str = DEFAULT_MOUNT_PATH
    """Where the claim is mounted. Env DT_MOUNT_PATH."""
    network_interface: str | None = None
    """The interface Horovod uses between pods (e.g. eth0); None: Horovod picks. Env DT_NETWORK_INTERFACE."""
    transport: str = naming.TRANSPORTS[0]
    """Horovod's controller: gloo or mpi. Env DT_TRANSPORT."""
    network_policy: bool = True
    """Create a NetworkPolicy that admits traffic to job pods only from job pods. Env DT_NETWORK_POLICY."""
    service_account: str | None = None
    """The ServiceAccount of job pods; None: the namespace default, with no API token mounted.
    Env DT_SERVICE_ACCOUNT."""
    image_pull_policy: str | None = None
    """Always, IfNotPresent or Never; None: Kubernetes' default for the tag. Env DT_IMAGE_PULL_POLICY."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (type kubernetes.io/dockerconfigjson) job pods pull their image with, besides the template's.
    Env DT_IMAGE_PULL_SECRETS, comma-separated."""
    pod_template: PodTemplate | None = None
    """A PodTemplateSpec YAML file every job pod starts from (podtemplate.py says what it may set). Env
    DT_POD_TEMPLATE; the shipped manifest points it at the distributetrain-pod-template ConfigMap."""
    worker_template: PodTemplate | None = None
    """The template of worker pods, instead of pod_template. Env DT_WORKER_TEMPLATE."""
    chief_template: PodTemplate | None = None
    """The template of the chief, instead of pod_template. Env DT_CHIEF_TEMPLATE."""
    cpu_per_gpu: Fraction = DEFAULT_CPU_PER_GPU
    """CPU requested per GPU of a job pod (no CPU limit: throttling slows the input pipeline); 0: none.
    The template's own cpu, if it names one, wins. Env DT_CPU_PER_GPU."""
    memory_per_gpu: Fraction = DEFAULT_MEMORY_PER_GPU
    """Memory per GPU of a job pod, requested and limited alike (plus shm_size); 0: none. The template's own
    memory, if it names one, wins. Env DT_MEMORY_PER_GPU."""
    shm_size: Fraction = DEFAULT_SHM_SIZE
    """Size of the memory-backed /dev/shm of job containers (NCCL's shared-memory transport needs more than
    a container's 64 MiB); counted in the pod's memory; 0: no such volume. Env DT_SHM_SIZE."""
    preflight: bool = False
    """Before the training, the chief runs a short Horovod all-reduce sweep over every rank and fails fast
    (exit 76) naming a pod that is unreachable or hangs (docs/images.md). Off by default: it starts Horovod
    and TensorFlow once more, seconds to tens of seconds (docs/benchmarks.md). Env DT_PREFLIGHT."""
    min_busbw: float | None = None
    """With the pre-flight check (which this turns on): the bus bandwidth, in GB/s, its all-reduce must reach
    at its largest size, else the job fails naming the slowest pod. Env DT_MIN_BUSBW."""
    allow_egress: tuple[str, ...] = ()
    """CIDRs job pods may reach besides each other and DNS (e.g. an object store; 0.0.0.0/0: anywhere), in
    the job's NetworkPolicy. Env DT_ALLOW_EGRESS, comma-separated."""
    min_gpus: int | None = None
    """Elastic Horovod: the fewest GPUs the job may train on, `gpus` being its target. A lost worker (its pod
    or its node) then does not end the job: the other ranks go on from the last committed state while at
    least this many remain, and the manager replaces the worker on the best free GPUs. None: not elastic.
    Env DT_MIN_GPUS."""
    max_gpus: int | None = None
    """Elastic: the most GPUs the job may grow to when more free up (default: gpus). Env DT_MAX_GPUS."""
    restarts: int = 0
    """Not elastic: how many times a training that failed because a worker or its node was lost is relaunched
    on replaced workers, resuming from rank 0's latest checkpoint. 0: a lost worker ends the job (exit 70).
    Env DT_RESTARTS."""
    replace_timeout: float = 600.0
    """How long lost workers may wait for free GPUs to be replaced before the job fails (exit 70): an elastic
    job while fewer than min_gpus run, a restart job before each relaunch. Env DT_REPLACE_TIMEOUT."""
    grow_interval: float = 30.0
    """How often the manager looks for free GPUs while the job runs short of its target (lost workers not yet
    replaced), or, elastic, below max_gpus. Env DT_GROW_INTERVAL."""

    @property
    def recovery(self) -> str | None:
        """How the job survives a lost worker: naming.RECOVERY_ELASTIC, RECOVERY_RESTART, or None: it
        ends."""
        if self.min_gpus is not None:
            return naming.RECOVERY_ELASTIC
        return naming.RECOVERY_RESTART if self.restarts else None

    @property
    def node_selector_dict(self) -> dict[str, str]:
        return dict(self.node_selector)

    def all_tolerations(self) -> tuple[Toleration, ...]:
        """What job pods tolerate: the GPU resource's own taints, then the user's (tolerations.py)."""
        return job_tolerations(self.resource, self.tolerations)

    def template_for(self, role: str) -> PodTemplate | None:
        """The pod template of a role (worker or chief): its own, else the shared one, else none."""
        own = self.worker_template if role == naming.ROLE_WORKER else self.chief_template
        return own or self.pod_template

    @staticmethod
    def from_sources(args: Mapping[str, Any], env: Mapping[str, str]) -> JobSpec:
        """Build and validate a JobSpec; raise InvalidInput listing every bad field."""
        return _build(args, env)


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


_OPTION_NAMES = {"tolerations": "--toleration", "placement_policy": "--policy",
                 "image_pull_secrets": "--image-pull-secret"}


def option_name(field_name: str) -> str:
    """The command-line option of a field (cli/job.py)."""
    return _OPTION_NAMES.get(field_name, "--" + field_name.replace("_", "-"))


_PARSERS: dict[str, Parser] = {
    "gpus": parse_gpus, "image": parse_image, "job_name": parse_job_name, "namespace": parse_namespace,
    "command": parse_command, "resource": parse_resource, "tolerations": parse_tolerations,
    "node_selector": lambda value: tuple(sorted(parse_node_selector(value).items())),
    "topology_key": optional(parse_label_key),
    "placement_policy": parse_choice(PLACEMENT_POLICIES), "ssh_port": parse_int_range(1, 65535),
    "schedule_timeout": parse_positive_duration, "retries": parse_int_range(0, 100),
    "backoff": parse_duration,
    "ssh_timeout": parse_duration, "active_deadline": optional(parse_positive_duration),
    "wait_for_gpus": parse_duration,
    "keep_chief": parse_bool, "volume_claim": optional(parse_subdomain_name), "mount_path": parse_mount_path,
    "network_interface": optional(parse_interface), "transport": parse_choice(naming.TRANSPORTS),
    "network_policy": parse_bool, "service_account": optional(parse_subdomain_name),
    "image_pull_policy": optional(parse_choice(PULL_POLICIES)),
    "image_pull_secrets": parse_names,
    "pod_template": optional(podtemplate.load), "worker_template": optional(podtemplate.load),
    "chief_template": optional(podtemplate.load),
    "cpu_per_gpu": parse_amount, "memory_per_gpu": parse_amount, "shm_size": parse_amount,
    "allow_egress": parse_cidrs, "preflight": parse_bool, "min_busbw": optional(parse_gbps),
    "min_gpus": optional(parse_gpus), "max_gpus": optional(parse_gpus), "restarts": parse_int_range(0, 100),
    "replace_timeout": parse_positive_duration, "grow_interval": parse_positive_duration,
}


def _build(args: Mapping[str, Any], env: Mapping[str, str]) -> JobSpec:
    values: dict[str, Any] = {}
    problems: list[str] = []
    for spec_field in fields(JobSpec):
        name, var = spec_field.name, env_name(spec_field.name)
        raw = args.get(name)
        where = option_name(name)
        if raw is None and var in env:
            raw, where = env[var], f"{var}"
        if raw is None:
            if spec_field.default is MISSING:
                problems.append(f"{name}: required; give {option_name(name)} or set {var}")
            continue
        try:
            values[name] = _PARSERS[name](raw)
        except (ValueError, InvalidInput) as err:
            problems.append(f"{name} ({where}): {err}")
    if values.get("volume_claim") is None and "mount_path" in values and (
            args.get("mount_path") is not None or env_name("mount_path") in env):
        problems.append("mount_path: given without volume_claim; set --volume-claim to the claim to mount")
    if not problems:
        problems += _cross_checks(JobSpec(**values), sources={
            name: (option_name(name) if args.get(name) is not None else env_name(name))
            for name in ("pod_template", "worker_template", "chief_template")})
    if problems:
        raise InvalidInput("invalid request, nothing was created:\n  " + "\n  ".join(problems))
    return JobSpec(**values)


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
    if spec.min_gpus is not None and spec.transport != naming.TRANSPORTS[0]:
        problems.append(f"transport ({spec.transport}): elastic Horovod runs on Gloo only; use --transport "
                        f"{naming.TRANSPORTS[0]} or drop --min-gpus")
    return problems
