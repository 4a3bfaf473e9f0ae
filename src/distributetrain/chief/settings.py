"""The chief's launcher settings, parsed once from its arguments and the environment the chief pod is given
(manifests.chief_pod sets the DT_* variables); launcher.py runs with them."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from distributetrain import naming
from distributetrain.chief import allreduce, relaunch
from distributetrain.errors import InvalidInput
from distributetrain.naming import DEFAULT_COMMAND, TRANSPORTS
from distributetrain.placement import fabric
from distributetrain.request import fieldparsers


@dataclass(frozen=True)
class Settings:
    """Everything the launcher needs, parsed once from arguments and the environment."""

    hostfile: Path
    identity_file: Path
    ssh_port: int
    pod_ip: str
    slots: int
    num_processes: int | None
    transport: str
    network_interface: str | None
    ssh_timeout: float
    ssh_delay: float
    ssh_connect_timeout: float
    start_timeout: float
    command: tuple[str, ...]
    preflight: bool = False            # the pre-flight all-reduce check before the command (allreduce.py)
    min_busbw: float | None = None     # GB/s its bus bandwidth must reach; turns the check on
    preflight_timeout: float = 120.0
    preflight_sizes: str = "1M,16M,64M"
    fabric: str | None = None          # efa or ib: the pre-flight fails a pod whose NCCL does not use it
    node_name: str = ""                # this pod's node (the downward API's spec.nodeName)
    recovery: relaunch.RecoverySettings = field(default_factory=relaunch.RecoverySettings)  # elastic, restart
    # a gang made at once (the manager's groupstart.py): how long to wait for the workers in the hostfile
    hostfile_wait: float = 0.0


def parse_duration(value: str, *, name: str) -> float:
    """The request's one duration grammar (fieldparsers.parse_duration: 120, 90s, 2m, 1h30m), naming the
    setting in errors."""
    try:
        return fieldparsers.parse_duration(value)
    except ValueError as err:
        raise InvalidInput(f"{name}: {err}") from None


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise InvalidInput(f"{key}: {raw!r} is not an integer") from err


def _env_bool(env: Mapping[str, str], key: str) -> bool:
    try:
        return fieldparsers.parse_bool(env.get(key) or "false")
    except ValueError as err:
        raise InvalidInput(f"{key}: {err}") from None


def _env_float(env: Mapping[str, str], key: str) -> float | None:
    raw = env.get(key, "")
    try:
        return float(raw) if raw else None
    except ValueError:
        raise InvalidInput(f"{key}: {raw!r} is not a number") from None


def own_ip(env: Mapping[str, str]) -> str:
    """This pod's IPv4 address: from DT_POD_IPS (status.podIPs, comma-separated) when it holds one, since a
    dual-stack cluster's status.podIP may be IPv6, which Horovod cannot use; else DT_POD_IP."""
    ips = [ip.strip() for ip in env.get(naming.ENV_POD_IPS, "").split(",") if ip.strip()]
    return next((ip for ip in ips if ":" not in ip), env.get(naming.ENV_POD_IP, ""))


def parse_settings(argv: Sequence[str], env: Mapping[str, str]) -> Settings:
    """Arguments first, then the environment the chief pod is given, then defaults."""
    installed_key = Path(env.get("HOME") or "/root") / ".ssh" / naming.SSH_PRIVATE_KEY
    parser = argparse.ArgumentParser(
        prog="python -m distributetrain.chief.launcher",
        description="Wait for the workers' sshd, then run horovodrun over them and this pod.",
    )
    parser.add_argument("--hostfile", type=Path, default=Path(env.get(naming.ENV_HOSTFILE) or Path(
        naming.HOSTFILE_MOUNT_PATH) / naming.HOSTFILE_KEY), help="the workers' `IP slots=N` lines")
    parser.add_argument("--identity-file", type=Path, default=Path(
        env.get(naming.ENV_SSH_IDENTITY) or installed_key),
        help="the job's private key, as installed by the entrypoint (mode 0600)")
    parser.add_argument("--ssh-port", type=int,
                        default=_env_int(env, naming.ENV_SSH_PORT, naming.DEFAULT_SSH_PORT))
    parser.add_argument("--pod-ip", default=own_ip(env), help="this pod's IP")
    parser.add_argument("--slots", type=int, default=_env_int(env, naming.ENV_SLOTS, 1),
                        help="Horovod processes in this pod (its GPU share)")
    parser.add_argument("--num-processes", type=int,
                        default=_env_int(env, naming.ENV_NUM_PROCESSES, 0) or None,
                        help="the job's processes in total; if given, the hostfile's slots must add up to it")
    parser.add_argument("--transport", choices=TRANSPORTS,
                        default=env.get(naming.ENV_TRANSPORT) or TRANSPORTS[0])
    parser.add_argument("--network-interface", default=env.get(naming.ENV_NETWORK_INTERFACE) or None)
    parser.add_argument("--ssh-timeout", default=env.get(naming.ENV_SSH_TIMEOUT) or "120",
                        help="how long to wait for every worker's sshd (seconds, or 90s, 2m)")
    parser.add_argument("--ssh-delay", default="2", help="pause between two ssh attempts to one worker")
    parser.add_argument("--ssh-connect-timeout", default="10", help="bound of one ssh attempt")
    parser.add_argument("--start-timeout", default=env.get(naming.ENV_START_TIMEOUT) or "120",
                        help="horovodrun's --start-timeout")
    parser.add_argument("--preflight", action=argparse.BooleanOptionalAction,
                        default=_env_bool(env, naming.ENV_PREFLIGHT),
                        help="run the pre-flight all-reduce check before the command (default: off)")
    parser.add_argument("--min-busbw", type=float, metavar="GBPS",
                        default=_env_float(env, naming.ENV_MIN_BUSBW),
                        help="fail if the check's bus bandwidth is below this (GB/s); turns the check on")
    parser.add_argument("--preflight-timeout", default="120", help="the check's time limit, Horovod's start "
                        "included")
    parser.add_argument("--preflight-sizes", default="1M,16M,64M", help="the check's all-reduce sizes")
    parser.add_argument("--hostfile-wait", default=env.get(naming.ENV_HOSTFILE_WAIT) or "0",
                        help="wait this long for the manager to write the workers into the hostfile (a gang "
                             "created at once); 0: it is complete when the chief starts")
    parser.add_argument("--fabric", choices=fabric.KINDS, default=env.get(naming.ENV_FABRIC) or None,
                        help="the fabric the pods cross nodes over: the pre-flight fails a pod whose NCCL "
                             "does not use it")
    parser.add_argument("--node-name", default=env.get(naming.ENV_NODE_NAME) or "",
                        help="this pod's node, which the pre-flight names when it blames this pod")
    relaunch.add_arguments(parser, env)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help=f"the training command (after `--`); default: {shlex.join(DEFAULT_COMMAND)}")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        if exit_.code in (0, None):
            raise
        raise InvalidInput("launcher arguments: see the usage above") from None
    command = tuple(args.command[1:] if args.command[:1] == ["--"] else args.command) or DEFAULT_COMMAND
    try:
        [allreduce.parse_size(size) for size in args.preflight_sizes.split(",")]
    except ValueError as err:
        raise InvalidInput(f"pre-flight sizes: {err}") from None
    return Settings(
        hostfile=args.hostfile, identity_file=args.identity_file, ssh_port=args.ssh_port, pod_ip=args.pod_ip,
        slots=args.slots, num_processes=args.num_processes, transport=args.transport,
        network_interface=args.network_interface,
        ssh_timeout=parse_duration(args.ssh_timeout, name="ssh timeout"),
        ssh_delay=parse_duration(args.ssh_delay, name="ssh delay"),
        ssh_connect_timeout=parse_duration(args.ssh_connect_timeout, name="ssh connect timeout"),
        start_timeout=parse_duration(args.start_timeout, name="start timeout"), command=command,
        preflight=bool(args.preflight or args.min_busbw is not None), min_busbw=args.min_busbw,
        preflight_timeout=parse_duration(args.preflight_timeout, name="pre-flight timeout"),
        preflight_sizes=args.preflight_sizes, fabric=args.fabric, node_name=args.node_name,
        recovery=relaunch.settings_from(args),
        hostfile_wait=parse_duration(args.hostfile_wait, name="hostfile wait"),
    )
