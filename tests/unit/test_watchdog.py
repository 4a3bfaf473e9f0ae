"""The watchdog's core (manager/watchdog.py): the chief's log lines and a clock in, a hang and its culprit
out. Each test plays the log of a 3-rank job (rank 0 on the chief, 1 and 2 on two workers) as the manager
would read it."""

from __future__ import annotations

import io
from typing import cast

import pytest

from distributetrain.hostfile import HostSlots
from distributetrain.manager import watchdog
from distributetrain.manager.keeper import Keeper as KeeperType
from distributetrain.manager.posttraining import act_on_hang, describe_hang
from distributetrain.manager.watchdog import Watchdog
from distributetrain.observe import chieflog
from distributetrain.observe.joblog import Reporter

HOSTS = (HostSlots("10.0.0.5", 1), HostSlots("10.0.0.6", 1), HostSlots("10.0.0.7", 1))
HOSTFILE = f"launcher 2026-11-26 10:20:33,123 INFO {chieflog.hostfile(HOSTS)}".encode()
STARTING = b"launcher 2026-11-26 10:20:33,200 INFO starting: horovodrun -np 3 ..."


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def beat(rank: int, step: int, seconds: float | None = 0.1, done: bool = False) -> bytes:
    took = f" step_s={seconds}" if seconds is not None else ""
    return f"[{rank}]<stdout>:dt-progress rank={rank} step={step}{took}{' done=1' if done else ''}".encode()


def started(clock: Clock, timeout: float | None = 60.0) -> Watchdog:
    dog = Watchdog(timeout=timeout, every=10.0, clock=clock)
    dog.line(HOSTFILE)
    dog.line(STARTING)
    return dog


def train(dog: Watchdog, clock: Clock, *, seconds: float, ranks: tuple[int, ...] = (0, 1, 2),
          frozen_step: dict[int, int] | None = None, start: int = 0) -> int:
    """Every rank beats every 10 s for `seconds`, 100 steps per beat; a rank in `frozen_step` stays at that
    step (it beats, but its step count no longer grows)."""
    step = start
    for _ in range(int(seconds // 10)):
        clock.now += 10
        step += 100
        for rank in ranks:
            dog.line(beat(rank, (frozen_step or {}).get(rank, step)))
    return step


def test_no_hang_while_every_rank_progresses() -> None:
    clock = Clock()
    dog = started(clock)
    assert dog.wake_at() is None  # nothing to watch before the first heartbeat
    train(dog, clock, seconds=300)
    assert dog.wake_at() is not None
    assert dog.check() is None
    assert [(r.rank, r.host, r.step) for r in dog.snapshot()] == [
        (0, "10.0.0.5", 3000), (1, "10.0.0.6", 3000), (2, "10.0.0.7", 3000)]


def test_a_frozen_worker_is_the_hang_and_the_ranks_waiting_for_it_are_not() -> None:
    clock = Clock()
    dog = started(clock)
    step = train(dog, clock, seconds=100)
    # rank 2's processes freeze: it falls silent; ranks 0 and 1 block in the next allreduce and beat on
    # with the same step count
    for _ in range(7):
        clock.now += 10
        for rank in (0, 1):
            dog.line(beat(rank, step + 10, None))
    hang = dog.check()
    assert hang is not None
    assert [(r.rank, r.host, r.step) for r in hang.ranks] == [(2, "10.0.0.7", step)]
    assert hang.how == "silent" and hang.timeout == 60.0 and hang.stalled_for >= 60.0


def test_no_hang_before_the_timeout() -> None:
    clock = Clock()
    dog = started(clock)
    train(dog, clock, seconds=50)
    clock.now += 59
    assert dog.check() is None
    clock.now += 2
    assert dog.check() is not None


def test_when_every_rank_is_alive_and_stuck_horovods_stall_inspector_names_the_missing_rank() -> None:
    clock = Clock()
    dog = started(clock)
    step = train(dog, clock, seconds=50)
    for line in [b"[0]<stderr>:[2026-11-26 10:21:07.345988: W horovod/common/stall_inspector.cc:105] One or "
                 b"more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
                 b"are waiting for remainder of ranks for more than 30 seconds. ",
                 b"[0]<stderr>:Missing ranks:",
                 b"[0]<stderr>:1: [DistributedAdam_Allreduce/cond/HorovodAllreduce_grads_0]",
                 b"[0]<stderr>:some later line"]:
        dog.line(line)
    train(dog, clock, seconds=70, frozen_step={0: step, 1: step, 2: step})  # all alive, none progresses
    hang = dog.check()
    assert hang is not None and hang.how == "stall inspector"
    assert [r.rank for r in hang.ranks] == [1]


def test_alive_and_stuck_without_the_stall_inspector_names_the_rank_that_stopped_first() -> None:
    clock = Clock()
    dog = started(clock)
    step = train(dog, clock, seconds=50)
    train(dog, clock, seconds=30, frozen_step={1: step}, start=step)  # rank 1 stops first
    train(dog, clock, seconds=60, frozen_step={0: step + 300, 1: step, 2: step + 300}, start=step + 300)
    hang = dog.check()
    assert hang is not None and hang.how == "stopped first" and [r.rank for r in hang.ranks] == [1]


def test_the_default_timeout_is_ten_median_steps_with_a_five_minute_floor() -> None:
    assert watchdog.hang_timeout(None, []) == 300.0
    assert watchdog.hang_timeout(None, [0.1, 0.2, 50.0]) == 300.0
    assert watchdog.hang_timeout(None, [40.0, 45.0, 60.0]) == 450.0
    assert watchdog.hang_timeout(20.0, [40.0, 45.0, 60.0]) == 20.0  # an explicit timeout wins
    clock = Clock()
    dog = started(clock, timeout=None)
    train(dog, clock, seconds=50)
    assert dog.timeout() == 300.0
    clock.now += 200
    assert dog.check() is None


def test_a_rank_done_training_is_not_hung_and_a_relaunch_starts_the_watch_afresh() -> None:
    clock = Clock()
    dog = started(clock)
    step = train(dog, clock, seconds=50)
    for rank in (0, 1, 2):
        dog.line(beat(rank, step, None, done=True))  # evaluation and saving follow: no steps
    clock.now += 600
    assert dog.check() is None
    dog.line(STARTING)  # the launcher relaunches (restart): new processes
    assert dog.snapshot() == () and dog.wake_at() is None


def test_after_a_gloo_timeout_the_culprit_is_the_rank_that_fell_silent_not_the_one_that_failed() -> None:
    clock = Clock()
    dog = started(clock, timeout=None)  # 300 s: Gloo's 30 s timeout fails rank 0 first
    step = train(dog, clock, seconds=100)
    for _ in range(3):  # rank 1 frozen; 0 and 2 wait in the allreduce until Gloo fails rank 0
        clock.now += 10
        for rank in (0, 2):
            dog.line(beat(rank, step + 10, None))
    hang = dog.blame(failed_rank=0)
    assert hang is not None and [(r.rank, r.host) for r in hang.ranks] == [(1, "10.0.0.6")]
    assert dog.blame(failed_rank=1) is None  # it failed itself (killed): horovodrun's report stands


def test_a_failure_with_every_rank_beating_to_the_end_blames_no_one() -> None:
    clock = Clock()
    dog = started(clock, timeout=None)
    train(dog, clock, seconds=100)
    assert dog.blame(failed_rank=0) is None


@pytest.mark.parametrize(("timeout", "stall"), [(None, None), (20.0, 10), (90.0, 45), (3600.0, 60)])
def test_horovods_stall_check_speaks_before_the_watchdog_acts(timeout: float | None, stall: int | None
                                                             ) -> None:
    assert watchdog.stall_check_seconds(timeout) == stall


def _pod(name: str, role: str, node: str, ip: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {"distributetrain.io/role": role}},
            "spec": {"nodeName": node}, "status": {"podIP": ip, "phase": "Running"}}


def test_the_manager_names_the_stuck_ranks_pod_node_and_last_step() -> None:
    clock = Clock()
    dog = started(clock)
    step = train(dog, clock, seconds=50)
    for _ in range(7):
        clock.now += 10
        for rank in (0, 2):
            dog.line(beat(rank, step + 10, None))
    hang = dog.check()
    assert hang is not None
    pods = {"train-chief": _pod("train-chief", "chief", "node-1", "10.0.0.5"),
            "train-worker-0": _pod("train-worker-0", "worker", "node-2", "10.0.0.6"),
            "train-worker-1": _pod("train-worker-1", "worker", "node-3", "10.0.0.7")}
    assert describe_hang(hang, pods) == (
        f"rank 1 on worker train-worker-0, node node-2, 10.0.0.6, last step {step}: fell silent (its "
        "processes stopped: frozen, or its node or network lost) while the others waited for it; no step for "
        "70s (hang timeout 60s)")


class Keeper:
    """What the supervisor asks of the keeper on a hang: remove these workers (it removes members only)."""

    def __init__(self, members: set[str]) -> None:
        self.members = members
        self.removed: list[tuple[list[str], str]] = []

    def remove_stuck(self, names: list[str], why: str) -> list[str]:
        self.removed.append((names, why))
        return [n for n in names if n in self.members]


def _hung_rank(rank: int) -> tuple[Watchdog, watchdog.Hang]:
    clock = Clock()
    dog = started(clock)
    step = train(dog, clock, seconds=50)
    for _ in range(7):
        clock.now += 10
        for other in {0, 1, 2} - {rank}:
            dog.line(beat(other, step + 10, None))
    hang = dog.check()
    assert hang is not None
    return dog, hang


PODS = {"train-chief": _pod("train-chief", "chief", "node-1", "10.0.0.5"),
        "train-worker-0": _pod("train-worker-0", "worker", "node-2", "10.0.0.6"),
        "train-worker-1": _pod("train-worker-1", "worker", "node-3", "10.0.0.7")}


@pytest.mark.parametrize(("action", "rank", "removed"), [
    ("fail", 1, None),                          # the job ends
    ("restart", 1, ["train-worker-0"]),         # the keeper replaces it, the chief relaunches
    ("replace", 2, ["train-worker-1"]),         # elastic: re-placed while the others go on
    ("restart", 0, None),                       # rank 0 is the chief's: nothing to replace, the job ends
])
def test_what_the_supervisor_does_with_a_hang(action: str, rank: int, removed: list[str] | None) -> None:
    dog, hang = _hung_rank(rank)
    keeper = Keeper({"train-worker-0", "train-worker-1"})
    said = io.StringIO()
    reporter = Reporter(said)
    got = act_on_hang(hang, action, watchdog=dog, pods=PODS, reporter=reporter,
                      keeper=cast(KeeperType, keeper))
    assert got == removed
    assert f"the training hung: rank {rank} on " in said.getvalue()
    if action != "fail":
        assert keeper.removed == [([f"train-{'chief' if rank == 0 else f'worker-{rank - 1}'}"],
                                   f"--on-hang {action}")]
    assert (dog.snapshot() == ()) == (removed is not None)  # a fresh watch once workers are replaced


def test_a_rank_frozen_just_after_its_beat_is_silent_though_the_others_beat_only_once_since() -> None:
    clock = Clock()
    dog = started(clock, timeout=20.0)
    step = train(dog, clock, seconds=50)  # every rank beat at this moment; rank 1 freezes right after
    clock.now += 10
    dog.line(beat(0, step + 1, None))     # rank 0 beats once more, blocked in the allreduce
    dog.line(beat(2, step + 1, None))
    clock.now += 10.5                     # its next beat is not in yet when the watchdog looks
    hang = dog.check()
    assert hang is not None and hang.how == "silent" and [r.rank for r in hang.ranks] == [1]


def test_a_rank_the_stall_inspector_named_at_start_up_is_cleared_once_it_steps() -> None:
    clock = Clock()
    dog = started(clock)
    dog.line(beat(2, 1))
    dog.line(b"[0]<stderr>:Missing ranks:")
    dog.line(b"[0]<stderr>:2: [broadcast_dense_kernel_0]")  # rank 2 was slow to start
    assert dog.missing == {2}
    train(dog, clock, seconds=30)
    assert dog.missing == frozenset()


def test_a_rank_without_a_hostfile_line_is_found_by_the_pod_it_names() -> None:
    clock = Clock()
    dog = Watchdog(timeout=60.0, every=10.0, clock=clock)  # elastic: no hostfile line
    dog.line(b"[1]<stdout>:dt-rank rank=1 host=train-worker-3")
    dog.line(beat(1, 100))
    dog.line(beat(0, 100))
    dog.line(b"[0]<stdout>:dt-rank rank=0 host=train-chief")
    assert [(r.rank, r.hosts) for r in dog.snapshot()] == [(0, ("train-chief",)), (1, ("train-worker-3",))]


def test_rank_0_failing_on_gloos_timeout_after_its_peer_froze_blames_the_peer() -> None:
    # what the chief's log held when Gloo failed rank 0 30 s after rank 1 froze (the e2e row, 60 s timeout)
    clock = Clock()
    dog = started(clock, timeout=60.0)
    step = train(dog, clock, seconds=100)
    for _ in range(3):
        clock.now += 10
        for rank in (0, 2):
            dog.line(beat(rank, step + 3, None))  # blocked in the allreduce: beats on, no step
    dog.line(b"[0]<stderr>:[2026-11-26 10:59:55.973063: E horovod/common/operations.cc:697] [0]: Horovod "
             b"background loop uncaught exception: Timed out waiting 30000ms for recv operation")
    hang = dog.blame(failed_rank=0)
    assert hang is not None and hang.how == "silent" and [r.rank for r in hang.ranks] == [1]


def test_a_rank_frozen_before_its_first_periodic_beat_is_found_by_its_first_steps_beat() -> None:
    # every rank says its first step at once (heartbeat.py); rank 2 freezes a second later, before its first
    # periodic beat (10 s): the ranks waiting for it beat on at the step they stopped at
    clock = Clock()
    dog = started(clock, timeout=20.0)
    for rank in (0, 1, 2):
        dog.line(beat(rank, 1, None))
    for _ in range(2):
        clock.now += 10
        for rank in (0, 1):
            dog.line(beat(rank, 30, 0.03))
    clock.now += 1
    hang = dog.check()
    assert hang is not None and [r.rank for r in hang.ranks] == [2] and hang.how == "silent"
    # without that first beat the frozen rank is unknown, and the hang falls on a rank that only waited
    dog = started(clock, timeout=20.0)
    for rank in (0, 1):
        dog.line(beat(rank, 30, 0.03))
    clock.now += 21
    for rank in (0, 1):
        dog.line(beat(rank, 30, None))
    unknown = dog.check()
    assert unknown is not None and [r.rank for r in unknown.ranks] == [0, 1]  # the chief's among them
