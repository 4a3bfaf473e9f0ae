"""`localcluster up|status|down`: the local Kubernetes cluster in the background, for the demo and for trying
jobs.

`up` starts `python -m localcluster serve` in its own session, waits until /readyz answers over HTTPS
(verified with the cluster's CA), and prints the kubeconfig path. `down` stops that process by the PID it
recorded (checking the PID is still ours) and removes what `up` wrote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from localcluster._internal.admission.podsecurity import parse_defaults
from localcluster._internal.cluster import control, daemon
from localcluster._internal.cluster.faultcli import fault
from localcluster._internal.cluster.spec import parse_fabric
from localcluster._internal.doubles.autoscaler import parse_node_pool
from localcluster._internal.errors import InvalidInput, LocalClusterError
from localcluster._internal.runtime.imagepulls import PullTime
from localcluster._internal.runtime.images import ImageMap
from localcluster._internal.runtime.nodelink import parse_node_link

DEFAULT_DIR = daemon.DEFAULT_DIR
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
_MARK = f"{daemon.MODULE}\0serve\0"  # how our server's command line reads in /proc/PID/cmdline


def _read_pid(directory: Path) -> int | None:
    try:
        pid = int((directory / "pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # a recycled PID belongs to someone else: only ever signal our own server
    return pid if _MARK.encode() in cmdline else None


def _parse_nodes(text: str, *, pools: bool = False) -> list[int]:
    """GPUs per node; none at all only beside a node pool (a GPU pool that starts at zero nodes)."""
    try:
        nodes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InvalidInput(f"--nodes {text!r}: expected GPU counts per node, like 5,3,2") from None
    if (not nodes and not pools) or any(n < 0 for n in nodes):
        raise InvalidInput(f"--nodes {text!r}: expected at least one node (or a --node-pool), each with 0 or "
                           "more GPUs")
    return nodes


class _Group(click.Group):
    """Reports our errors on one line (`error: ...`) with their exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LocalClusterError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(err.exit_code)


@click.group("localcluster", cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """A local Kubernetes API server with simulated or process-backed GPU nodes (for demos and tests;
    see the package README).

    \b
      localcluster up --nodes 5,3,2 --runtime process --images images.yaml   # prints the kubeconfig
      localcluster status
      localcluster fault api --mode refuse --for 60s      # production faults: `localcluster fault --help`
      localcluster down
    """


main.add_command(fault)


@main.command("up")
@click.option("--nodes", default="5,3,2", show_default=True, help="GPUs per node, one entry per node.")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=DEFAULT_DIR, show_default=True,
              help="Where the kubeconfig, CA, PID and log go.")
@click.option("--cpu-nodes", type=click.IntRange(min=0), default=1, show_default=True,
              help="Untainted nodes cpu-1, cpu-2, ... without GPUs, for pods that need none (the manager).")
@click.option("--runtime", type=click.Choice(["process", "sim"]), default="sim", show_default=True,
              help="Run pods as real processes, or simulate them.")
@click.option("--no-gpu-taint", is_flag=True, help="Do not taint GPU nodes with nvidia.com/gpu:NoSchedule.")
@click.option("--port", type=int, default=0, help="API server port (default: any free port).")
@click.option("--pod-security", default="", metavar="MODE=LEVEL,...",
              help="Pod Security for namespaces without labels, e.g. enforce=baseline,warn=restricted "
                   "(default: privileged; a namespace's pod-security.kubernetes.io labels override it).")
@click.option("--hostname-label-suffix", default="", metavar="SUFFIX",
              help="Append SUFFIX to each node's kubernetes.io/hostname label (e.g. .ec2.internal), so the "
                   "label differs from the node's name as on EKS.")
@click.option("--no-network-policy", is_flag=True,
              help="Do not enforce NetworkPolicy (process runtime), like a network plugin without it.")
@click.option("--volume-refresh", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS",
              help="How often a running pod's Secret/ConfigMap volumes take updates (process runtime), as "
                   "the kubelet's sync period (plus up to half of it as jitter); an update of the pod "
                   "object (e.g. an annotation) refreshes them at once; 0: only then.")
@click.option("--node-link", default="", metavar="RATE[,DELAY]",
              help="Each node's link to the other nodes, shaped with tc (process runtime, root): e.g. 1gbit "
                   "or 500mbit (units bit, kbit, mbit, gbit); a delay (,0.2ms) only where the kernel has "
                   "netem. Default: none, pods of different nodes talk as fast as pods of one node.")
@click.option("--openshift", is_flag=True,
              help="OpenShift's restricted-v2 SCC in namespaces annotated openshift.io/sa.scc.uid-range: "
                   "UIDs assigned from the range, others refused with the SCC's message.")
@click.option("--node-pool", "node_pools", multiple=True, metavar="NAME:GPUS:MAX[:MIN]",
              help="An autoscaled node pool (after cluster-autoscaler): up to MAX nodes of GPUS GPUs, added "
                   "for pods the scheduler cannot place and removed when empty. Repeatable; with --nodes '' "
                   "the cluster's GPUs all come from pools that start at zero.")
@click.option("--autoscaler-delay", type=click.FloatRange(min=0), default=30.0, show_default=True,
              metavar="SECONDS", help="From a pool's scale-up decision to its new node's registration.")
@click.option("--scale-down-unneeded-time", type=click.FloatRange(min=0), default=600.0, show_default=True,
              metavar="SECONDS", help="How long a pool's node holds no pod before it is removed.")
@click.option("--provisioning-requests", is_flag=True,
              help="Serve and answer autoscaling.x-k8s.io/v1 ProvisioningRequests (with --node-pool).")
@click.option("--kueue", is_flag=True,
              help="Run Kueue's plain-pod protocol: ResourceFlavors, ClusterQueues, LocalQueues, Workloads.")
@click.option("--kueue-manage-jobs-without-queue-name", "kueue_manage_all", is_flag=True,
              help="With --kueue: queue every pod outside kube-system, with a queue name or not.")
@click.option("--fabric", default="", metavar="KIND:COUNT",
              help="Fabric devices each GPU node advertises beside its GPUs, as a device plugin does: efa:4 "
                   "(4 vpc.amazonaws.com/efa, the EFA device plugin's resource), efa:4,4,2 (one count per "
                   "--nodes entry) or RESOURCE:COUNT (rdma/ib:8). Scheduled and accounted like GPUs.")
@click.option("--images", "images", type=click.Path(path_type=Path, dir_okay=False), default=None,
              metavar="FILE",
              help="The image map (YAML): which images pods can run, each a Dockerfile with its build "
                   "context or the host's own files (process runtime). Default: none, every image fails "
                   "to pull (ErrImagePull).")
@click.option("--pull-time", "pull_times", multiple=True, metavar="IMAGE=DURATION[,SIZE]",
              help="The first pull of matching images (fnmatch on the repository path) takes DURATION on "
                   "each node, e.g. distributetrain/base=180s or '*trainer*=3m,7Gi'; later pulls are "
                   "instant. Repeatable. Default: every image is on every node already.")
@click.option("--missing-image", "missing_images", multiple=True, metavar="PATTERN",
              help="Images no registry has (fnmatch): their pulls fail, ErrImagePull then ImagePullBackOff, "
                   "on either runtime. Repeatable.")
def up(nodes: str, cpu_nodes: int, directory: Path, runtime: str, no_gpu_taint: bool, port: int,
       pod_security: str, hostname_label_suffix: str, no_network_policy: bool, volume_refresh: float,
       node_link: str, openshift: bool, node_pools: tuple[str, ...], autoscaler_delay: float,
       scale_down_unneeded_time: float, provisioning_requests: bool, kueue: bool, kueue_manage_all: bool,
       images: Path | None, pull_times: tuple[str, ...], missing_images: tuple[str, ...],
       fabric: str) -> None:
    """Start the local cluster in the background and print its kubeconfig.

    GPU nodes are node-1, node-2, ... (one per --nodes entry, tainted nvidia.com/gpu=present:NoSchedule
    unless --no-gpu-taint); CPU nodes cpu-1, cpu-2, ... have no GPU resource and no taint."""
    counts = _parse_nodes(nodes, pools=bool(node_pools))
    for pool in node_pools:
        parse_node_pool(pool)  # refused here, with its reason, rather than in the server's log
    if provisioning_requests and not node_pools:
        raise InvalidInput("--provisioning-requests: ProvisioningRequests are answered by the node pools' "
                           "autoscaler; give --node-pool too")
    if fabric:
        parse_fabric(fabric, len(counts))  # refused here, with its reason, rather than in the server's log
    if node_link:
        parse_node_link(node_link)
        if runtime != "process":
            raise InvalidInput(f"--node-link {node_link}: node links need --runtime process (simulated pods "
                               "send no traffic)")
    try:
        parse_defaults(pod_security)
    except ValueError as error:
        raise InvalidInput(f"--pod-security {pod_security!r}: {error}") from None
    if images is not None:
        images = images.resolve()
        ImageMap.load(images)  # refused here, with its reason, rather than in the server's log
    for text in pull_times:
        PullTime.parse(text)
    directory = directory.resolve()
    pid = _read_pid(directory)
    if pid is not None and daemon.ready_url(directory):
        click.echo(f"a local cluster is already running (pid {pid}); kubeconfig: {directory / 'kubeconfig'}")
        click.echo(f"export KUBECONFIG={directory / 'kubeconfig'}")
        return
    command = daemon.serve_command(directory, nodes=counts, cpu_nodes=cpu_nodes, runtime=runtime, port=port,
                                   gpu_taint=not no_gpu_taint, pod_security=pod_security,
                                   hostname_label_suffix=hostname_label_suffix,
                                   network_policy=not no_network_policy, volume_refresh=volume_refresh,
                                   node_link=node_link, images=images, pull_times=pull_times,
                                   missing_images=missing_images, openshift=openshift, node_pools=node_pools,
                                   autoscaler_delay=autoscaler_delay,
                                   scale_down_unneeded_time=scale_down_unneeded_time,
                                   provisioning_requests=provisioning_requests, kueue=kueue,
                                   kueue_manage_all=kueue_manage_all, fabric=fabric)
    process, url = daemon.start_daemon(command, directory=directory, log=directory / "server.log",
                                timeout=START_TIMEOUT)
    kubeconfig = directory / "kubeconfig"
    link = f", node links {parse_node_link(node_link)} each way" if node_link else ""
    pools = "".join(f", node pool {p}" for p in node_pools) + (", Kueue" if kueue else "")
    click.echo(f"local cluster up: {len(counts)} GPU node(s) with {nodes or 'no'} GPUs and {cpu_nodes} CPU "
               f"node(s){pools}, API {url}, runtime {runtime}{link} (pid {process.pid})")
    with contextlib.suppress(FileNotFoundError):
        for line in (directory / "notices").read_text().splitlines():
            click.echo(f"note: {line}")
    click.echo(f"kubeconfig: {kubeconfig}")
    click.echo(f"export KUBECONFIG={kubeconfig}")


@main.command("status")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=DEFAULT_DIR, show_default=True)
def status(directory: Path) -> None:
    """Whether the local cluster in DIR runs and answers; exits 1 when it does not."""
    directory = directory.resolve()
    pid = _read_pid(directory)
    if pid is None:
        click.echo(f"no local cluster running in {directory}")
        sys.exit(1)
    url = daemon.ready_url(directory)
    click.echo(f"local cluster running (pid {pid}), API {url or '(not answering)'}, "
               f"kubeconfig {directory / 'kubeconfig'}")
    try:  # the faults in force, from the server itself (an API outage is why the API does not answer)
        faults = control.request(directory, {"op": "status"}, timeout=5).get("lines") or []
    except (OSError, ValueError):
        faults = []
    for line in faults:
        click.echo(f"fault: {line}")
    if not url and not any(line.startswith("API outage") for line in faults):
        sys.exit(1)


@main.command("down")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=DEFAULT_DIR, show_default=True)
def down(directory: Path) -> None:
    """Stop the local cluster in DIR (every pod it runs) and remove what `up` wrote."""
    directory = directory.resolve()
    pid = _read_pid(directory)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            click.echo(f"the local cluster (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s; killed it",
                       err=True)
            for _ in range(50):
                if not _alive(pid):
                    break
                time.sleep(0.1)
        click.echo(f"local cluster stopped (pid {pid})")
    else:
        click.echo(f"no local cluster running in {directory}")
    for name in ("pid", "url", "kubeconfig", "ca.crt", "server.log", "notices", control.SOCKET):
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (its parent, `up`, has exited)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"

