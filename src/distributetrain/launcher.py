"""The launcher: runs inside the chief pod, starts Horovod over the workers, exits with the training's code.

Flow: read the workers' hostfile (the job's ConfigMap) -> confirm that every worker's sshd accepts the job
key (ssh.py; names the worker that never answered, exit 73) -> put the chief's own pod IP and GPU share
first in the final hostfile, so rank 0 runs here and its log is the chief's log -> run horovodrun with
the user's command, streaming its output -> exit with the training's exit code.

The pure parts (parsing, merging, the horovodrun argv, reading horovodrun's failure report) are separate
functions with unit tests; `main` does the I/O.
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from distributetrain import allreduce, allreducecheck, fieldparsers, hostfile, naming, ssh
from distributetrain.errors import DistributeTrainError, InvalidInput, SshUnreachable
from distributetrain.hostfile import HostSlots
from distributetrain.naming import DEFAULT_COMMAND, TRANSPORTS

log = logging.getLogger("distributetrain.launcher")


@dataclass(frozen=True)
class Failure:
    """What horovodrun reports when a rank ends non-zero: the first rank to fail and its exit code."""

    rank: int
    exit_code: int


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


def render_hostfile(hosts: Iterable[HostSlots]) -> str:
    """In the order given, not hostfile.render's sorted order: the chief's line must stay first."""
    return "".join(f"{h.host} slots={h.slots}\n" for h in hosts)


def with_chief(workers: Sequence[HostSlots], *, pod_ip: str, slots: int) -> tuple[HostSlots, ...]:
    """The final hostfile: the chief first (rank 0 and its checkpoints live in the chief), then workers."""
    if not pod_ip:
        raise InvalidInput(
            f"chief pod IP: empty; set {naming.ENV_POD_IP} from the downward API (fieldRef status.podIP)"
        )
    if slots < 0:
        raise InvalidInput(f"chief slots: {slots} asked, 0 or more are needed ({naming.ENV_SLOTS})")
    if any(w.host == pod_ip for w in workers):
        raise InvalidInput(f"chief pod IP {pod_ip} is also a worker in the hostfile; list each pod once")
    hosts = ((HostSlots(pod_ip, slots),) if slots else ()) + tuple(workers)
    if not hosts:
        raise InvalidInput("hostfile: no workers and the chief has 0 slots; nothing to train on")
    return hosts


def check_total(hosts: Sequence[HostSlots], expected: int | None) -> int:
    """The processes to start: the hostfile's slots, which must match the job's GPUs when those are known."""
    total = sum(h.slots for h in hosts)
    if expected is not None and total != expected:
        raise InvalidInput(
            f"hostfile: the chief and {len(hosts) - 1} workers have {total} slots, but the job asks for "
            f"{expected} processes ({naming.ENV_NUM_PROCESSES}); the hostfile ConfigMap does not match the "
            "job's plan: delete the job and run it again"
        )
    return total


def horovodrun_argv(
    *,
    horovodrun: str,
    num_proc: int,
    hostfile: Path,
    ssh_port: int,
    identity_file: Path,
    transport: str,
    network_interface: str | None,
    start_timeout: float,
    command: Sequence[str],
) -> list[str]:
    """The horovodrun command line. `--disable-cache`: ssh was just checked; a cached "reachable" is stale."""
    if transport not in TRANSPORTS:
        raise InvalidInput(f"transport: {transport!r} is not one of {', '.join(TRANSPORTS)}")
    if num_proc < 1:
        raise InvalidInput(f"horovod processes: {num_proc} asked, at least 1 is needed")
    if not command:
        raise InvalidInput("command: empty; give the training command after `--`")
    argv = [
        horovodrun, "-np", str(num_proc), "--hostfile", str(hostfile), "-p", str(ssh_port),
        "--ssh-identity-file", str(identity_file), f"--{transport}",
        "--start-timeout", str(max(1, round(start_timeout))), "--disable-cache",
    ]
    if network_interface:
        argv += ["--network-interface", network_interface]
    return [*argv, *command]


def rank_host(hosts: Sequence[HostSlots], rank: int) -> str | None:
    """Horovod fills hosts in hostfile order, every slot of one host before the next."""
    for h in hosts:
        if rank < h.slots:
            return h.host
        rank -= h.slots
    return None


_PROCESS_NAME = re.compile(r"Process name:\s*(\d+)")
_EXIT_CODE = re.compile(r"Exit code:\s*(-?\d+)")


def find_failure(lines: Iterable[str]) -> Failure | None:
    """horovodrun's own report of the first rank that exited non-zero, if its output holds one."""
    rank: int | None = None
    for line in lines:
        if (m := _PROCESS_NAME.search(line)) is not None:
            rank = int(m[1])
        elif rank is not None and (m := _EXIT_CODE.search(line)) is not None:
            return Failure(rank, int(m[1]))
    return None


def exit_code_for(horovodrun_code: int, failure: Failure | None) -> int:
    """The training's exit code: horovodrun itself exits 1 whatever the rank's code, so prefer its report.

    A rank killed by a signal shows as a negative code; report it as a shell would, 128 + signal.
    """
    if horovodrun_code == 0:
        return 0
    if failure is not None and failure.exit_code != 0:
        code = failure.exit_code
        return 128 - code if code < 0 else min(code, 255)
    return horovodrun_code if horovodrun_code > 0 else 128 - horovodrun_code


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
        prog="python -m distributetrain.launcher",
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
        preflight_sizes=args.preflight_sizes,
    )


def _wait_for_workers(workers: Sequence[HostSlots], settings: Settings, user: str) -> None:
    """Every worker in parallel: the wait is bounded by ssh_timeout, not ssh_timeout times the workers."""
    attempts = max(1, int(settings.ssh_timeout // max(settings.ssh_delay, 0.001)) + 1)

    def one(worker: HostSlots) -> SshUnreachable | None:
        try:
            ssh.wait_until_accepts(worker.host, settings.ssh_port, settings.identity_file, attempts=attempts,
                                   delay=settings.ssh_delay, timeout=settings.ssh_connect_timeout, user=user)
        except SshUnreachable as err:
            return err
        return None

    if not workers:
        return
    with ThreadPoolExecutor(max_workers=min(32, len(workers))) as pool:
        failures = [err for err in pool.map(one, workers) if err is not None]
    if failures:
        raise SshUnreachable(
            f"{len(failures)} of {len(workers)} workers never accepted the job key: "
            + " | ".join(str(f) for f in failures)
        )


def _ssh_wrapper(work: Path) -> Path:
    """A `ssh` first on PATH for horovodrun: its own known_hosts (pod host keys are new each job, and a
    user's ~/.ssh is not ours to write) and keepalives, so a worker whose node vanished without a TCP reset is
    noticed within ~15 s instead of hanging the whole job."""
    real = shutil.which("ssh")
    if real is None:
        raise InvalidInput("ssh: no ssh client on PATH; the base image installs openssh-client")
    config = work / "ssh_config"
    config.write_text(
        "Host *\n"
        f"  UserKnownHostsFile {work / 'known_hosts'}\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  IdentitiesOnly yes\n"
        "  BatchMode yes\n"
        "  LogLevel ERROR\n"
        "  ServerAliveInterval 5\n"
        "  ServerAliveCountMax 3\n"
    )
    bindir = work / "bin"
    bindir.mkdir()
    wrapper = bindir / "ssh"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(real)} -F {shlex.quote(str(config))} \"$@\"\n")
    wrapper.chmod(0o755)
    return bindir


def _horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if found is None:
        raise InvalidInput("horovodrun: not found next to this Python nor on PATH; is Horovod installed?")
    return found


def _stream(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, Failure | None]:
    """Run horovodrun, copy its output line by line, forward SIGTERM/SIGINT so it stops every rank."""
    tail: deque[str] = deque(maxlen=50)  # horovodrun's failure report is in its last lines
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                          env=dict(env)) as proc:

        def forward(signum: int, _frame: FrameType | None) -> None:
            proc.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                tail.append(line)
            code = proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    return code, find_failure(tail)


def run(settings: Settings, env: Mapping[str, str]) -> int:
    if settings.hostfile.exists():
        try:
            workers: Sequence[HostSlots] = hostfile.parse(settings.hostfile.read_text())
        except InvalidInput as err:
            raise InvalidInput(f"{settings.hostfile}: {err}") from None
    else:
        log.warning("no hostfile at %s: training on this pod only", settings.hostfile)
        workers = ()
    hosts = with_chief(workers, pod_ip=settings.pod_ip, slots=settings.slots)
    num_proc = check_total(hosts, settings.num_processes)
    user = pwd.getpwuid(os.getuid()).pw_name
    log.info("waiting for %d workers' sshd on port %d: %s", len(workers), settings.ssh_port,
             ", ".join(w.host for w in workers) or "none")
    _wait_for_workers(workers, settings, user)
    with tempfile.TemporaryDirectory(prefix="distributetrain-launcher-") as tmp:
        work = Path(tmp)
        final = work / "hostfile"
        final.write_text(render_hostfile(hosts))
        argv = horovodrun_argv(
            horovodrun=_horovodrun(), num_proc=num_proc, hostfile=final, ssh_port=settings.ssh_port,
            identity_file=settings.identity_file, transport=settings.transport,
            network_interface=settings.network_interface, start_timeout=settings.start_timeout,
            command=settings.command,
        )
        child_env = dict(env)
        # TensorFlow's C++ INFO banners (oneDNN, CPU features) from every rank drown the training's own lines
        # in the manager's log; warnings and errors still show. horovodrun passes this on to every rank.
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        child_env["PATH"] = f"{_ssh_wrapper(work)}{os.pathsep}{env.get('PATH', os.defpath)}"
        log.info("hostfile: %s", ", ".join(f"{h.host} slots={h.slots}" for h in hosts))
        if settings.preflight:
            check = horovodrun_argv(
                horovodrun=_horovodrun(), num_proc=num_proc, hostfile=final, ssh_port=settings.ssh_port,
                identity_file=settings.identity_file, transport=settings.transport,
                network_interface=settings.network_interface, start_timeout=settings.start_timeout,
                command=allreducecheck.command(hosts, sizes=settings.preflight_sizes, iterations=5))
            allreducecheck.run(check, child_env, hosts=hosts, ranks=num_proc, min_busbw=settings.min_busbw,
                               timeout=settings.preflight_timeout)
        log.info("starting: %s", shlex.join(argv))
        code, failure = _stream(argv, child_env)
    result = exit_code_for(code, failure)
    if failure is not None:
        log.error("rank %d on %s exited with %d; the training failed with exit code %d", failure.rank,
                  rank_host(hosts, failure.rank) or "?", failure.exit_code, result)
    elif result:
        log.error("horovodrun exited with %d", result)
    else:
        log.info("training finished: %d processes on %d pods, exit code 0", num_proc, len(hosts))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="launcher %(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
        return run(settings, os.environ)
    except DistributeTrainError as err:
        log.error("%s", err)
        return err.exit_code
    except OSError as err:
        log.error("%s", err)
        return 1


if __name__ == "__main__":
    sys.exit(main())
