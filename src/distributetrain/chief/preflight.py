"""The launcher's side of the pre-flight all-reduce check: run allreduce.py on every rank under horovodrun,
bounded in time, echo its output into the chief's log, log the bandwidths and fail fast (PreflightFailed,
exit 76) naming the pod to blame when it hung, failed or measured below --min-busbw.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from types import FrameType

from distributetrain.chief import allreduce
from distributetrain.errors import PreflightFailed
from distributetrain.hostfile import HostSlots

log = logging.getLogger("distributetrain.chief.launcher")
KILL_GRACE = 10.0


def command(hosts: Sequence[HostSlots], *, sizes: str, iterations: int) -> list[str]:
    """What every rank runs: this Python (the same path in every pod of the image) and allreduce.py."""
    return [sys.executable, "-m", "distributetrain.chief.allreduce", "--hosts",
            ",".join(f"{h.host}:{h.slots}" for h in hosts), "--sizes", sizes, "--iterations", str(iterations)]


def run(argv: Sequence[str], env: Mapping[str, str], *, hosts: Sequence[HostSlots], ranks: int,
        min_busbw: float | None, timeout: float) -> allreduce.Report:
    """Run the sweep (`argv`: horovodrun with `command`); raise PreflightFailed naming the pod to blame."""
    started = time.monotonic()
    log.info("pre-flight all-reduce check over %d ranks (at most %gs; --no-preflight skips it)", ranks,
             timeout)
    code, lines, timed_out = _bounded(argv, env, timeout)
    report = allreduce.read(lines)
    for text in allreduce.summary(report):
        log.info("%s", text)
    why = allreduce.verdict(report, hosts=hosts, ranks=ranks, min_busbw=min_busbw, timed_out=timed_out,
                            exit_code=code)
    log.info("pre-flight took %.1fs", time.monotonic() - started)
    if why:
        raise PreflightFailed(f"{why}; the training was not started")
    return report


def _bounded(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, list[str], bool]:
    """Run `argv`, echoing its output; after `timeout` stop it (SIGTERM: horovodrun stops its ranks; then
    SIGKILL of its whole process group). Returns its exit code, its lines and whether it timed out."""
    lines: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                          env=dict(env), start_new_session=True) as proc:

        def echo() -> None:
            assert proc.stdout is not None
            for text in proc.stdout:
                sys.stdout.write(text)
                sys.stdout.flush()
                lines.append(text)

        def forward(signum: int, _frame: FrameType | None) -> None:
            proc.send_signal(signum)

        reader = threading.Thread(target=echo, daemon=True)
        reader.start()
        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        timed_out = False
        try:
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    code = proc.wait(KILL_GRACE)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    code = proc.wait()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        reader.join(KILL_GRACE)
    return code, lines, timed_out


def _signal_group(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, number)
