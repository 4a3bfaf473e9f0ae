"""`python -m localcluster serve --dir DIR ...`: the local cluster as a foreground process.

`localcluster up` (cli.py) starts this in its own session and waits for /readyz; `localcluster down` sends
SIGTERM, on which every pod is stopped and the runtime's state removed before the process exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

from localcluster._internal.admission.podsecurity import parse_defaults
from localcluster._internal.auth.certs import DEFAULT_SANS
from localcluster._internal.cluster.assembly import LocalCluster
from localcluster._internal.cluster.control import SOCKET, serve_control
from localcluster._internal.cluster.spec import ClusterSpec
from localcluster._internal.doubles.autoscaler import NodePool, parse_node_pool
from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime.imagepulls import PullTime
from localcluster._internal.runtime.images import ImageMap


def parse_nodes(text: str) -> tuple[int, ...]:
    try:
        nodes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nodes {text!r}: expected GPU counts like 5,3,2") from None
    if any(n < 0 for n in nodes):
        raise argparse.ArgumentTypeError(f"--nodes {text!r}: expected one non-negative GPU count per node")
    return nodes


def _node_pool(text: str) -> NodePool:
    try:
        return parse_node_pool(text)
    except InvalidInput as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localcluster")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the local cluster in the foreground")
    serve.add_argument("--dir", type=Path, required=True, help="state directory (kubeconfig, ca.crt, pid)")
    serve.add_argument("--nodes", type=parse_nodes, default=(5, 3, 2), help="GPUs per node, e.g. 5,3,2")
    serve.add_argument("--cpu-nodes", type=int, default=0,
                       help="untainted nodes cpu-1, cpu-2, ... without GPUs (default 0)")
    serve.add_argument("--runtime", choices=("sim", "process"), default="sim")
    serve.add_argument("--no-gpu-taint", action="store_true", help="do not taint GPU nodes")
    serve.add_argument("--no-network-policy", action="store_true",
                       help="do not enforce NetworkPolicy (process runtime), as a CNI without it")
    serve.add_argument("--volume-refresh", type=float, default=None, metavar="SECONDS",
                       help="how often a running pod's Secret/ConfigMap volumes take updates (process "
                            "runtime; default 60, the kubelet's sync period; 0: never)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=0, help="port to listen on (0: any free port)")
    serve.add_argument("--san", action="append", default=[], help="extra certificate subject names")
    serve.add_argument("--pod-security", type=_pod_security, default={},
                       help="Pod Security for unlabelled namespaces, e.g. enforce=baseline,warn=restricted")
    serve.add_argument("--hostname-label-suffix", default="",
                       help="appended to each node's kubernetes.io/hostname label, e.g. .ec2.internal")
    serve.add_argument("--node-link", default="", metavar="RATE[,DELAY]",
                       help="each node's link to the others, e.g. 1gbit (process runtime, root)")
    serve.add_argument("--openshift", action="store_true",
                       help="OpenShift's restricted-v2 SCC in namespaces with a UID range "
                            "(doubles/openshift.py)")
    serve.add_argument("--fabric", default="", metavar="KIND:COUNT",
                       help="fabric devices per GPU node, as a device plugin advertises them: efa:4 "
                            "(vpc.amazonaws.com/efa), efa:4,4,2 (per node) or RESOURCE:COUNT")
    serve.add_argument("--images", type=Path, default=None, metavar="FILE",
                       help="the image map: which images the process runtime can run (default: none)")
    serve.add_argument("--pull-time", type=_pull_time, action="append", default=[],
                       metavar="IMAGE=DURATION[,SIZE]",
                       help="the first pull of matching images takes this long on each node, e.g. "
                            "distributetrain/base=180s")
    serve.add_argument("--missing-image", action="append", default=[], metavar="PATTERN",
                       help="images no registry has: their pulls fail (ErrImagePull)")
    serve.add_argument("--node-pool", type=_node_pool, action="append", default=[],
                       metavar="NAME:GPUS:MAX[:MIN]",
                       help="an autoscaled node pool (doubles/autoscaler); repeatable")
    serve.add_argument("--autoscaler-delay", type=float, default=30.0, metavar="SECONDS",
                       help="from a scale-up decision to the new node's registration (default 30)")
    serve.add_argument("--scale-down-unneeded-time", type=float, default=600.0, metavar="SECONDS",
                       help="how long a pool's node holds no pod before it is removed (default 600)")
    serve.add_argument("--provisioning-requests", action="store_true",
                       help="serve and answer autoscaling.x-k8s.io/v1 ProvisioningRequests")
    serve.add_argument("--kueue", action="store_true", help="run Kueue's plain-pod protocol (doubles/kueue)")
    serve.add_argument("--kueue-manage-jobs-without-queue-name", action="store_true",
                       help="Kueue queues every pod, with a queue name or not")
    return parser


def _pull_time(text: str) -> PullTime:
    try:
        return PullTime.parse(text)
    except InvalidInput as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _pod_security(text: str) -> dict[str, str]:
    try:
        return parse_defaults(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _runtime_options(args: argparse.Namespace) -> dict[str, object]:
    """What the process runtime is told; the simulated one materialises no volumes and enforces nothing."""
    if args.runtime != "process":
        return {}
    options: dict[str, object] = {"network_policy": False} if args.no_network_policy else {}
    if args.volume_refresh is not None:
        if args.volume_refresh < 0:
            raise SystemExit(f"--volume-refresh {args.volume_refresh:g}: expected 0 or more seconds")
        options["volume_refresh"] = args.volume_refresh
    return options


async def serve(args: argparse.Namespace) -> None:
    if args.cpu_nodes < 0:
        raise SystemExit(f"--cpu-nodes {args.cpu_nodes}: expected 0 or more")
    if not args.nodes and not args.cpu_nodes and not args.node_pool:
        raise SystemExit("--nodes: expected at least one node, or a --node-pool")
    spec = ClusterSpec(nodes=args.nodes, cpu_nodes=args.cpu_nodes, gpu_taint=not args.no_gpu_taint,
                       runtime=args.runtime, pod_security_defaults=args.pod_security,
                       hostname_label_suffix=args.hostname_label_suffix, node_link=args.node_link,
                       openshift=args.openshift, fabric=args.fabric,
                       runtime_options=_runtime_options(args),
                       images=ImageMap.load(args.images) if args.images is not None else ImageMap(),
                       pull_times=tuple(args.pull_time), missing_images=tuple(args.missing_image),
                       bind_host=args.host, port=args.port,
                       sans=tuple(dict.fromkeys((*DEFAULT_SANS, *args.san))),
                       node_pools=tuple(args.node_pool), autoscaler_provision_delay=args.autoscaler_delay,
                       autoscaler_unneeded_time=args.scale_down_unneeded_time,
                       provisioning_requests=args.provisioning_requests, kueue=args.kueue,
                       kueue_manage_without_queue_name=args.kueue_manage_jobs_without_queue_name)
    cluster = LocalCluster(spec, state_dir=args.dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    pid_file = args.dir / "pid"
    args.dir.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()}\n")
    control: asyncio.AbstractServer | None = None
    try:
        await cluster.astart()
        # `localcluster fault` reaches the server here, whatever its API answers (cluster/control.py)
        control = await serve_control(cluster, args.dir)
        (args.dir / "notices").write_text("".join(f"{line}\n" for line in cluster.notices))
        (args.dir / "url").write_text(cluster.url + "\n")
        logging.getLogger(__name__).warning("local cluster serving at %s (kubeconfig %s)", cluster.url,
                                            cluster.kubeconfig)
        await stop.wait()
    finally:
        if control is not None:
            control.close()
        await cluster.astop()
        for name in ("kubeconfig", "url", "pid", "notices", SOCKET):
            with contextlib.suppress(FileNotFoundError):
                (args.dir / name).unlink()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("localcluster.audit").setLevel(logging.INFO)  # Pod Security's audit lines
    asyncio.run(serve(args))

