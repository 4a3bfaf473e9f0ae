"""Stragglers (manager/watchdog.py): a rank slower than the others, judged on its compute time per step when
the ranks report one (under synchronous all-reduce the wall step times are all alike), reported once after
`reports` slow heartbeats in a row, and in an elastic job replaced when asked (posttraining.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pytest

from distributetrain.manager import posttraining, watchdog
from distributetrain.manager.keeper import Keeper as KeeperType
from distributetrain.manager.watchdog import COMPUTE, STEP, Pace, RankSeen, StragglerRule, Watchdog
from distributetrain.observe.joblog import Reporter
from distributetrain.observe.jobstate import JobState, RankState

RULE = StragglerRule()  # 1.5 times the others' median, 3 heartbeats in a row


def seen(rank: int, step_s: float | None, compute_s: float | None = None, done: bool = False) -> RankSeen:
    return RankSeen(rank, 100, 0.0, 0.0, step_seconds=step_s, done=done, compute_seconds=compute_s)


def ranks(*rows: RankSeen) -> dict[int, RankSeen]:
    return {r.rank: r for r in rows}


@pytest.mark.parametrize(("rows", "rank", "expected"), [
    # synchronous all-reduce: one wall step time everywhere; the compute time shows rank 2 at half speed
    ((seen(0, 0.1, 0.04), seen(1, 0.1, 0.05), seen(2, 0.1, 0.09)), 2, Pace(2.0, 0.09, 0.045, COMPUTE)),
    ((seen(0, 0.1, 0.04), seen(1, 0.1, 0.05), seen(2, 0.1, 0.09)), 0, Pace(0.04 / 0.07, 0.04, 0.07, COMPUTE)),
    # two ranks: the slow one against the fast one, not against the mean of both
    ((seen(0, 0.2, 0.05), seen(1, 0.2, 0.15)), 1, Pace(3.0, 0.15, 0.05, COMPUTE)),
    # a script that reports no compute time (an older one): judged on the wall step time
    ((seen(0, 0.1), seen(1, 0.1), seen(2, 0.3)), 2, Pace(3.0, 0.3, 0.1, STEP)),
    # one rank without a compute time: every rank is judged on the step time alike
    ((seen(0, 0.1, 0.04), seen(1, 0.1), seen(2, 0.1, 0.09)), 2, Pace(1.0, 0.1, 0.1, STEP)),
    # a rank that finished is no yardstick
    ((seen(0, 0.1, 0.04), seen(1, 0.1, 0.01, done=True), seen(2, 0.1, 0.06)), 2,
     Pace(1.5, 0.06, 0.04, COMPUTE)),
])
def test_a_ranks_pace_against_the_others_median(rows: tuple[RankSeen, ...], rank: int,
                                                expected: Pace) -> None:
    found = watchdog.pace(rank, ranks(*rows))
    assert found is not None
    assert (found.ratio, found.seconds, found.others, found.measure) == pytest.approx(
        (expected.ratio, expected.seconds, expected.others, expected.measure))


@pytest.mark.parametrize("rows", [
    (seen(0, 0.1, 0.04),),                              # alone: nothing to compare with
    (seen(0, None), seen(1, 0.1, 0.05)),                # rank 0 has no time yet
    (seen(0, 0.1, 0.0), seen(1, 0.1, 0.0)),             # a median of 0: no ratio
    (seen(0, 0.1, 0.04, done=True), seen(1, 0.1, 0.05)),  # it finished
])
def test_no_pace_without_two_times_to_compare(rows: tuple[RankSeen, ...]) -> None:
    assert watchdog.pace(0, ranks(*rows)) is None


@pytest.mark.parametrize(("ratios", "rule", "streaks"), [
    ([2.0, 2.0, 2.0, 1.0, 2.0], RULE, [1, 2, 3, 0, 1]),
    ([1.5, 1.51, None, 1.6], RULE, [0, 1, 0, 1]),        # above the factor, not at it; no pace resets
    ([1.9, 1.9], StragglerRule(factor=2.0, reports=1), [0, 0]),
])
def test_slow_heartbeats_in_a_row(ratios: list[float | None], rule: StragglerRule,
                                  streaks: list[int]) -> None:
    streak, got = 0, []
    for ratio in ratios:
        streak = watchdog.slow_streak(streak, None if ratio is None else Pace(ratio, 1.0, 1.0, COMPUTE), rule)
        got.append(streak)
    assert got == streaks


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def beat(rank: int, step: int, step_s: float, compute_s: float | None) -> bytes:
    compute = f" compute_s={compute_s}" if compute_s is not None else ""
    return f"[{rank}]<stdout>:dt-progress rank={rank} step={step} step_s={step_s}{compute}".encode()


def play(dog: Watchdog, clock: Clock, beats: int, compute: dict[int, float | None], *, slow_from: int = 0,
         slow: float = 2.0, start: int = 0) -> list[list[tuple[int, float, str]]]:
    """Three ranks beat `beats` times, 10 s apart, one wall step time for all (they wait for each other);
    from beat `slow_from` on, rank 2 computes `slow` times longer. The stragglers found after each beat."""
    reported = []
    for n in range(start, start + beats):
        clock.now += 10
        for rank, took in compute.items():
            slower = took * slow if took is not None and rank == 2 and n >= slow_from else took
            dog.line(beat(rank, 100 * (n + 1), 0.1, slower))
        reported.append([(s.rank.rank, round(s.pace.ratio, 2), s.pace.measure) for s in dog.stragglers()])
    return reported


def test_a_rank_computing_at_half_speed_is_reported_after_its_third_slow_beat_and_never_again() -> None:
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock)
    reported = play(dog, clock, 8, {0: 0.04, 1: 0.05, 2: 0.045}, slow_from=2)
    assert reported == [[], [], [], [], [(2, 2.0, COMPUTE)], [], [], []]


def test_ranks_computing_alike_have_no_straggler_though_their_compute_times_jitter() -> None:
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock)
    reported = play(dog, clock, 30, {0: 0.04, 1: 0.05, 2: 0.045}, slow=1.4)  # rank 2 a little slower
    assert reported == [[]] * 30


def test_without_compute_times_a_slow_rank_hidden_by_the_all_reduce_is_not_seen() -> None:
    # what the watchdog saw before compute_s: one wall step time everywhere, no straggler whatever the speed
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock)
    assert play(dog, clock, 8, {0: None, 1: None, 2: None}) == [[]] * 8


def test_the_rule_sets_factor_and_reports() -> None:
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock, stragglers=StragglerRule(factor=2.5, reports=1))
    assert play(dog, clock, 3, {0: 0.04, 1: 0.04, 2: 0.04}, slow=2.0) == [[]] * 3
    assert play(dog, clock, 1, {0: 0.04, 1: 0.04, 2: 0.04}, slow=3.0, start=3) == [[(2, 3.0, COMPUTE)]]


def test_a_relaunch_judges_afresh() -> None:
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock)
    assert play(dog, clock, 3, {0: 0.04, 1: 0.04, 2: 0.04})[-1] == [(2, 2.0, COMPUTE)]
    dog.line(b"launcher 2026-11-26 10:20:33,200 INFO starting: horovodrun -np 3 ...")
    assert play(dog, clock, 3, {0: 0.04, 1: 0.04, 2: 0.04}, start=3)[-1] == [(2, 2.0, COMPUTE)]


def _pod(name: str, role: str, node: str, ip: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {"distributetrain.io/role": role}},
            "spec": {"nodeName": node}, "status": {"podIP": ip, "phase": "Running"}}


PODS = {"train-chief": _pod("train-chief", "chief", "node-1", "10.0.0.5"),
        "train-worker-0": _pod("train-worker-0", "worker", "node-2", "10.0.0.6"),
        "train-worker-1": _pod("train-worker-1", "worker", "node-3", "10.0.0.7")}


class Recovery:
    elastic = True


class Keeper:
    """What the supervisor asks of an elastic job's keeper: remove these workers (members only)."""

    recovery = Recovery()

    def __init__(self) -> None:
        self.removed: list[tuple[list[str], str]] = []

    def remove_stuck(self, names: list[str], why: str) -> list[str]:
        self.removed.append((names, why))
        return [n for n in names if n.startswith("train-worker-")]


class Said(Reporter):
    """The manager's lines, and its straggler calls (the observer turns each into a Straggler Event on the
    pod and on the job)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.straggling_pods: list[str | None] = []

    def say(self, message: str) -> None:
        self.lines.append(message)

    def straggling(self, pod: Mapping[str, Any] | None, why: str) -> None:
        super().straggling(pod, why)
        self.straggling_pods.append(None if pod is None else pod["metadata"]["name"])


def _supervised(slow_rank: int, rule: StragglerRule) -> tuple[Watchdog, Keeper, Said, Clock]:
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock, stragglers=rule)
    compute = {0: 0.04, 1: 0.04, 2: 0.04}
    for n in range(4):  # rank 0 beats first: at its first beat no other rank has a time to compare with
        clock.now += 10
        for rank, took in compute.items():
            dog.line(f"[{rank}]<stdout>:dt-rank rank={rank} host="
                     f"{'train-chief' if rank == 0 else f'train-worker-{rank - 1}'}".encode())
            dog.line(beat(rank, 100 * (n + 1), 0.1, took * 2 if rank == slow_rank else took))
    return dog, Keeper(), Said(), clock


def test_the_supervisor_reports_a_straggler_naming_rank_pod_and_node() -> None:
    dog, keeper, said, clock = _supervised(2, RULE)
    assert posttraining._due(dog, clock() + 60, PODS, said, cast(KeeperType, keeper)) is None
    assert said.straggling_pods == ["train-worker-1"]
    assert said.lines == [
        "straggler: rank 2 on worker train-worker-1, node node-3 computes a step (forward and backward, "
        "before the all-reduce) in 0.08s a step, 2.0 times the other ranks' median 0.04s, for 3 heartbeats "
        "in a row"]
    assert keeper.removed == []  # reported only: --replace-stragglers was not asked for


@pytest.mark.parametrize(("slow_rank", "removed"), [
    (2, [(["train-worker-1"], "--replace-stragglers")]),
    (0, []),  # the chief's rank: reported, never replaced
])
def test_replace_stragglers_deletes_the_slow_worker_through_the_keeper(slow_rank: int,
                                                                      removed: list[object]) -> None:
    dog, keeper, said, clock = _supervised(slow_rank, StragglerRule(replace=True))
    posttraining._due(dog, clock() + 60, PODS, said, cast(KeeperType, keeper))
    assert keeper.removed == removed
    assert (dog.snapshot() == ()) == bool(removed)  # the ranks re-form without it: a fresh watch
    if not removed:
        assert any("rank 0 runs in the chief, which is not replaced" in line for line in said.lines)


def test_the_skew_metric_is_on_compute_time_when_every_rank_reports_one() -> None:
    state = JobState(job="j", namespace="n", started_at=0.0, ranks=(
        RankState(0, "train-chief", "node-1", 0.1, 0.04), RankState(1, "train-worker-0", "node-2", 0.1, 0.05),
        RankState(2, "train-worker-1", "node-3", 0.1, 0.1)))
    assert state.skew == pytest.approx(2.0)
    older = JobState(job="j", namespace="n", started_at=0.0, ranks=(
        RankState(0, "a", "n1", 0.1, 0.04), RankState(1, "b", "n2", 0.1), RankState(2, "c", "n3", 0.3, 0.04)))
    assert older.skew == pytest.approx(3.0)  # a rank without one: every rank on its step time
