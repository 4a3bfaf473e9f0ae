"""Every name, label, annotation key, mount path and default of the objects a job creates; the contract with
the base image (its paths, its entrypoint's modes, the DT_* variables its pods read); and the Kubernetes
grammar those names follow (DNS labels and subdomains, qualified names, label values)."""

from __future__ import annotations

import re

from distributetrain.errors import InvalidInput

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "distributetrain"
JOB_LABEL = "distributetrain.io/job"
ROLE_LABEL = "distributetrain.io/role"
ROLE_WORKER = "worker"
ROLE_CHIEF = "chief"
ROLE_MANAGER = "manager"
ROLE_SSH = "ssh"
ROLE_HOSTFILE = "hostfile"
ROLE_NETWORK = "network"
ROLE_DISRUPTION = "disruption"
ROLE_CAPACITY = "capacity"  # a ProvisioningRequest and its PodTemplates
# which planned GPU share a pod carries, for re-reading a job's plan from its pods
GPUS_ANNOTATION = "distributetrain.io/gpus"
# on the chief of a job that survives a lost worker: how (RECOVERY_ELASTIC or RECOVERY_RESTART)
RECOVERY_ANNOTATION = "distributetrain.io/recovery"
RECOVERY_ELASTIC = "elastic"    # Horovod elastic: the other ranks go on, the manager replaces the worker
RECOVERY_RESTART = "restart"    # the training is relaunched from its latest checkpoint on replaced workers
# on the chief: the resourceVersion of the hostfile ConfigMap the manager last wrote. Changing it makes the
# chief's kubelet sync the pod, and so refresh its ConfigMap volume, at once (manager/hostfilepush.py)
HOSTS_VERSION_ANNOTATION = "distributetrain.io/hosts-version"

# Capacity the manager does not place itself (manager/capacity.py): an autoscaled pool, a Kueue queue
SCALE_UP_AUTO, SCALE_UP_ON, SCALE_UP_OFF = "auto", "on", "off"
SCALE_UP_MODES = (SCALE_UP_AUTO, SCALE_UP_ON, SCALE_UP_OFF)
PROVISIONING_AUTO, PROVISIONING_NONE = "auto", "none"
QUEUE_NONE = "none"           # --queue none: never queued, even where the namespace has a default LocalQueue
DEFAULT_LOCAL_QUEUE = "default"  # Kueue's LocalQueueDefaulting: the namespace's queue for pods without one
# Kueue's plain-pod protocol (kubernetes-sigs/kueue site/content/en/docs/tasks/run/plain_pods.md, v0.10)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"  # "false": the group ends once none is active
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"  # Topology Aware Scheduling
# a ProvisioningRequest's pods (kubernetes/autoscaler, autoscaling.x-k8s.io/v1 types.go)
CONSUME_PROVISIONING_REQUEST = "autoscaling.x-k8s.io/consume-provisioning-request"
PROVISIONING_CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
DEFAULT_RESOURCE = "nvidia.com/gpu"
DEFAULT_JOB_NAME = "distributetrain"
DEFAULT_NAMESPACE = "default"
DEFAULT_SSH_PORT = 2222
HOSTNAME_LABEL = "kubernetes.io/hostname"
# the field a node is pinned by (matchFields), as the DaemonSet controller does: the hostname label may differ
# from the node's name (EKS with custom DHCP domains, kubelets run with --hostname-override)
NODE_NAME_FIELD = "metadata.name"

# inside every job pod
SSH_MOUNT_PATH = "/etc/distributetrain/ssh"      # the Secret: id_ed25519, id_ed25519.pub, authorized_keys
HOSTFILE_MOUNT_PATH = "/etc/distributetrain/hostfile"  # the ConfigMap: the workers' `IP slots=N` lines
HOSTFILE_KEY = "hostfile"
HOSTNAMES_KEY = "names"  # elastic and restart jobs: `IP POD` per worker, the pod behind each address
NODES_KEY = "nodes"      # `IP NODE` per worker: the pre-flight names the node of a pod it blames
# restart jobs without a volume claim: the chief's own emptyDir, where rank 0 checkpoints (the chief outlives
# every relaunch; the workers hold no checkpoint)
CHECKPOINT_MOUNT_PATH = "/var/lib/distributetrain/checkpoints"
SHM_MOUNT_PATH = "/dev/shm"  # a memory-backed emptyDir: the container runtime's default is 64 MiB
SSH_PRIVATE_KEY = "id_ed25519"
SSH_PUBLIC_KEY = "id_ed25519.pub"
SSH_AUTHORIZED_KEYS = "authorized_keys"

# the containers of the job's pods, by the name `kubectl logs -c` takes
WORKER_CONTAINER = "worker"
CHIEF_CONTAINER = "launcher"
# the volumes the manager adds to every job pod; a pod template may not use these names
SSH_VOLUME = "ssh"
HOSTFILE_VOLUME = "hostfile"
WORK_VOLUME = "work"
SHM_VOLUME = "dshm"
CHECKPOINT_VOLUME = "checkpoints"
MANAGED_VOLUMES = (SSH_VOLUME, HOSTFILE_VOLUME, WORK_VOLUME, SHM_VOLUME, CHECKPOINT_VOLUME)

# What job pods carry unless their pod template says otherwise: no service-mesh sidecar (an injected proxy
# keeps the chief Running after training, and strict mTLS blocks the raw TCP of sshd and Gloo).
DEFAULT_POD_ANNOTATIONS = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
# A running gang is not to be moved by an autoscaler: cluster-autoscaler leaves a node alone while a pod on it
# says it is not safe to evict (cluster-autoscaler/FAQ.md, "What types of pods can prevent CA from removing a
# node?"); Karpenter v1 does not voluntarily disrupt a node with a pod annotated do-not-disrupt
# (karpenter.sh/docs/concepts/disruption, "Pod-Level Controls").
DO_NOT_DISRUPT_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                              "karpenter.sh/do-not-disrupt": "true"}

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
JOB_NAME_MAX = 40  # leaves room for "-worker-NNNN" within the 63-character label limit


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1123_LABEL.match(value))


def is_subdomain(value: str) -> bool:
    return 0 < len(value) <= 253 and bool(_SUBDOMAIN.match(value))


def check_qualified_name(value: str, *, prefix_required: bool = False) -> None:
    """A label key or resource name: [PREFIX/]NAME, PREFIX a DNS subdomain, NAME at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash and not is_subdomain(prefix):
        raise InvalidInput(f"{value!r}: prefix {prefix!r} is not a lower-case DNS subdomain")
    if prefix_required and not slash:
        raise InvalidInput(f"{value!r} needs a domain prefix, like nvidia.com/gpu")
    if not (0 < len(name) <= 63 and _NAME_PART.match(name)):
        raise InvalidInput(f"{value!r}: name {name!r} must be 1-63 characters of [A-Za-z0-9-_.], "
                           "starting and ending with a letter or digit")


def check_label_value(value: str) -> None:
    if value and not (len(value) <= 63 and _NAME_PART.match(value)):
        raise InvalidInput(f"label value {value!r} must be at most 63 characters of [A-Za-z0-9-_.], "
                           "starting and ending with a letter or digit")


def worker_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def chief_name(job: str) -> str:
    return f"{job}-chief"


def pod_group_name(job: str, run_id: str, attempt: int) -> str:
    """A Kueue pod group (and its Workload) per run and attempt: a group's members must all be of one try."""
    return f"{job}-{run_id[:8]}-{attempt}"


def provisioning_request_name(job: str, attempt: int) -> str:
    return f"{job}-{attempt}"


def pod_template_name(job: str, role: str, gpus: int) -> str:
    return f"{job}-{role}-{gpus}gpu"


def ssh_secret_name(job: str) -> str:
    return f"{job}-ssh"


def hostfile_configmap_name(job: str) -> str:
    return f"{job}-hostfile"


def network_policy_name(job: str) -> str:
    return f"{job}-network"


def disruption_budget_name(job: str) -> str:
    return f"{job}-disruption"


def job_labels(job: str, role: str) -> dict[str, str]:
    """The labels every object of a job carries; cleanup selects on the first two only."""
    return {MANAGED_BY_KEY: MANAGED_BY, JOB_LABEL: job, ROLE_LABEL: role}


def job_pods_selector(job: str) -> dict[str, str]:
    """matchLabels of every pod of the job (and of nothing else of it: pods are the only objects selected)."""
    return {MANAGED_BY_KEY: MANAGED_BY, JOB_LABEL: job}


def job_selector(job: str) -> str:
    """The label selector of every object a job owns."""
    return f"{MANAGED_BY_KEY}={MANAGED_BY},{JOB_LABEL}={job}"


# The base image (base-image/Dockerfile): where its files live and what its entrypoint's modes are called.
# manifests.py builds pods against these; tests/unit/test_launcher.py checks the two agree.
ENTRYPOINT_PATH = "/usr/local/bin/distributetrain-entrypoint"
IMAGE_HOME = "/opt/distributetrain"
TRAIN_SCRIPT_PATH = "/opt/distributetrain/Train.py"
# The base image's non-root account (base-image/Dockerfile creates it): job pods run as it, so they pass
# Pod Security "restricted". Numeric, so runAsNonRoot can be checked; above 10000, clear of host accounts.
IMAGE_USER = "trainer"
IMAGE_UID = 10001
IMAGE_GID = 10001
ENTRYPOINT_WORKER = "worker"      # sshd -D -e, key-only, the job key from the Secret
ENTRYPOINT_LAUNCHER = "launcher"  # python -m distributetrain.chief.launcher [-- COMMAND...]
# What the chief runs on every rank when the request names no command: the base image's training script.
DEFAULT_COMMAND = ("python3", TRAIN_SCRIPT_PATH)
# Horovod's controllers, as DT_TRANSPORT and horovodrun (--gloo, --mpi) name them; the first is the default.
TRANSPORTS = ("gloo", "mpi")

# What the entrypoint and the chief's launcher read from their environment (the job's pods set these).
ENV_SSH_DIR = "DT_SSH_DIR"          # the mounted Secret; default SSH_MOUNT_PATH
ENV_SSH_PORT = "DT_SSH_PORT"        # sshd's port in workers, horovodrun -p in the chief
ENV_POD_IP = "DT_POD_IP"            # chief: downward API fieldRef status.podIP
ENV_POD_IPS = "DT_POD_IPS"          # chief: downward API status.podIPs (dual-stack: the IPv4 one is used)
ENV_SLOTS = "DT_SLOTS"              # chief: its own GPU share = its Horovod processes
ENV_NUM_PROCESSES = "DT_NUM_PROCESSES"  # chief: the job's processes in total, checked against the hostfile
ENV_TRANSPORT = "DT_TRANSPORT"      # chief: gloo (default) or mpi
ENV_NETWORK_INTERFACE = "DT_NETWORK_INTERFACE"
ENV_SSH_TIMEOUT = "DT_SSH_TIMEOUT"   # chief: seconds (or 90s, 2m) to wait for every worker's sshd
ENV_START_TIMEOUT = "DT_START_TIMEOUT"  # chief: horovodrun --start-timeout
ENV_HOSTFILE = "DT_HOSTFILE"        # chief: default HOSTFILE_MOUNT_PATH/HOSTFILE_KEY
ENV_HOSTFILE_WAIT = "DT_HOSTFILE_WAIT"  # chief of a gang made at once: seconds to wait for the hostfile
ENV_SSH_IDENTITY = "DT_SSH_IDENTITY"  # chief: the installed private key; the entrypoint sets it
ENV_PREFLIGHT = "DT_PREFLIGHT"      # chief: true runs the pre-flight all-reduce check before the command
ENV_MIN_BUSBW = "DT_MIN_BUSBW"      # chief: GB/s the check's bus bandwidth must reach (turns the check on)
ENV_FABRIC = "DT_FABRIC"            # chief: efa or ib: the pre-flight fails a pod whose NCCL does not use it
ENV_NODE_NAME = "DT_NODE_NAME"      # chief: downward API spec.nodeName (its own node, for the pre-flight)
ENV_JOB_NAME = "DT_JOB_NAME"        # informational: which job a pod belongs to, for its own logs
# per-role environment for the ranks: Horovod's Gloo launcher starts every rank with the chief's environment
# (horovod/runner/gloo_run.py), so a worker's entrypoint saves the variables its pod template sets (named in
# DT_POD_ENV) to a file, sshd names it to the ranks it starts (DT_HOST_ENV_FILE), and each rank loads it last
ENV_POD_ENV = "DT_POD_ENV"          # worker: the template's variable names, comma-separated
ENV_HOST_ENV_FILE = "DT_HOST_ENV_FILE"  # a rank on a worker: the file of that worker's own variables
# the base image: the Horovod controllers its build-time `horovodrun --check-build` found (gloo, or gloo,mpi);
# the chief's launcher then starts horovodrun without that check (chief/horovodrun.py)
ENV_HOROVOD_BUILD_CHECKED = "DT_HOROVOD_BUILD_CHECKED"
# elastic jobs (chief): horovodrun --min-np/--max-np, and how long Horovod waits for its minimum
ENV_MIN_PROCESSES = "DT_MIN_PROCESSES"
ENV_MAX_PROCESSES = "DT_MAX_PROCESSES"
ENV_ELASTIC_TIMEOUT = "DT_ELASTIC_TIMEOUT"
# restart jobs (chief): relaunches allowed, and how long to wait for the manager's replacement workers
ENV_RESTARTS = "DT_RESTARTS"
ENV_RESTART_WAIT = "DT_RESTART_WAIT"
# what Train.py reads (the launcher and the manager set them): the elastic form, where rank 0 checkpoints,
# and to resume from the newest checkpoint there
ENV_ELASTIC = "DT_ELASTIC"
ENV_CHECKPOINT_DIR = "DT_CHECKPOINT_DIR"
ENV_RESUME = "DT_RESUME"

# What the manager shows on its own pod (observer.py): `kubectl get pod -L distributetrain.io/phase`, and the
# job's GPUs, plan and training progress in `kubectl describe pod` (docs/observability.md).
PHASE_LABEL = "distributetrain.io/phase"
PHASES = ("Planning", "Scheduling", "Launching", "Running", "Succeeded", "Failed")
JOB_ANNOTATION = "distributetrain.io/job"              # the job this manager runs
JOB_GPUS_ANNOTATION = "distributetrain.io/job-gpus"    # `6 requested, 6 held`
PLAN_ANNOTATION = "distributetrain.io/plan"            # `5 on node-1, 1 on node-3 (chief)`
PROGRESS_ANNOTATION = "distributetrain.io/progress"    # `epoch 3 of 20, step 120, loss 0.4100, ...`
PHASE_TIMES_ANNOTATION = "distributetrain.io/phase-times"  # `Planning +0.0s, Scheduling +0.4s, ...`
# Events the manager records name it as their reporting controller (source.component, reportingComponent)
EVENT_COMPONENT = "distributetrain-manager"
# The manager's Prometheus metrics (metrics.py): the container port's name and number, and the file through
# which the two phases (two processes under Manager.sh) hand the job's state to the metrics server
METRICS_PORT_NAME = "metrics"
DEFAULT_METRICS_PORT = 9102
ENV_MANAGER_STATE = "DT_MANAGER_STATE"
