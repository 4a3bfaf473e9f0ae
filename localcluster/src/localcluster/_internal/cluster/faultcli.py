"""`localcluster fault ...`: production faults on a cluster that `localcluster up` runs, through its control
socket (cluster/control.py), so they work while its API refuses connections.

    localcluster fault api --mode refuse --for 60s   # or hang, 429 (--retry-after N), 503; --clear ends it
    localcluster fault freeze POD [-n NS] [--match python] [-c CONTAINER]   # process runtime
    localcluster fault thaw POD [-n NS]
    localcluster fault throttle POD --cpu 0.5 [-n NS] [--match REGEX]     # --clear lifts it
    localcluster fault shutdown NODE [--grace-period 30s] [--critical-grace-period 10s]
    localcluster fault status
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from localcluster._internal.apimachinery.durations import parse_duration
from localcluster._internal.cluster import control, daemon
from localcluster._internal.doubles.apioutage import MODES
from localcluster._internal.errors import InvalidInput, LocalClusterError

REQUEST_TIMEOUT = 60.0

_dir = click.option("--dir", "directory", type=click.Path(path_type=Path), default=daemon.DEFAULT_DIR,
                    show_default=True, help="The directory of the cluster `localcluster up` started.")
_namespace = click.option("-n", "--namespace", default="default", show_default=True)
_match = click.option("--match", default=None, metavar="REGEX",
                      help="Only the processes whose command line matches (as pgrep -f), and what they "
                           "started: e.g. --match python freezes the training and leaves sshd answering.")
_container = click.option("-c", "--container", default=None, help="Only this container's processes.")


def _send(directory: Path, body: dict[str, Any], *, timeout: float = REQUEST_TIMEOUT) -> None:
    """Send the request, print the answer's lines; a refusal is printed as `error: ...` with its exit code."""
    directory = directory.resolve()
    try:
        answer = control.request(directory, body, timeout=timeout)
    except (OSError, ValueError) as error:
        raise LocalClusterError(f"no local cluster answers in {directory} ({error}); start one with "
                                "`localcluster up`") from None
    if not answer.get("ok"):
        click.echo(f"error: {answer.get('error')}", err=True)
        sys.exit(int(answer.get("exit_code") or 1))
    for line in answer.get("lines") or []:
        click.echo(line)


def _seconds(text: str, what: str) -> float:
    return parse_duration(text, what=what)


@click.group("fault")
def fault() -> None:
    """Production faults on the running local cluster, as the real components behave and speak: API outages,
    frozen or throttled pods, a node's graceful shutdown. See the package README, "Faults"."""


@fault.command("api")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="refuse: connections refused (the API server restarting); hang: accepted, never answered "
                   "(partitioned, overloaded); 429: TooManyRequests with Retry-After (API Priority and "
                   "Fairness); 503: ServiceUnavailable.")
@click.option("--for", "duration", default=None, metavar="DURATION",
              help="How long, e.g. 60s or 5m (default: until --clear).")
@click.option("--retry-after", type=click.IntRange(min=0), default=None, metavar="SECONDS",
              help="The Retry-After of 429 (default 1) and 503 (default none) answers.")
@click.option("--clear", is_flag=True, help="End the outage in force.")
@_dir
def api(mode: str | None, duration: str | None, retry_after: int | None, clear: bool,
        directory: Path) -> None:
    """Make the API server unreachable, hung, throttled or unavailable; open connections and watches are cut.
    The cluster's controllers and kubelets carry on; resourceVersions continue after it."""
    if clear:
        if mode is not None or duration is not None:
            raise InvalidInput("--clear ends the outage in force: give it alone")
        _send(directory, {"op": "api-clear"})
        return
    if mode is None:
        raise InvalidInput("give --mode refuse|hang|429|503 (and --for DURATION), or --clear")
    seconds = _seconds(duration, "--for") if duration is not None else None
    _send(directory, {"op": "api-outage", "mode": mode, "seconds": seconds, "retry_after": retry_after})


@fault.command("freeze")
@click.argument("pod")
@_namespace
@_match
@_container
@_dir
def freeze(pod: str, namespace: str, match: str | None, container: str | None, directory: Path) -> None:
    """Freeze a pod's processes (the cgroup freezer, else SIGSTOP); the pod stays Running and Ready."""
    _send(directory, {"op": "freeze", "pod": pod, "namespace": namespace, "match": match,
                      "container": container})


@fault.command("thaw")
@click.argument("pod")
@_namespace
@_dir
def thaw(pod: str, namespace: str, directory: Path) -> None:
    """Resume a pod's frozen processes."""
    _send(directory, {"op": "thaw", "pod": pod, "namespace": namespace})


@fault.command("throttle")
@click.argument("pod")
@click.option("--cpu", type=float, default=None, help="CPUs the processes may use, e.g. 0.5.")
@click.option("--clear", is_flag=True, help="Lift the throttle.")
@_namespace
@_match
@_container
@_dir
def throttle(pod: str, cpu: float | None, clear: bool, namespace: str, match: str | None,
             container: str | None, directory: Path) -> None:
    """Hold a pod's processes to a share of CPU with a cgroup CPU quota: a straggler (root)."""
    if clear == (cpu is not None):
        raise InvalidInput("give --cpu N (e.g. 0.5) or --clear")
    if clear:
        _send(directory, {"op": "unthrottle", "pod": pod, "namespace": namespace})
        return
    _send(directory, {"op": "throttle", "pod": pod, "namespace": namespace, "cpu": cpu, "match": match,
                      "container": container})


@fault.command("shutdown")
@click.argument("node")
@click.option("--grace-period", default="30s", show_default=True, metavar="DURATION",
              help="The kubelet's shutdownGracePeriod: the whole shutdown.")
@click.option("--critical-grace-period", default="10s", show_default=True, metavar="DURATION",
              help="The kubelet's shutdownGracePeriodCriticalPods: its last part, for critical pods.")
@_dir
def shutdown(node: str, grace_period: str, critical_grace_period: str, directory: Path) -> None:
    """Shut a node down gracefully, as the kubelet's GracefulNodeShutdown does: NotReady, every pod SIGTERMed
    with its grace period and ended Failed (Terminated, DisruptionTarget). Returns when it is done."""
    grace = _seconds(grace_period, "--grace-period")
    critical = _seconds(critical_grace_period, "--critical-grace-period")
    _send(directory, {"op": "shutdown", "node": node, "grace_period": grace,
                      "critical_grace_period": critical}, timeout=grace + REQUEST_TIMEOUT)


@fault.command("status")
@_dir
def status(directory: Path) -> None:
    """The faults in force."""
    directory = directory.resolve()
    try:
        lines = control.request(directory, {"op": "status"}, timeout=REQUEST_TIMEOUT).get("lines") or []
    except (OSError, ValueError) as error:
        raise LocalClusterError(f"no local cluster answers in {directory} ({error})") from None
    for line in lines or ["no fault in force"]:
        click.echo(line)
