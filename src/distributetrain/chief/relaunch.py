"""Restart jobs, in the chief: after a failed training, tell a lost worker from the training's own failure,
and wait for the manager's replacements before the launcher relaunches from the latest checkpoint.

Elastic jobs too, for the one loss elastic Horovod cannot absorb: a worker lost before the first ring forms
(during its rendezvous: Gloo's "Wait timeout after 30 sec", then "failure count == N -> stop running") ends
horovodrun although the manager replaces the worker within seconds. Their launcher relaunches, at most
ELASTIC_RELAUNCHES times, as soon as the hostfile holds at least the job's minimum, all answering ssh; Horovod
then grows to full size by itself as replacements join.

A worker was lost when the hostfile ConfigMap changed since the launch (the manager removed it) or when one
of its workers no longer accepts ssh; otherwise every worker still answers, the failure is the training's
own, and the launcher exits with its code as a job without --restarts would. After a loss the launcher waits
for a hostfile that differs from the failed launch's, holds the job's every process, and whose workers all
accept ssh; the manager writes it once the replacements are Ready (manager/keeper.py).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from distributetrain import hostfile, naming
from distributetrain.chief import ssh
from distributetrain.errors import InvalidInput, SshUnreachable
from distributetrain.hostfile import HostSlots
from distributetrain.request import fieldparsers

log = logging.getLogger("distributetrain.chief.launcher")

PROBE_TIMEOUT = 5.0  # one ssh attempt to a worker that should be there: a lost pod does not answer at all
ELASTIC_RELAUNCHES = 3
POLL = 1.0


@dataclass(frozen=True)
class RecoverySettings:
    """The chief's launcher settings of a job that survives lost workers (its DT_* variables, or flags)."""

    min_processes: int | None = None   # elastic: horovodrun --min-np (None: not elastic)
    max_processes: int | None = None   # elastic: horovodrun --max-np (None: the job's processes)
    elastic_timeout: float = 600.0     # elastic: how long Horovod waits for its minimum
    restarts: int = 0                  # restart job: relaunches after a lost worker
    restart_wait: float = 780.0        # restart job: how long to wait for the manager's replacements


def add_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """The launcher's flags of RecoverySettings, defaulting to the chief's environment."""
    def number(key: str) -> int | None:
        raw = env.get(key, "")
        if raw and not raw.isdigit():
            raise InvalidInput(f"{key}: {raw!r} is not a whole number")
        return int(raw) if raw else None

    parser.add_argument("--min-processes", type=int, default=number(naming.ENV_MIN_PROCESSES),
                        help="elastic Horovod: the fewest processes to train on (horovodrun --min-np)")
    parser.add_argument("--max-processes", type=int, default=number(naming.ENV_MAX_PROCESSES),
                        help="elastic: the most processes (horovodrun --max-np; default: --num-processes)")
    parser.add_argument("--elastic-timeout", default=env.get(naming.ENV_ELASTIC_TIMEOUT) or "600",
                        help="elastic: how long Horovod waits for its minimum (horovodrun --elastic-timeout)")
    parser.add_argument("--restarts", type=int, default=number(naming.ENV_RESTARTS) or 0,
                        help="relaunch a training whose worker was lost up to this many times")
    parser.add_argument("--restart-wait", default=env.get(naming.ENV_RESTART_WAIT) or "780",
                        help="how long to wait for the manager's replacement workers before a relaunch")


def settings_from(args: argparse.Namespace) -> RecoverySettings:
    def seconds(value: str, name: str) -> float:
        try:
            return fieldparsers.parse_duration(value)
        except ValueError as err:
            raise InvalidInput(f"{name}: {err}") from None

    return RecoverySettings(min_processes=args.min_processes, max_processes=args.max_processes,
                            elastic_timeout=seconds(args.elastic_timeout, "elastic timeout"),
                            restarts=args.restarts, restart_wait=seconds(args.restart_wait, "restart wait"))


def read(path: Path) -> tuple[str, list[HostSlots]]:
    """The hostfile's text and its workers; a missing file is no workers."""
    if not path.exists():
        return "", []
    text = path.read_text()
    try:
        return text, hostfile.parse(text)
    except InvalidInput as err:
        raise InvalidInput(f"{path}: {err}") from None


class Relauncher:
    """What the launcher of a restart job does between two launches."""

    def __init__(self, *, hostfile_path: Path, ssh_port: int, identity_file: Path, user: str,
                 chief: HostSlots, processes: int, restarts: int, wait: float, minimum: int | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                 ) -> None:
        """`minimum`: the fewest processes a relaunch may start with (elastic: --min-np); default: every one
        of `processes` (a restart job relaunches at full size)."""
        self.path, self.port, self.identity, self.user = hostfile_path, ssh_port, identity_file, user
        self.chief, self.processes, self.restarts, self.wait = chief, processes, restarts, wait
        self.minimum = processes if minimum is None else minimum
        self._clock, self._sleep = clock, sleep

    def run(self, launch: Callable[[Sequence[HostSlots]], int], env: dict[str, str], *, launched: str,
            workers: Sequence[HostSlots]) -> int:
        """Launch (`launch(hosts)` returns the training's exit code); after a failure that lost a worker, wait
        for its replacement and launch again with Train.py resuming (DT_RESUME in `env`), at most `restarts`
        times. Returns the last launch's exit code."""
        relaunches = 0
        while True:
            result = launch(self._hosts(workers))
            if result == 0 or relaunches >= self.restarts:
                return result
            why = self.worker_lost(launched, workers)
            if why is None:
                log.error("every worker still accepts ssh: the training failed on its own; not relaunching")
                return result
            relaunches += 1
            log.warning("%s: waiting up to %gs for the manager's replacement (relaunch %d of %d)", why,
                        self.wait, relaunches, self.restarts)
            replaced = self.replacements(launched)
            if replaced is None:
                log.error("no complete hostfile within %gs: giving up with exit code %d", self.wait, result)
                return result
            launched, workers = replaced
            env[naming.ENV_RESUME] = "1"
            log.info("relaunching the training, from its latest checkpoint if it keeps one (relaunch %d of "
                     "%d)", relaunches, self.restarts)

    def _hosts(self, workers: Sequence[HostSlots]) -> list[HostSlots]:
        return ([self.chief] if self.chief.slots else []) + list(workers)

    def unreachable(self, workers: Sequence[HostSlots], *, timeout: float = PROBE_TIMEOUT) -> list[str]:
        """The workers that do not accept the job key now (one attempt each, in parallel)."""
        def probe(worker: HostSlots) -> str | None:
            try:
                ssh.wait_until_accepts(worker.host, self.port, self.identity, attempts=1, delay=0.0,
                                       timeout=timeout, user=self.user)
            except SshUnreachable:
                return worker.host
            return None

        if not workers:
            return []
        with ThreadPoolExecutor(max_workers=min(32, len(workers))) as pool:
            return [host for host in pool.map(probe, workers) if host is not None]

    def worker_lost(self, launched: str, workers: Sequence[HostSlots]) -> str | None:
        """Why the failed training counts as a lost worker, None when it was the training's own failure."""
        text, _ = read(self.path)
        if text != launched:
            return "the manager changed the hostfile (a worker was lost)"
        gone = self.unreachable(workers)
        if gone:
            return f"worker(s) {', '.join(gone)} no longer accept ssh"
        return None

    def replacements(self, launched: str) -> tuple[str, list[HostSlots]] | None:
        """Wait (up to `wait` seconds) for a hostfile unlike the failed launch's, holding at least `minimum`
        processes, whose workers all accept ssh; its text and workers, or None when none came in time."""
        until = self._clock() + self.wait
        last = None
        while self._clock() < until:
            text, workers = read(self.path)
            total = self.chief.slots + hostfile.total_slots(workers)
            if text != launched and total >= self.minimum:
                if text != last:
                    log.info("hostfile updated: %s", ", ".join(f"{w.host} slots={w.slots}" for w in workers))
                    last = text
                if not self.unreachable(workers, timeout=10.0):
                    return text, workers
            self._sleep(POLL)
        return None
