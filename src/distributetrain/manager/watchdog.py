"""The watchdog: finds the training rank that stopped making progress, from every rank's heartbeat in the
chief's log (observe/heartbeat.py) and from Horovod's stall inspector when it speaks (pure: the lines and
the clock come in, verdicts go out; posttraining.py does the I/O and acts).

A hang is a rank whose step count did not grow for the hang timeout: `--hang-timeout` when given, else
max(HANG_FACTOR x the median step time seen, HANG_FLOOR). A collective waits for every rank, so in a hang
every rank stops at about the same step; the culprit is told from the ranks that wait for it by how it
stopped:

- silent: its heartbeat stopped while the others' went on (a frozen process, a lost node or network: the
  heartbeat is a thread, which a process blocked in a collective keeps running);
- named by Horovod's stall inspector ("Missing ranks:", horovod/common/stall_inspector.cc, v0.28.1), which
  rank 0 prints after HOROVOD_STALL_CHECK_TIME_SECONDS when some ranks submitted a tensor and others did not;
- else the rank(s) whose progress stopped first.

The same reading names the culprit when the training *failed* because of a hang: Gloo times a collective out
after 30 s (HOROVOD_GLOO_TIMEOUT_SECONDS) and fails a rank that was only waiting, which horovodrun then
reports as the failed rank (`blame`).

A straggler is a rank slower than the others: its pace more than `factor` times the other ranks' median for
`reports` of its heartbeats in a row (--straggler-factor, --straggler-reports; StragglerRule). The pace is
each rank's compute time per step (`compute_s`: its forward and backward pass, before the all-reduce) when
every training rank reports one, else its wall step time (`step_s`, what older scripts report). Under
synchronous all-reduce the wall step time is the same on every rank - the fast ranks wait in the all-reduce
for the slow one - so only the compute time shows which rank is slow; the wall time still tells a rank
slow outside the step (its input pipeline, a rank that runs its own loop). The median is the *other*
ranks' so that with two ranks the slow one is compared with the fast one, not with the mean of both.

Ranks are mapped to hosts by each rank's own `dt-rank rank=R host=POD` line (heartbeat.py), else by the
launcher's `hostfile:` line, in rank order (chieflog.py; pod IPs); posttraining.py maps hosts to pods and
nodes. A relaunch (the launcher's `starting:` line) or an elastic
re-formation starts the watch afresh.
"""

from __future__ import annotations

import re
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from distributetrain.hostfile import HostSlots
from distributetrain.observe import chieflog, heartbeat, progress

STRAGGLER_FACTOR = 1.5  # a rank whose pace is above this many times the others' median...
STRAGGLER_REPORTS = 3    # ...for this many heartbeats in a row is a straggler (reported once per launch)
COMPUTE, STEP = "compute", "step"  # what a pace is measured on: compute time, or wall step time
HANG_FACTOR = 10.0
HANG_FLOOR = 300.0
SILENT_BEATS = 1.5  # a rank is silent when the others beat this many heartbeat periods after its last
CHECK_EVERY = 5.0   # seconds between two looks for a hang while ranks train
# Horovod's stall warning, before the manager's timeout so its "Missing ranks" can name the culprit
STALL_CHECK_MIN, STALL_CHECK_MAX = 10, 60
ENV_STALL_CHECK = "HOROVOD_STALL_CHECK_TIME_SECONDS"
_STALL_HEADER = re.compile(rb"Missing ranks:\s*$")
_STALL_RANK = re.compile(rb"^(?:\[\d+\]<std(?:out|err)>:)?\s*(\d{1,7})!?: \[")
_ELASTIC = re.compile(rb"(?:^|[\s:])elastic size=\d+ ")


def stall_check_seconds(hang_timeout: float | None) -> int | None:
    """HOROVOD_STALL_CHECK_TIME_SECONDS for a job: half its hang timeout, within 10-60 s, so the stall
    inspector names the missing ranks before the watchdog acts; None (Horovod's own 60 s) without one."""
    if hang_timeout is None:
        return None
    return int(min(STALL_CHECK_MAX, max(STALL_CHECK_MIN, hang_timeout // 2)))


@dataclass(frozen=True)
class RankSeen:
    """What the heartbeats said of one rank: its last step, when it was last heard and last progressed
    (monotonic seconds), its latest step time, whether its training loop ended."""

    rank: int
    step: int
    heard_at: float
    progressed_at: float
    step_seconds: float | None = None
    done: bool = False
    host: str | None = None  # from the launcher's hostfile line: a pod IP (elastic: none)
    said: str | None = None  # what the rank said of itself (dt-rank): its pod's hostname, the pod's name
    compute_seconds: float | None = None  # its latest compute time per step (heartbeat's compute_s)

    @property
    def hosts(self) -> tuple[str, ...]:
        """How its pod may be found: by address, then by the name the rank gave."""
        return tuple(h for h in (self.host, self.said) if h)


@dataclass(frozen=True)
class Hang:
    """A hang: the rank(s) blamed, how they were told apart, how long the first stopped, the timeout."""

    ranks: tuple[RankSeen, ...]
    how: str           # "silent", "stall inspector" or "stopped first"
    stalled_for: float
    timeout: float


def hang_timeout(explicit: float | None, step_seconds: list[float]) -> float:
    """An explicit timeout wins; else max(HANG_FACTOR x the median step time, HANG_FLOOR)."""
    if explicit is not None:
        return explicit
    median = statistics.median(step_seconds) if step_seconds else 0.0
    return max(HANG_FACTOR * median, HANG_FLOOR)


@dataclass(frozen=True)
class StragglerRule:
    """When a rank is a straggler (the module's docstring), and whether its worker is then replaced."""

    factor: float = STRAGGLER_FACTOR
    reports: int = STRAGGLER_REPORTS
    replace: bool = False  # elastic: its worker deleted and re-placed elsewhere (--replace-stragglers)


DEFAULT_STRAGGLERS = StragglerRule()


@dataclass(frozen=True)
class Pace:
    """How fast one rank trains against the others: its seconds per step over the others' median."""

    ratio: float
    seconds: float  # the rank's
    others: float   # the other training ranks' median
    measure: str    # COMPUTE or STEP


@dataclass(frozen=True)
class Straggler:
    """A rank slower than the others, as its last heartbeat showed it, for `reports` heartbeats in a row."""

    rank: RankSeen
    pace: Pace
    reports: int


def pace(rank: int, ranks: dict[int, RankSeen]) -> Pace | None:
    """The rank's pace against the other training ranks' median: on compute time when every training rank
    with a time reports one, else on wall step time (None: not two times to compare)."""
    timed = [r for r in ranks.values() if not r.done and r.step_seconds is not None]
    measure = COMPUTE if timed and all(r.compute_seconds is not None for r in timed) else STEP

    def seconds(seen: RankSeen) -> float | None:
        return seen.compute_seconds if measure == COMPUTE else seen.step_seconds

    mine = seconds(ranks[rank]) if rank in ranks and not ranks[rank].done else None
    others = [t for r in timed if r.rank != rank and (t := seconds(r)) is not None]
    if mine is None or not others:
        return None
    median = statistics.median(others)
    return Pace(mine / median, mine, median, measure) if median > 0 else None


def slow_streak(streak: int, found: Pace | None, rule: StragglerRule) -> int:
    """Heartbeats in a row a rank was slow, after one more of its beats (`found`: its pace at that beat)."""
    return streak + 1 if found is not None and found.ratio > rule.factor else 0


def suspects(ranks: dict[int, RankSeen], *, every: float, missing: frozenset[int] = frozenset(),
             now: float | None = None) -> tuple[tuple[RankSeen, ...], str] | None:
    """The rank(s) that stopped first among those still training, and how they were found (the module's
    docstring); None when no rank has beaten. `now`: while the ranks run, a rank is silent when it has not
    beaten for SILENT_BEATS periods while another has; without it (the training ended, every rank is quiet
    now), when the others beat for that much longer than it."""
    live = [r for r in ranks.values() if not r.done]
    if not live:
        return None
    since = max(r.heard_at for r in ranks.values()) if now is None else now
    silent = sorted((r for r in live if since - r.heard_at > SILENT_BEATS * every), key=lambda r: r.heard_at)
    if silent and len(silent) < len(ranks):  # all quiet is no culprit: the log may lag, or all froze
        return tuple(silent), "silent"
    named = tuple(r for r in live if r.rank in missing)
    if named:
        return named, "stall inspector"
    first = min(r.progressed_at for r in live)
    return tuple(sorted((r for r in live if r.progressed_at <= first + every), key=lambda r: r.rank)), \
        "stopped first"


class Watchdog:
    """Reads the chief's log line by line (the log follower's thread) and answers the supervisor's loop."""

    def __init__(self, *, timeout: float | None, every: float = heartbeat.DEFAULT_EVERY,
                 clock: Callable[[], float], stragglers: StragglerRule = DEFAULT_STRAGGLERS) -> None:
        """`timeout`: --hang-timeout (None: derived from the step time); `every`: the ranks' heartbeat
        period; `stragglers`: when a slow rank is reported."""
        self.explicit = timeout
        self.every = every
        self.rule = stragglers
        self._clock = clock
        self._lock = threading.Lock()
        self.ranks: dict[int, RankSeen] = {}
        self.hosts: tuple[HostSlots, ...] = ()
        self.rank_hosts: dict[int, str] = {}  # what each rank said of itself (dt-rank lines)
        self.missing: frozenset[int] = frozenset()
        self._in_stall = False
        self.next_check: float | None = None
        self._slow: dict[int, int] = {}           # heartbeats in a row each rank was slow
        self._stragglers: list[Straggler] = []    # found since the supervisor last asked
        self._reported: set[int] = set()          # ranks already reported as stragglers

    # ---- reading --------------------------------------------------------------------------------------
    def line(self, text: bytes) -> None:
        now = self._clock()
        hosts = chieflog.parse_hostfile(text)
        with self._lock:
            if hosts is not None:
                self.hosts = hosts
                return
            said = heartbeat.parse_rank(text)
            if said is not None:
                self.rank_hosts[said[0]] = said[1]
                if said[0] in self.ranks:
                    self.ranks[said[0]] = replace(self.ranks[said[0]], said=said[1])
                return
            if progress.LAUNCHED.match(text) or _ELASTIC.search(text):
                self._reset()  # a relaunch or a re-formed ring: new processes, maybe new rank numbers
                return
            beat = heartbeat.parse(text)
            if beat is not None:
                self._beat(beat, now)
                self._in_stall = False
                return
            if _STALL_HEADER.search(text):
                self._in_stall, self.missing = True, frozenset()
            elif self._in_stall:
                found = _STALL_RANK.match(text.rstrip(b"\r\n"))
                if found is None:
                    self._in_stall = False
                else:
                    self.missing = self.missing | {int(found[1])}

    def reset(self) -> None:
        """Forget every rank: their processes are being replaced (restart, replace)."""
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        self.ranks, self.missing, self._in_stall, self.next_check = {}, frozenset(), False, None
        self._slow, self._stragglers, self._reported = {}, [], set()

    def _beat(self, beat: heartbeat.Beat, now: float) -> None:
        seen = self.ranks.get(beat.rank)
        host = chieflog.rank_host(self.hosts, beat.rank) if self.hosts else None
        said = self.rank_hosts.get(beat.rank)
        if seen is None or beat.step < seen.step:  # first beat, or a new process under this rank
            seen = RankSeen(beat.rank, beat.step, now, now, beat.step_seconds, beat.done, host, said,
                            beat.compute_seconds)
        else:
            progressed = now if beat.step > seen.step else seen.progressed_at
            if beat.step > seen.step:  # a rank the stall inspector named has caught up since (start-up)
                self.missing = self.missing - {beat.rank}
            seen = replace(seen, step=beat.step, heard_at=now, progressed_at=progressed, done=beat.done,
                           step_seconds=beat.step_seconds if beat.step_seconds is not None
                           else seen.step_seconds, host=host or seen.host, said=said or seen.said,
                           compute_seconds=beat.compute_seconds if beat.compute_seconds is not None
                           else seen.compute_seconds)
        self.ranks[beat.rank] = seen
        if beat.step_seconds is not None and not beat.done:
            self._judge_speed(beat.rank)
        if self.next_check is None:
            self.next_check = now + CHECK_EVERY

    def _judge_speed(self, rank: int) -> None:
        found = pace(rank, self.ranks)
        self._slow[rank] = slow_streak(self._slow.get(rank, 0), found, self.rule)
        if found is not None and self._slow[rank] >= self.rule.reports and rank not in self._reported:
            self._reported.add(rank)
            self._stragglers.append(Straggler(self.ranks[rank], found, self._slow[rank]))

    # ---- answering ------------------------------------------------------------------------------------
    def timeout(self) -> float:
        with self._lock:
            return hang_timeout(self.explicit, [r.step_seconds for r in self.ranks.values()
                                                if r.step_seconds is not None])

    def wake_at(self) -> float | None:
        """When check() should run next (monotonic); None before any rank has beaten."""
        with self._lock:
            return self.next_check

    def check(self) -> Hang | None:
        """A hang, if a rank still training has made no progress for the timeout."""
        timeout = self.timeout()
        now = self._clock()
        with self._lock:
            self.next_check = now + CHECK_EVERY if self.ranks else None
            live = [r for r in self.ranks.values() if not r.done]
            if not live or now - min(r.progressed_at for r in live) < timeout:
                return None
            found = suspects(self.ranks, every=self.every, missing=self.missing, now=now)
        if found is None:
            return None
        ranks, how = found
        return Hang(ranks, how, now - min(r.progressed_at for r in ranks), timeout)

    def blame(self, failed_rank: int | None) -> Hang | None:
        """After the training failed: the rank(s) that fell silent while the others went on, when that is not
        the rank horovodrun reported failed (which then only timed out waiting for them)."""
        now = self._clock()
        with self._lock:
            found = suspects(self.ranks, every=self.every, missing=self.missing)
        if found is None or found[1] != "silent" or failed_rank in {r.rank for r in found[0]}:
            return None
        ranks, how = found
        return Hang(ranks, how, now - min(r.progressed_at for r in ranks), self.timeout())

    def stragglers(self) -> list[Straggler]:
        """The stragglers found since the last call (each rank once per launch)."""
        with self._lock:
            found, self._stragglers = self._stragglers, []
        return found

    def snapshot(self) -> tuple[RankSeen, ...]:
        with self._lock:
            return tuple(sorted(self.ranks.values(), key=lambda r: r.rank))
