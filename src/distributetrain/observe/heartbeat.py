"""Per-rank heartbeats: every training process says, at a low and bounded rate, how many steps it has done
and how long they took, so the manager can tell a rank that stopped making progress, or one slower than the
others (manager/watchdog.py).

The line is the progress line (progress.py) with a `rank=` field:

    dt-progress rank=3 step=1200 step_s=0.0412 compute_s=0.0213
    dt-progress rank=3 step=1500 done=1

Each rank also says once, when its training starts (and after each elastic re-formation), which host it runs
on - its pod's hostname, the pod's name - so the manager finds its pod however Horovod numbered the ranks:

    dt-rank rank=3 host=train-worker-1

`step` is the steps (batches) this process has done since it started, `step_s` the mean seconds per step
since its previous heartbeat (absent when it did no step since), `done=1` says its training loop ended (what
follows - evaluation, saving - makes no steps and must not look like a hang). horovodrun copies every rank's
output into the chief's log (prefixed `[R]<stdout>:`), which the manager reads.

`compute_s` (optional; older scripts print none, and the manager then judges speed on `step_s`) is the mean
seconds per step this rank spent computing its own gradients - the forward and backward pass, before they
enter the all-reduce - over the same steps. Under synchronous all-reduce every rank's *wall* step time is
the same: the fast ranks wait in the all-reduce for the slow one, so `step_s` cannot tell which rank is
slow; `compute_s` can (a rank on a throttled CPU or a slow GPU computes longer, the others wait longer).

The first step is said at once, by the step itself (`dt-progress rank=3 step=1`, untimed: its time is the
start-up's): a rank frozen before its first periodic beat would otherwise be unknown to the watchdog, which
then sees only the ranks waiting for it and blames one of them - rank 0, the chief, which no restart or
replacement can remove (a worker frozen right after the first epoch, tests/reliability/test_hangs.py).

The periodic beat comes from a thread, not from the training loop: a process blocked in a collective (waiting
for a stuck peer) keeps beating with the same step count - alive, no progress - while a frozen process
(SIGSTOP, a hung kernel call) falls silent. That difference is how the watchdog tells the rank that stopped
first from the ranks that wait for it.

For a training script (base-image/Train.py has the same as a Keras callback, being self-contained):

    from distributetrain.observe.heartbeat import Heartbeat

    with Heartbeat(hvd.rank()) as beat:
        for batch in data:
            compute_s = train_step(batch)
            beat.step(compute_seconds=float(compute_s))

`step()` costs one integer add and a comparison (an add more with a compute time); the thread prints one line
every `every` seconds (DT_HEARTBEAT_SECONDS, default 10). The compute time is the script's to measure, without
waiting for the device: inside a `tf.function` step, `tf.timestamp()` before the forward pass and again once
the gradients exist, before they are all-reduced (Train.py's `TimedTape` does it for Keras; for a custom
loop, take the second stamp after `tape.gradient` and before `hvd.DistributedGradientTape`'s all-reduce, e.g.
by computing the local gradients with a plain tape and all-reducing them with `hvd.allreduce`).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from distributetrain.observe import progress

RANK_MARKER = "dt-rank"
_RANK_LINE = re.compile(rb"(?:^|[\s:])dt-rank rank=(\d{1,7}) host=([A-Za-z0-9][-A-Za-z0-9.]{0,252})\s*$")
ENV_EVERY = "DT_HEARTBEAT_SECONDS"
DEFAULT_EVERY = 10.0
STEP_SECONDS = "step_s"
COMPUTE_SECONDS = "compute_s"
DONE = "done"


@dataclass(frozen=True)
class Beat:
    """One rank's heartbeat: its steps so far, the mean step time since its last beat, whether it is done,
    and the mean time per step it computed its gradients since its last beat (None: the script says not)."""

    rank: int
    step: int
    step_seconds: float | None = None
    done: bool = False
    compute_seconds: float | None = None


def line(beat: Beat) -> str:
    """The line a rank prints (parse(line(b)) == b)."""
    extra: list[tuple[str, float]] = []
    if beat.step_seconds is not None:
        extra.append((STEP_SECONDS, beat.step_seconds))
    if beat.compute_seconds is not None:
        extra.append((COMPUTE_SECONDS, beat.compute_seconds))
    if beat.done:
        extra.append((DONE, 1.0))
    return progress.line(progress.Progress(rank=beat.rank, step=beat.step, extra=tuple(extra)))


def parse(text: bytes | str) -> Beat | None:
    """The heartbeat a chief's log line carries, or None: not a progress line, or one without rank and
    step (rank 0's job progress lines carry no rank)."""
    report = progress.parse(text)
    if report is None or report.rank is None or report.step is None:
        return None
    extra = dict(report.extra)
    return Beat(report.rank, report.step, _seconds(extra.get(STEP_SECONDS)), bool(extra.get(DONE)),
                _seconds(extra.get(COMPUTE_SECONDS)))


def _seconds(value: float | None) -> float | None:
    return value if value is not None and value >= 0 else None


def rank_line(rank: int, host: str) -> str:
    """The line that says where a rank runs."""
    return f"{RANK_MARKER} rank={rank} host={host}"


def parse_rank(text: bytes | str) -> tuple[int, str] | None:
    """The rank and host a `dt-rank` line names, or None."""
    raw = text.encode("utf-8", "replace") if isinstance(text, str) else text
    found = _RANK_LINE.search(raw.rstrip(b"\r\n"))
    return (int(found[1]), found[2].decode()) if found is not None else None


def every_from_env(env: dict[str, str] | None = None) -> float:
    """DT_HEARTBEAT_SECONDS if it is a positive number, else the default."""
    try:
        value = float((os.environ if env is None else env).get(ENV_EVERY, ""))
    except ValueError:
        return DEFAULT_EVERY
    return value if value > 0 else DEFAULT_EVERY


class Heartbeat:
    """A training process's heartbeat thread (see the module's docstring). Count steps with `step()`; `stop()`
    (or leaving the `with` block without an error) prints the last beat, marked done."""

    def __init__(self, rank: int, *, every: float | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.rank = rank
        self.every = every if every is not None else every_from_env()
        self._stream = stream
        self._clock = clock
        self._steps = 0
        self._last_steps = 0
        # (seconds, steps) computed so far: one tuple, written whole by the training loop only, so the thread
        # never reads a sum without its count; the thread keeps what it had at its last beat
        self._computed: tuple[float, int] = (0.0, 0)
        self._last_computed: tuple[float, int] = (0.0, 0)
        self._last_at = clock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dt-heartbeat-{rank}", daemon=True)

    def start(self) -> Heartbeat:
        stream = self._stream or sys.stdout
        stream.write(rank_line(self.rank, socket.gethostname()) + "\n")
        stream.flush()
        self._last_at = self._clock()
        self._thread.start()
        return self

    def step(self, steps: int = 1, *, compute_seconds: float | None = None) -> None:
        """`steps` more training steps done (called from the training loop); `compute_seconds`: the time
        they spent computing this rank's gradients, before the all-reduce (the module's docstring)."""
        self._steps += steps
        if compute_seconds is not None:
            total, counted = self._computed
            self._computed = (total + compute_seconds, counted + steps)
        if self._steps == steps:  # the first step, said now rather than a period later (the docstring)
            stream = self._stream or sys.stdout
            stream.write(line(Beat(self.rank, self._steps)) + "\n")
            stream.flush()

    def stop(self, *, done: bool = True) -> None:
        """The training loop ended: the last beat, marked done; the thread ends. Not `done` when the loop
        failed: a rank failing on a peer's timeout has not finished, and the manager still weighs it."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if done:
            self._beat(done=True)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop(done=kind is None)

    def _run(self) -> None:
        while not self._stopped.wait(self.every):
            self._beat()

    def _beat(self, *, done: bool = False) -> None:
        steps, now, totals = self._steps, self._clock(), self._computed
        computing, computed = totals[0] - self._last_computed[0], totals[1] - self._last_computed[1]
        self._last_computed = totals
        made = steps - self._last_steps
        seconds = (now - self._last_at) / made if made > 0 else None
        self._last_steps, self._last_at = steps, now
        if steps == 0 and not done:
            return  # not training yet (start-up, tracing): nothing to watch
        stream = self._stream or sys.stdout
        took = None if seconds is None else round(seconds, 6)
        compute = round(computing / computed, 6) if computed > 0 else None
        stream.write(line(Beat(self.rank, steps, took, done, compute)) + "\n")
        stream.flush()
