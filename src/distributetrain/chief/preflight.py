"""The launcher's side of the pre-flight all-reduce check: run allreduce.py on every rank under horovodrun,
bounded in time, echo its output into the chief's log, log the bandwidths (and the network NCCL chose on each
pod) and fail fast (PreflightFailed, exit 76) naming the pod to blame, and its node, when it hung, failed,
crossed nodes off the job's fabric or measured below --min-busbw. The ranks run it with NCCL_DEBUG=INFO
whatever the pod template says: NCCL's network lines are what proves the fabric.
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
from distributetrain.observe import chieflog

log = logging.getLogger("distributetrain.chief.launcher")
KILL_GRACE = 10.0
# NCCL's network lines (chieflog) must be in the check's output, whatever the pod template set
NCCL_LOG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


# the check's two forms: TCP ring all-reduces with numpy (tcpcheck.py, the default: its ranks start in about a
# second), or Horovod's own all-reduces with TensorFlow (allreduce.py: what proves NCCL's fabric, and what an
# MPI launch runs, which has no rendezvous store for tcpcheck's ranks to meet at)
TCP, HOROVOD = "tcp", "horovod"
_MODULES = {TCP: "distributetrain.chief.tcpcheck", HOROVOD: "distributetrain.chief.allreduce"}
_ITERATIONS = {TCP: 2, HOROVOD: 5}  # each after a warm-up; TCP: as cheap as a measure stays


def form(*, fabric: str | None, transport: str) -> str:
    """Which check runs: Horovod's when NCCL must be proven on a fabric or horovodrun launches with MPI,
    the TCP one otherwise (Gloo's transport, and the pod network NCCL's sockets would cross)."""
    return HOROVOD if fabric or transport != "gloo" else TCP


def ranks_of(hosts: Sequence[HostSlots], kind: str) -> list[HostSlots]:
    """Where the check's ranks run: the TCP form measures links between pods, one rank per pod (its ranks'
    start is most of its cost: one ssh and one Python per rank); the Horovod form runs every rank of the job,
    so that each one's NCCL says the network it chose."""
    return [HostSlots(h.host, 1) for h in hosts if h.slots] if kind == TCP else list(hosts)


def command(hosts: Sequence[HostSlots], *, sizes: str, kind: str = HOROVOD,
            min_busbw: float | None = None) -> list[str]:
    """What every rank runs: this Python (the same path in every pod of the image) and the check's module."""
    floor = [] if min_busbw is None else ["--min-busbw", f"{min_busbw:g}"]
    return [sys.executable, "-m", _MODULES[kind], "--hosts", ",".join(f"{h.host}:{h.slots}" for h in hosts),
            "--sizes", sizes, "--iterations", str(_ITERATIONS[kind]), *floor]


def run(argv: Sequence[str], env: Mapping[str, str], *, hosts: Sequence[HostSlots], ranks: int,
        min_busbw: float | None, timeout: float, fabric: str | None = None,
        nodes: Mapping[str, str] | None = None) -> allreduce.Report:
    """Run the sweep (`argv`: horovodrun with `command`); raise PreflightFailed naming the pod to blame and
    its node (`nodes`: pod address -> node). `fabric` (efa, ib): every pod's NCCL must cross nodes over it."""
    nodes = nodes or {}
    started, launched = time.monotonic(), time.time()
    log.info("pre-flight all-reduce check over %d ranks (at most %gs; --no-preflight skips it)%s", ranks,
             timeout, f"; NCCL must use the fabric {fabric}" if fabric else "")
    code, lines, timed_out = _bounded(argv, {**env, **NCCL_LOG_ENV}, timeout)
    report = allreduce.read(lines)
    for text in allreduce.summary(report):
        log.info("%s", text)
    networks = chieflog.read_networks(lines)
    if networks:
        log.info("pre-flight NCCL networks: %s", ", ".join(f"{host} {net.text()}"
                                                            for host, net in sorted(networks.items())))

    def judged(floor: float | None) -> allreduce.Blame | None:
        return allreduce.blame(report, hosts=hosts, ranks=ranks, min_busbw=floor, timed_out=timed_out,
                               exit_code=code, nodes=nodes)

    # a run that broke first, then the fabric, then the floor: the first failure is the one to act on
    blame = judged(None)
    if blame is None and fabric:
        blame = allreduce.fabric_verdict(report, networks, hosts=hosts, fabric=fabric, nodes=nodes)
    if blame is None:
        blame = judged(min_busbw)
    took = allreduce.phases(report, launched=launched)
    if took:
        log.info("%s", took)
    log.info("pre-flight took %.1fs", time.monotonic() - started)
    if blame is not None:
        if blame.nodes or blame.pods:
            log.error("%s", chieflog.preflight_blamed(chieflog.PreflightBlame(blame.nodes, blame.pods)))
        raise PreflightFailed(f"{blame.why}; the training was not started")
    log.info("%s", chieflog.PREFLIGHT_PASSED)
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
