"""`distributetrain run | launch | wait | status | logs | delete`: a training job on the live cluster.

`run` is what `distributetrain-manager` runs: PreTraining (`launch`) then PostTraining (`wait`) in one
process. Their options are JobSpec's fields (cli/options.py); each falls back to its environment variable
(DT_ + its name, e.g. DT_GPUS), which is how manifests/DistributeTrain_Manager.yaml passes the request. The
manager image's Manager.sh runs the two phases as two processes instead: `launch --quiet`, then the hidden
`posttraining`. The other commands take a job as a JobRef: JOB (else DT_JOB_NAME) and -n (else DT_NAMESPACE).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from distributetrain import naming, podstatus
from distributetrain.cli.options import field_option, job_ref_options, request_args, request_options
from distributetrain.errors import InvalidInput
from distributetrain.request.jobspec import JobRef, JobSpec, ManagerIdentity, read_field

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


def _request_options(command: F) -> F:
    """Every JobSpec field as an option (cli/options.py), and where the cluster is."""
    return _connection_options(request_options(command))


def _connection_options(command: F) -> F:
    command = click.option("--context", metavar="NAME", help="The kubeconfig context to use.")(command)
    return click.option("--kubeconfig", metavar="FILE", envvar="KUBECONFIG",
                        help="Kubeconfig file; inside a pod the in-cluster config is used.")(command)


def _spec(params: dict[str, Any]) -> JobSpec:
    return JobSpec.from_sources(request_args(params), os.environ)


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
    from distributetrain.manager.pretraining import PreTraining

    kube = _kube(params["kubeconfig"], params["context"])
    observer = _observer(kube, spec.ref, gpus=spec.gpus)
    return Orchestrator(PreTraining(kube, spec, owner=ManagerIdentity.from_env(os.environ),
                                    started_at=_started_at(), reporter=observer))


def _observer(kube: Any, job: JobRef, *, gpus: int = 0) -> Any:
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
    if state is None or (state.job, state.namespace) != (job.name, job.namespace):
        state = jobstate.initial(job=job.name, namespace=job.namespace, gpus=gpus, started_at=_started_at())
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
    from distributetrain.manager.watchdog import StragglerRule

    ref = JobRef.from_sources(params, os.environ)
    keep_chief = read_field("keep_chief", params["keep_chief"], os.environ)
    tolerance = read_field("api_outage_tolerance", params["api_outage_tolerance"], os.environ)
    hang_timeout = read_field("hang_timeout", params["hang_timeout"], os.environ)
    on_hang = read_field("on_hang", params["on_hang"], os.environ)  # None: by the job's mode
    stragglers = StragglerRule(*(read_field(name, params[name], os.environ) for name in (
        "straggler_factor", "straggler_reports", "replace_stragglers")))
    kube = _kube(params["kubeconfig"], params["context"]).patient(tolerance)
    observer = _observer(kube, ref)
    with _closing(observer):
        code = run_posttraining(kube, job=ref.name, namespace=ref.namespace, keep_chief=keep_chief,
                                started_at=_started_at(), reporter=observer, request=lambda: _spec(params),
                                owner=ManagerIdentity.from_env(os.environ), hang_timeout=hang_timeout,
                                on_hang=on_hang, stragglers=stragglers)
    sys.exit(code)


def _job_options(command: F) -> F:
    return _connection_options(job_ref_options(command))


def _job(job_name: str | None, namespace: str | None) -> JobRef:
    """The job a command acts on: named (argument JOB, else DT_JOB_NAME) and in its namespace."""
    return JobRef.from_sources({"job_name": job_name, "namespace": namespace}, os.environ, name_required=True,
                               name_given_as="JOB")


@click.command("wait")
@_job_options
@field_option("keep_chief")
@field_option("api_outage_tolerance")
def wait_command(job_name: str | None, namespace: str | None, kubeconfig: str | None, context: str | None,
                 keep_chief: bool | None, api_outage_tolerance: str | None) -> None:
    """PostTraining: stream JOB's chief log until it ends, clean up, exit with its exit code."""
    from distributetrain.manager.posttraining import run_posttraining

    job, keep = _job(job_name, namespace), read_field("keep_chief", keep_chief, os.environ)
    tolerance = read_field("api_outage_tolerance", api_outage_tolerance, os.environ)
    kube = _kube(kubeconfig, context)
    chief = kube.get("pods", job.namespace, naming.chief_name(job.name))
    mode = podstatus.annotation(chief, naming.RECOVERY_ANNOTATION) if chief else None
    if mode:
        raise InvalidInput(f"JOB: job {job.name} is {mode}: its supervisor replaces lost workers from the "
                           "job's request, which `wait` does not have; the manager that launched it (`run`, "
                           "or Manager.sh) supervises it. Nothing was changed")
    sys.exit(run_posttraining(kube.patient(tolerance), job=job.name, namespace=job.namespace, keep_chief=keep,
                              started_at=None))


@click.command("status")
@_job_options
def status_command(job_name: str | None, namespace: str | None, kubeconfig: str | None,
                   context: str | None) -> None:
    """Show JOB's pods (role, node, GPUs, phase, readiness, why) and its other objects."""
    from distributetrain.manager.cleanup import JOB_KINDS, find_job_objects

    job = _job(job_name, namespace)
    kube = _kube(kubeconfig, context)
    found = find_job_objects(kube, job=job.name, namespace=job.namespace)
    if not any(found.values()):
        click.echo(f"no objects of job {job.name} in namespace {job.namespace}")
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
def logs_command(job_name: str | None, namespace: str | None, kubeconfig: str | None, context: str | None,
                 follow: bool, tail: int | None) -> None:
    """Print JOB's chief log (the training's output; the chief is kept after the job for this)."""
    job = _job(job_name, namespace)
    kube = _kube(kubeconfig, context)
    chief = naming.chief_name(job.name)
    if kube.get("pods", job.namespace, chief) is None:
        raise InvalidInput(f"JOB: job {job.name} has no chief pod {chief} in namespace {job.namespace}")
    if follow:
        for line in kube.follow_log(job.namespace, chief, naming.CHIEF_CONTAINER):
            click.echo(line.decode("utf-8", "replace"))
    else:
        sys.stdout.write(kube.read_log(job.namespace, chief, naming.CHIEF_CONTAINER, tail_lines=tail)
                         .decode("utf-8", "replace"))


@click.command("delete")
@_job_options
def delete_command(job_name: str | None, namespace: str | None, kubeconfig: str | None,
                   context: str | None) -> None:
    """Delete every object of JOB (found by its labels only), the chief included; wait until its pods are
    gone, so their GPUs are free."""
    from distributetrain.manager.cleanup import delete_job
    from distributetrain.observe.joblog import Reporter

    job = _job(job_name, namespace)
    count = delete_job(_kube(kubeconfig, context), job=job.name, namespace=job.namespace, keep_chief=False,
                       reporter=Reporter())
    click.echo(f"deleted {count} object(s) of job {job.name}")


def register(group: click.Group) -> None:
    """Add this module's commands to the `distributetrain` group."""
    for command in (run_command, launch_command, posttraining_command, wait_command, status_command,
                    logs_command, delete_command):
        group.add_command(command)
