"""`distributetrain run | launch | wait | status | logs | delete`: a training job on the live cluster.

`run` is what `distributetrain-manager` runs: PreTraining (`launch`) then PostTraining (`wait`) in one
process. Every option falls back to an environment variable (DT_ + its name, e.g. DT_GPUS), which is how
manifests/DistributeTrain_Manager.yaml passes the request. The manager image's Manager.sh runs the two phases
as two processes instead: `launch --quiet`, then the hidden `posttraining`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from distributetrain import naming, podstatus
from distributetrain.errors import InvalidInput
from distributetrain.placement.planner import POLICIES
from distributetrain.request.fieldparsers import PULL_POLICIES, parse_bool
from distributetrain.request.jobspec import JobSpec, ManagerIdentity, env_name

F = Callable[..., Any]

_FLOW = """\b
The flow (docs/manager.md):
  1. validate the request (exit 2, nothing created, on any bad field)
  2. list nodes and pods, plan the split of --gpus over the free GPUs (exit 3 if it cannot fit)
  3. create the job's SSH key Secret, a NetworkPolicy, and one worker pod per planned node but the last
  4. wait until every worker is Running and Ready; else delete them, re-plan, retry (exit 71 at the end)
  5. write the hostfile ConfigMap from the workers' IPs, create the chief last; it runs horovodrun
  6. stream the chief's log here; a worker failing stops the job (exit 70) unless --min-gpus (elastic) or
     --restarts replace it; when the chief ends, delete the workers, the hostfile and the Secret, keep the
     chief for its log, exit with its exit code
"""


def _opt(*names: str, help: str, env: str, default: str | None = None, **kwargs: Any) -> F:
    """An option that defaults to None ("not given"), so JobSpec falls back to its DT_* variable."""
    tail = f"[env {env}" + ("; required]" if default == "required" else f"; default {default}]" if default
                            else "]")
    kwargs.setdefault("default", None)
    return click.option(*names, help=f"{help}  {tail}", **kwargs)


def _request_options(command: F) -> F:
    """Every JobSpec field as an option."""
    options = [
        _opt("--gpus", metavar="N", env="DT_GPUS", default="required",
             help="GPUs (= Horovod processes) in total."),
        _opt("--image", metavar="IMAGE", env="DT_IMAGE", default="required",
             help="The training image of every job pod (the base image with your Train.py)."),
        _opt("--job-name", metavar="NAME", env="DT_JOB_NAME", default="distributetrain",
             help="Names and labels the job's objects; a manager restarted with the same name adopts them."),
        _opt("-n", "--namespace", metavar="NS", env="DT_NAMESPACE", default="default",
             help="Where the job's objects go."),
        _opt("--command", "command_text", metavar="'CMD ARGS'", env="DT_COMMAND",
             default=" ".join(naming.DEFAULT_COMMAND), help="What every rank runs; or give it after --."),
        _opt("--resource", metavar="R", env="DT_RESOURCE", default=naming.DEFAULT_RESOURCE,
             help="The extended resource counted as GPUs."),
        _opt("--toleration", "tolerations", multiple=True, metavar="KEY[=VALUE][:EFFECT]",
             env="DT_TOLERATIONS, comma-separated",
             help="A taint job pods tolerate, besides R's own; `*` tolerates all. Repeatable."),
        _opt("--node-selector", "node_selectors", multiple=True, metavar="KEY=VALUE", env="DT_NODE_SELECTOR",
             help="Only nodes with this label. Repeatable."),
        _opt("--topology-key", metavar="LABEL", env="DT_TOPOLOGY_KEY",
             help="Keep the job inside one domain of this node label, e.g. a rack."),
        _opt("--policy", "placement_policy", type=click.Choice(list(POLICIES)), env="DT_PLACEMENT_POLICY",
             default="optimal", help="Placement policy (docs/planner.md)."),
        _opt("--ssh-port", metavar="PORT", env="DT_SSH_PORT", default=str(naming.DEFAULT_SSH_PORT),
             help="Workers' sshd port."),
        _opt("--schedule-timeout", metavar="DURATION", env="DT_SCHEDULE_TIMEOUT", default="300s",
             help="How long the workers may take to be Ready before a re-plan (300, 90s, 5m)."),
        _opt("--retries", metavar="N", env="DT_RETRIES", default="3",
             help="Re-plans after a schedule timeout."),
        _opt("--backoff", metavar="DURATION", env="DT_BACKOFF", default="10s",
             help="Pause before the first re-plan; it doubles."),
        _opt("--ssh-timeout", metavar="DURATION", env="DT_SSH_TIMEOUT", default="120s",
             help="How long the chief waits for every worker's sshd."),
        _opt("--active-deadline", metavar="DURATION", env="DT_ACTIVE_DEADLINE",
             help="Stop the whole job after this long (exit 74)."),
        _opt("--wait-for-gpus", metavar="DURATION", env="DT_WAIT_FOR_GPUS", default="0",
             help="When the GPUs are not free, wait this long for room (creating nothing)."),
        _opt("--keep-chief/--no-keep-chief", env="DT_KEEP_CHIEF", default="keep",
             help="Keep the ended chief pod for its log."),
        _opt("--volume-claim", metavar="PVC", env="DT_VOLUME_CLAIM",
             help="A PersistentVolumeClaim mounted in every job pod."),
        _opt("--mount-path", metavar="PATH", env="DT_MOUNT_PATH", default="/workspace",
             help="Where the claim is mounted."),
        _opt("--network-interface", metavar="IF", env="DT_NETWORK_INTERFACE",
             help="Horovod's interface between pods, e.g. eth0."),
        _opt("--transport", type=click.Choice(naming.TRANSPORTS), env="DT_TRANSPORT",
             default=naming.TRANSPORTS[0], help="Horovod controller."),
        _opt("--network-policy/--no-network-policy", env="DT_NETWORK_POLICY", default="on",
             help="Admit traffic to job pods only from job pods."),
        _opt("--service-account", metavar="SA", env="DT_SERVICE_ACCOUNT",
             help="ServiceAccount of job pods (default: no API token mounted)."),
        _opt("--image-pull-policy", type=click.Choice(PULL_POLICIES),
             env="DT_IMAGE_PULL_POLICY", help="Image pull policy of job pods."),
        _opt("--image-pull-secret", "image_pull_secrets", multiple=True, metavar="SECRET",
             env="DT_IMAGE_PULL_SECRETS, comma-separated",
             help="A docker-registry Secret job pods pull their image with. Repeatable."),
        _opt("--pod-template", metavar="FILE", env="DT_POD_TEMPLATE",
             help="A PodTemplateSpec YAML every job pod starts from (annotations, env, resources, volumes, "
                  "imagePullSecrets, priorityClassName, affinity...; docs/real-cluster.md)."),
        _opt("--worker-template", metavar="FILE", env="DT_WORKER_TEMPLATE",
             help="The template of the workers, instead of --pod-template."),
        _opt("--chief-template", metavar="FILE", env="DT_CHIEF_TEMPLATE",
             help="The template of the chief, instead of --pod-template."),
        _opt("--cpu-per-gpu", metavar="CPU", env="DT_CPU_PER_GPU", default="2",
             help="CPU requested per GPU of a job pod (no CPU limit); 0: none."),
        _opt("--memory-per-gpu", metavar="MEM", env="DT_MEMORY_PER_GPU", default="8Gi",
             help="Memory requested and limited per GPU of a job pod, /dev/shm added; 0: none."),
        _opt("--shm-size", metavar="MEM", env="DT_SHM_SIZE", default="1Gi",
             help="The memory-backed /dev/shm of job containers (NCCL); 0: the runtime's 64 MiB."),
        _opt("--allow-egress", multiple=True, metavar="CIDR", env="DT_ALLOW_EGRESS, comma-separated",
             help="Where job pods may connect besides each other and DNS (0.0.0.0/0: anywhere). Repeatable."),
        _opt("--preflight/--no-preflight", env="DT_PREFLIGHT", default="off",
             help="Before training, a short all-reduce over every rank: fails fast (exit 76) naming a pod "
                  "that is unreachable or hangs."),
        _opt("--min-busbw", metavar="GBPS", env="DT_MIN_BUSBW",
             help="The pre-flight's bus bandwidth must reach this (GB/s), else exit 76 naming the slowest "
                  "pod; turns the pre-flight on."),
        _opt("--min-gpus", metavar="M", env="DT_MIN_GPUS",
             help="Elastic Horovod: train on as few as M GPUs while a lost worker is replaced."),
        _opt("--max-gpus", metavar="X", env="DT_MAX_GPUS",
             help="Elastic: grow up to X GPUs when more free up (default: --gpus)."),
        _opt("--restarts", metavar="K", env="DT_RESTARTS", default="0",
             help="Relaunch a training whose worker or node was lost up to K times, from its checkpoint."),
        _opt("--replace-timeout", metavar="DURATION", env="DT_REPLACE_TIMEOUT", default="10m",
             help="How long lost workers may wait for free GPUs before the job fails (exit 70)."),
        _opt("--grow-interval", metavar="DURATION", env="DT_GROW_INTERVAL", default="30s",
             help="How often free GPUs are looked for while the job runs short of its size."),
        click.argument("command_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD ARGS...]"),
    ]
    for option in reversed(options):
        command = option(command)
    return _connection_options(command)


def _connection_options(command: F) -> F:
    command = click.option("--context", metavar="NAME", help="The kubeconfig context to use.")(command)
    return click.option("--kubeconfig", metavar="FILE", envvar="KUBECONFIG",
                        help="Kubeconfig file; inside a pod the in-cluster config is used.")(command)


def _spec(params: dict[str, Any]) -> JobSpec:
    args = dict(params)
    for key in ("kubeconfig", "context"):
        args.pop(key, None)
    command_args, command_text = args.pop("command_args"), args.pop("command_text")
    args["command"] = list(command_args) if command_args else command_text
    tolerations, selectors = args.pop("tolerations"), args.pop("node_selectors")
    args["tolerations"] = list(tolerations) if tolerations else None
    args["node_selector"] = list(selectors) if selectors else None
    for repeated in ("image_pull_secrets", "allow_egress"):
        args[repeated] = list(args[repeated]) if args.get(repeated) else None
    for key in ("dry_run", "output"):
        args.pop(key, None)
    return JobSpec.from_sources(args, os.environ)


def _kube(kubeconfig: str | None, context: str | None) -> Any:
    from distributetrain.kube.gateway import Kube  # imported late: --help must not need a cluster client

    return Kube.connect(kubeconfig=kubeconfig, context=context)


def _started_at() -> float | None:
    """When the manager started (epoch seconds), if before this process: Manager.sh sets it, so that the
    active deadline spans both phases."""
    started = os.environ.get("DT_MANAGER_STARTED_AT", "")
    return float(started) if started.replace(".", "", 1).isdigit() else None


def _orchestrator(params: dict[str, Any]) -> Any:
    spec = _spec(params)  # validated before any connection is made
    from distributetrain.manager.orchestrator import Orchestrator

    kube = _kube(params["kubeconfig"], params["context"])
    observer = _observer(kube, job=spec.job_name, namespace=spec.namespace, gpus=spec.gpus)
    return Orchestrator(kube, spec, owner=ManagerIdentity.from_env(os.environ), started_at=_started_at(),
                        reporter=observer)


def _observer(kube: Any, *, job: str, namespace: str, gpus: int = 0) -> Any:
    """The Reporter that also records the job's Events, the manager pod's phase label and annotations, and
    the state the metrics server serves (DT_MANAGER_STATE, set by Manager.sh: PostTraining goes on from
    what PreTraining left there)."""
    from pathlib import Path

    from distributetrain.observe import jobstate
    from distributetrain.observe.observer import Observer

    path = Path(os.environ[naming.ENV_MANAGER_STATE]) if os.environ.get(naming.ENV_MANAGER_STATE) else None
    state = None
    if path is not None:
        try:
            state = jobstate.loads(path.read_text())
        except (OSError, ValueError):
            state = None
    if state is None or (state.job, state.namespace) != (job, namespace):
        state = jobstate.initial(job=job, namespace=namespace, gpus=gpus, started_at=_started_at())
    return Observer(kube, state, manager=ManagerIdentity.from_env(os.environ), state_file=path)


def _closing(reporter: Any) -> Any:
    """Publish the job's last state before the process exits (at most a few seconds)."""
    import contextlib

    close = getattr(reporter, "close", None)
    return contextlib.closing(reporter) if close is not None else contextlib.nullcontext()


@click.command("run", epilog=_FLOW, context_settings={"ignore_unknown_options": False})
@click.option("--dry-run", is_flag=True,
              help="Plan against the live cluster and print every object the job would create; "
                   "create nothing.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="With --dry-run: YAML documents, or a JSON List.")
@_request_options
def run_command(dry_run: bool, output: str, **params: Any) -> None:
    """Run a whole training job: launch it, stream the chief's log, clean up, exit with the training's code.

    \b
    Example:
      distributetrain run --gpus 6 --image registry.example.com/train:1.0 -- python3 /workspace/Train.py
      distributetrain run --gpus 6 --image registry.example.com/train:1.0 --dry-run -o yaml
    """
    if dry_run:
        spec = _spec(params)
        from distributetrain.manager import dryrun

        objects = dryrun.preview(_kube(params["kubeconfig"], params["context"]), spec,
                                 owner=ManagerIdentity.from_env(os.environ))
        sys.stdout.write(dryrun.render(objects, output))
        return
    orchestrator = _orchestrator(params)
    with _closing(orchestrator.reporter):
        code = orchestrator.run()
    sys.exit(code)


@click.command("launch", epilog=_FLOW)
@click.option("-q", "--quiet", is_flag=True,
              help="Do not print the job's name on stdout (the manager pod's PreTraining: its log is for "
                   "people, the name is in every line already).")
@_request_options
def launch_command(quiet: bool, **params: Any) -> None:
    """PreTraining only: create the workers and the chief, print the job's name, leave it running.

    Follow it with `distributetrain wait JOB`. On any failure everything created is deleted.
    """
    orchestrator = _orchestrator(params)
    with _closing(orchestrator.reporter):
        started = orchestrator.run_pretraining()
    if not quiet:
        click.echo(started.job)  # for scripts: JOB=$(distributetrain launch ...)


@click.command("posttraining", hidden=True)
@_request_options
def posttraining_command(**params: Any) -> None:
    """PostTraining in a process of its own (DistributeTrain_PostTraining.py), given the same request as
    PreTraining: it reads the job's name, namespace and keep-chief from it (arguments, else DT_* variables,
    else their defaults) and the manager's start time (DT_MANAGER_STARTED_AT). The rest of the request was
    PreTraining's to validate and act on; only a job that replaces lost workers (--min-gpus, --restarts)
    reads it again, to build the replacements."""
    from distributetrain.manager.posttraining import run_posttraining

    keep_chief = params["keep_chief"]
    if keep_chief is None:
        try:
            keep_chief = parse_bool(os.environ.get(env_name("keep_chief"), "true"))
        except ValueError as err:
            raise InvalidInput(f"keep_chief ({env_name('keep_chief')}): {err}") from None
    kube = _kube(params["kubeconfig"], params["context"])
    job = _job_name(params["job_name"] or os.environ.get(env_name("job_name")) or naming.DEFAULT_JOB_NAME)
    namespace = params["namespace"] or os.environ.get(env_name("namespace")) or naming.DEFAULT_NAMESPACE
    observer = _observer(kube, job=job, namespace=namespace)
    with _closing(observer):
        code = run_posttraining(kube, job=job, namespace=namespace, keep_chief=keep_chief,
                                started_at=_started_at(), reporter=observer, request=lambda: _spec(params),
                                owner=ManagerIdentity.from_env(os.environ))
    sys.exit(code)


def _job_options(command: F) -> F:
    command = click.option("-n", "--namespace", default=lambda: os.environ.get("DT_NAMESPACE", "default"),
                           show_default="default or $DT_NAMESPACE", help="The job's namespace.")(command)
    command = click.argument("job", required=False)(command)
    return _connection_options(command)


def _job_name(job: str | None) -> str:
    name = job or os.environ.get("DT_JOB_NAME")
    if not name:
        raise InvalidInput("JOB: give the job's name (or set DT_JOB_NAME); list jobs with "
                           "kubectl get pods -l app.kubernetes.io/managed-by=distributetrain")
    if not naming.is_dns1123_label(name):
        raise InvalidInput(f"JOB: {name!r} is not a job name (lower-case letters, digits and '-')")
    return name


@click.command("wait")
@_job_options
@click.option("--keep-chief/--no-keep-chief", default=True, show_default=True,
              help="Keep the ended chief pod.")
def wait_command(job: str | None, namespace: str, kubeconfig: str | None, context: str | None,
                 keep_chief: bool) -> None:
    """PostTraining: stream JOB's chief log until it ends, clean up, exit with its exit code."""
    from distributetrain.manager.posttraining import run_posttraining

    name, kube = _job_name(job), _kube(kubeconfig, context)
    chief = kube.get("pods", namespace, naming.chief_name(name))
    mode = podstatus.annotation(chief, naming.RECOVERY_ANNOTATION) if chief else None
    if mode:
        raise InvalidInput(f"JOB: job {name} is {mode}: its supervisor replaces lost workers from the job's "
                           "request, which `wait` does not have; the manager that launched it (`run`, or "
                           "Manager.sh) supervises it. Nothing was changed")
    sys.exit(run_posttraining(kube, job=name, namespace=namespace, keep_chief=keep_chief, started_at=None))


@click.command("status")
@_job_options
def status_command(job: str | None, namespace: str, kubeconfig: str | None, context: str | None) -> None:
    """Show JOB's pods (role, node, GPUs, phase, readiness, why) and its other objects."""
    from distributetrain.manager.cleanup import JOB_KINDS, find_job_objects

    name = _job_name(job)
    kube = _kube(kubeconfig, context)
    found = find_job_objects(kube, job=name, namespace=namespace)
    if not any(found.values()):
        click.echo(f"no objects of job {name} in namespace {namespace}")
        sys.exit(1)
    rows = [("POD", "ROLE", "NODE", "GPUS", "PHASE", "READY", "EXIT", "DETAIL")]
    chief_first = sorted(found["pods"],
                         key=lambda p: (podstatus.role(p) != naming.ROLE_CHIEF, podstatus.name(p)))
    for pod in chief_first:
        ready = podstatus.is_ready(pod)
        code = podstatus.exit_code(pod)
        detail = "" if ready or podstatus.phase(pod) == "Succeeded" else podstatus.why(pod)
        rows.append((podstatus.name(pod), podstatus.role(pod), podstatus.node(pod) or "-",
                     str(podstatus.gpus(pod)), podstatus.phase(pod), "yes" if ready else "no",
                     "-" if code is None else str(code), detail))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    for kind in JOB_KINDS[1:]:
        for obj in found[kind]:
            click.echo(f"{kind}/{obj['metadata']['name']}")


@click.command("logs")
@_job_options
@click.option("-f", "--follow", is_flag=True, help="Keep streaming until the chief ends.")
@click.option("--tail", type=int, default=None, metavar="N", help="Only the last N lines.")
def logs_command(job: str | None, namespace: str, kubeconfig: str | None, context: str | None,
                 follow: bool, tail: int | None) -> None:
    """Print JOB's chief log (the training's output; the chief is kept after the job for this)."""
    name = _job_name(job)
    kube = _kube(kubeconfig, context)
    chief = naming.chief_name(name)
    if kube.get("pods", namespace, chief) is None:
        raise InvalidInput(f"JOB: job {name} has no chief pod {chief} in namespace {namespace}")
    if follow:
        for line in kube.follow_log(namespace, chief, naming.CHIEF_CONTAINER):
            click.echo(line.decode("utf-8", "replace"))
    else:
        sys.stdout.write(kube.read_log(namespace, chief, naming.CHIEF_CONTAINER, tail_lines=tail)
                         .decode("utf-8", "replace"))


@click.command("delete")
@_job_options
def delete_command(job: str | None, namespace: str, kubeconfig: str | None, context: str | None) -> None:
    """Delete every object of JOB (found by its labels only), the chief included; wait until its pods are
    gone, so their GPUs are free."""
    from distributetrain.manager.cleanup import delete_job
    from distributetrain.observe.joblog import Reporter

    name = _job_name(job)
    count = delete_job(_kube(kubeconfig, context), job=name, namespace=namespace, keep_chief=False,
                       reporter=Reporter())
    click.echo(f"deleted {count} object(s) of job {name}")


def register(group: click.Group) -> None:
    """Add this module's commands to the `distributetrain` group."""
    for command in (run_command, launch_command, posttraining_command, wait_command, status_command,
                    logs_command, delete_command):
        group.add_command(command)
