"""The launcher: runs inside the chief pod, starts Horovod over the workers, exits with the training's code.

Flow: read the workers' hostfile (the job's ConfigMap) -> confirm that every worker's sshd accepts the job
key (ssh.py; names the worker that never answered, exit 73) -> put the chief's own pod IP and GPU share
first in the final hostfile, so rank 0 runs here and its log is the chief's log -> run horovodrun with
the user's command, streaming its output -> exit with the training's exit code.

A gang created at once (DT_HOSTFILE_WAIT: for a node pool's scale-up or a Kueue queue) starts its chief
before its workers' addresses are known: the launcher first waits for the manager to write them into the
hostfile (`wait_for_hostfile`).

Elastic jobs (DT_MIN_PROCESSES): horovodrun runs Horovod elastic, its hosts from discovery.py's script over
the hostfile the manager keeps current. Restart jobs (DT_RESTARTS): a training that failed because a worker
was lost is relaunched once the manager replaced it (relaunch.py), resuming from its checkpoint.

Its settings are parsed in settings.py. The pure parts (merging, the horovodrun argv, reading
horovodrun's failure report) are separate functions with unit tests; `main` does the I/O.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from distributetrain import naming
from distributetrain.chief import discovery, horovodrun, preflight, relaunch, ssh
from distributetrain.chief.discovery import Elastic
from distributetrain.chief.settings import Settings, parse_settings
from distributetrain.errors import DistributeTrainError, InvalidInput, ScheduleTimeout, SshUnreachable
from distributetrain.hostfile import HostSlots
from distributetrain.naming import TRANSPORTS
from distributetrain.observe import chieflog

log = logging.getLogger("distributetrain.chief.launcher")


@dataclass(frozen=True)
class Failure:
    """What horovodrun reports when a rank ends non-zero: the first rank to fail and its exit code."""

    rank: int
    exit_code: int


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
    horovodrun: Sequence[str],
    num_proc: int,
    hostfile: Path,
    ssh_port: int,
    identity_file: Path,
    transport: str,
    network_interface: str | None,
    start_timeout: float,
    command: Sequence[str],
    elastic: Elastic | None = None,
) -> list[str]:
    """The horovodrun command line. `--disable-cache`: ssh was just checked; a cached "reachable" is stale.
    Elastic: the discovery script and --min-np/--max-np instead of the hostfile."""
    if transport not in TRANSPORTS:
        raise InvalidInput(f"transport: {transport!r} is not one of {', '.join(TRANSPORTS)}")
    if num_proc < 1:
        raise InvalidInput(f"horovod processes: {num_proc} asked, at least 1 is needed")
    if not command:
        raise InvalidInput("command: empty; give the training command after `--`")
    hosts = ["--hostfile", str(hostfile)] if elastic is None else discovery.horovodrun_args(elastic)
    argv = [
        *horovodrun, "-np", str(num_proc), *hosts, "-p", str(ssh_port),
        "--ssh-identity-file", str(identity_file), f"--{transport}",
        "--start-timeout", str(max(1, round(start_timeout))), "--disable-cache",
    ]
    if network_interface:
        argv += ["--network-interface", network_interface]
    return [*argv, *command]


def launch_interface(explicit: str | None, own: str | None, *, workers: int, elastic: bool) -> str | None:
    """The --network-interface horovodrun is given: the job's own, else this pod's (`own`). None for a
    static job with no worker: every rank is on this pod, and horovodrun's all-local path keeps only
    interfaces holding 127.0.0.1 (runner/driver/driver_service.py get_local_interfaces, Horovod 0.28.1) -
    told eth0 it fails with "No interface is found for address 127.0.0.1."; untold, the ranks use the
    loopback as they should."""
    if workers == 0 and not elastic:
        return None
    return explicit or own


# run on each rank, after horovodrun's `env` gave it the chief's variables: a rank on a worker loads that
# worker's own (its pod template's; the worker's entrypoint wrote them, sshd names the file)
HOST_ENV_SHIM = ('if [ -n "${%s:-}" ] && [ -r "$%s" ]; then . "$%s"; fi; exec "$@"'
                 % ((naming.ENV_HOST_ENV_FILE,) * 3))


def with_host_env(command: Sequence[str]) -> list[str]:
    """The training command as each rank runs it: its host's own environment loaded over the chief's."""
    return ["sh", "-c", HOST_ENV_SHIM, "distributetrain-rank", *command]


def read_nodes(path: Path) -> dict[str, str]:
    """The hostfile ConfigMap's `IP NODE` lines (the manager writes them): each worker's node; none when the
    file is not there (a manager of an earlier version)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    pairs = (line.split() for line in text.splitlines())
    return {words[0]: words[1] for words in pairs if len(words) == 2}


rank_host = chieflog.rank_host  # the manager maps a rank to its pod the same way


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


def wait_for_hostfile(settings: Settings, *, clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep, every: float = 1.0) -> None:
    """Until the hostfile and this pod hold every process of the job: the manager writes the workers once
    they run, and the kubelet brings the mounted ConfigMap up to date within its sync period."""
    if settings.hostfile_wait <= 0 or settings.num_processes is None:
        return
    until = clock() + settings.hostfile_wait
    said = False
    while True:
        _, workers = relaunch.read(settings.hostfile)
        held = settings.slots + sum(w.slots for w in workers)
        if held >= settings.num_processes:
            if said:
                hosts = ", ".join(w.host for w in workers)
                log.info("the hostfile lists %d worker(s): %s", len(workers), hosts)
            return
        if clock() >= until:
            raise ScheduleTimeout(f"hostfile {settings.hostfile}: the workers' addresses were not written "
                                  f"within {settings.hostfile_wait:g}s ({held} of {settings.num_processes} "
                                  "processes listed); the manager writes them once every worker runs")
        if not said:
            log.info("waiting up to %.0fs for the manager to write the workers into %s: the gang was created "
                     "at once, their addresses are known once they run", settings.hostfile_wait,
                     settings.hostfile)
            said = True
        sleep(every)


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


def _ssh_wrapper(work: Path, *, aliases: bool = False) -> Path:
    """A `ssh` first on PATH for horovodrun: its own known_hosts (pod host keys are new each job, and a
    user's ~/.ssh is not ours to write) and keepalives, so a worker whose node vanished without a TCP reset is
    noticed within ~15 s instead of hanging the whole job."""
    real = shutil.which("ssh")
    if real is None:
        raise InvalidInput("ssh: no ssh client on PATH; the base image installs openssh-client")
    config = work / "ssh_config"
    config.write_text(
        (f"Include {work / discovery.ALIASES_FILE}\n" if aliases else "")  # elastic: pod names -> addresses
        + "Host *\n"
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


def horovodrun_command(env: Mapping[str, str], *, python: str, console_script: str,
                       horovod_version: str | None) -> list[str]:
    """How to start horovodrun: its console script, or, when the image vouches for Horovod's build
    (horovodrun.vouched), its own entry point without the ~1.5 s build check it repeats at every launch."""
    if horovodrun.vouched(env, horovod_version=horovod_version):
        return [python, "-m", horovodrun.__name__]
    return [console_script]


def _horovodrun(env: Mapping[str, str]) -> list[str]:
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if found is None:
        raise InvalidInput("horovodrun: not found next to this Python nor on PATH; is Horovod installed?")
    return horovodrun_command(env, python=sys.executable, console_script=found,
                              horovod_version=horovodrun.installed_horovod())


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
    wait_for_hostfile(settings)
    if not settings.hostfile.exists():
        log.warning("no hostfile at %s: training on this pod only", settings.hostfile)
    launched, workers = relaunch.read(settings.hostfile)
    hosts = with_chief(workers, pod_ip=settings.pod_ip, slots=settings.slots)
    num_proc = check_total(hosts, settings.num_processes)
    # USER first: under a UID with no account (OpenShift) the entrypoint names it and loads nss_wrapper
    user = getpass.getuser()
    log.info("waiting for %d workers' sshd on port %d: %s", len(workers), settings.ssh_port,
             ", ".join(w.host for w in workers) or "none")
    _wait_for_workers(workers, settings, user)
    recovery = settings.recovery
    with tempfile.TemporaryDirectory(prefix="distributetrain-launcher-") as tmp:
        work = Path(tmp)
        final = work / "hostfile"
        final.write_text(render_hostfile(hosts))
        elastic = None if recovery.min_processes is None else discovery.setup(
            work, python=sys.executable, hostfile_path=settings.hostfile,
            chief=HostSlots(settings.pod_ip, settings.slots), min_processes=recovery.min_processes,
            max_processes=recovery.max_processes or num_proc, timeout=recovery.elastic_timeout)
        # Told the interface, horovodrun skips its probe of every host's interfaces (a task service started
        # over ssh on each, then each probing the others): pods get their network on one interface name (the
        # CNI's eth0), so the chief's own is every pod's. The probe still runs if this pod's address is on no
        # interface found here.
        interface = launch_interface(settings.network_interface, elastic.interface if elastic else
                                     discovery.interface_of(settings.pod_ip), workers=len(workers),
                                     elastic=elastic is not None)
        child_env = dict(env)
        # TensorFlow's C++ INFO banners (oneDNN, CPU features) from every rank drown the training's own lines
        # in the manager's log; warnings and errors still show. horovodrun passes this on to every rank.
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        bindir = _ssh_wrapper(work, aliases=elastic is not None)
        child_env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', os.defpath)}"
        if settings.preflight:
            kind = preflight.form(fabric=settings.fabric, transport=settings.transport)
            checked = preflight.ranks_of(hosts, kind)
            check_file = work / "preflight-hostfile"
            check_file.write_text(render_hostfile(checked))
            ranks = sum(h.slots for h in checked)
            log.info("%s", chieflog.hostfile(checked))
            check = horovodrun_argv(
                horovodrun=_horovodrun(env), num_proc=ranks, hostfile=check_file, ssh_port=settings.ssh_port,
                identity_file=settings.identity_file, transport=settings.transport,
                network_interface=interface, start_timeout=settings.start_timeout,
                command=preflight.command(checked, sizes=settings.preflight_sizes, kind=kind,
                                          min_busbw=settings.min_busbw))
            nodes = read_nodes(settings.hostfile.parent / naming.NODES_KEY)
            if settings.node_name:
                nodes[settings.pod_ip] = settings.node_name
            preflight.run(check, child_env, hosts=checked, ranks=ranks, min_busbw=settings.min_busbw,
                          timeout=settings.preflight_timeout, fabric=settings.fabric, nodes=nodes)
        if elastic is not None:
            child_env[naming.ENV_ELASTIC] = "1"  # Train.py's elastic form

        def launch(hosts: Sequence[HostSlots]) -> int:
            final.write_text(render_hostfile(hosts))
            argv = horovodrun_argv(
                horovodrun=_horovodrun(env), num_proc=num_proc, hostfile=final, ssh_port=settings.ssh_port,
                identity_file=settings.identity_file, transport=settings.transport,
                network_interface=interface, start_timeout=settings.start_timeout,
                command=with_host_env(settings.command), elastic=elastic,
            )
            log.info("%s", chieflog.hostfile(hosts))
            log.info("starting: %s", shlex.join(argv))
            return _report(*_stream(argv, child_env), hosts, num_proc)

        if elastic is not None:  # a loss before Horovod's first ring forms is relaunched (relaunch.py)
            relaunches, wait = relaunch.ELASTIC_RELAUNCHES, recovery.elastic_timeout
            minimum: int | None = elastic.min_processes
        else:
            relaunches, wait, minimum = recovery.restarts, recovery.restart_wait, None
        if not relaunches:
            return launch(hosts)
        relauncher = relaunch.Relauncher(
            hostfile_path=settings.hostfile, ssh_port=settings.ssh_port, identity_file=settings.identity_file,
            user=user, chief=HostSlots(settings.pod_ip, settings.slots), processes=num_proc,
            restarts=relaunches, wait=wait, minimum=minimum)
        return relauncher.run(launch, child_env, launched=launched, workers=workers)


def _report(code: int, failure: Failure | None, hosts: Sequence[HostSlots], num_proc: int) -> int:
    """Log how horovodrun ended; return the training's exit code."""
    result = exit_code_for(code, failure)
    if failure is not None:
        failed = chieflog.RankFailed(failure.rank, rank_host(hosts, failure.rank) or "?", failure.exit_code)
        log.error("%s", chieflog.rank_failed(failed, result=result))
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
