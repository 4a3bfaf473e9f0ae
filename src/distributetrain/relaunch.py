"""Restart jobs, in the chief: after a failed training, tell a lost worker from the training's own failure,
and wait for the manager's replacements before the launcher relaunches from the latest checkpoint.

A worker was lost when the hostfile ConfigMap changed since the launch (the manager removed it) or when one
of its workers no longer accepts ssh; otherwise every worker still answers, the failure is the training's
own, and the launcher exits with its code as a job without --restarts would. After a loss the launcher waits
for a hostfile that differs from the failed launch's, holds the job's every process, and whose workers all
accept ssh; the manager writes it once the replacements are Ready (elastic.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from distributetrain import hostfile, naming, ssh
from distributetrain.errors import InvalidInput, SshUnreachable
from distributetrain.hostfile import HostSlots

log = logging.getLogger("distributetrain.launcher")

PROBE_TIMEOUT = 5.0  # one ssh attempt to a worker that should be there: a lost pod does not answer at all
POLL = 1.0


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
                 chief: HostSlots, processes: int, restarts: int, wait: float,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                 ) -> None:
        self.path, self.port, self.identity, self.user = hostfile_path, ssh_port, identity_file, user
        self.chief, self.processes, self.restarts, self.wait = chief, processes, restarts, wait
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
            log.info("relaunching the training from its latest checkpoint (relaunch %d of %d)", relaunches,
                     self.restarts)

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
        """Wait (up to `wait` seconds) for a hostfile unlike the failed launch's, holding every process of
        the job, whose workers all accept ssh; its text and workers, or None when none came in time."""
        until = self._clock() + self.wait
        last = None
        while self._clock() < until:
            text, workers = read(self.path)
            total = self.chief.slots + hostfile.total_slots(workers)
            if text != launched and total == self.processes:
                if text != last:
                    log.info("hostfile updated: %s", ", ".join(f"{w.host} slots={w.slots}" for w in workers))
                    last = text
                if not self.unreachable(workers, timeout=10.0):
                    return text, workers
            self._sleep(POLL)
        return None
