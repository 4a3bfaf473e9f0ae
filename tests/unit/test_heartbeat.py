"""Per-rank heartbeats (observe/heartbeat.py): the line every rank prints, the helper a script uses, and the
launcher's hostfile line the manager maps ranks to pods with (observe/chieflog.py)."""

from __future__ import annotations

import io
import itertools
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from distributetrain.hostfile import HostSlots
from distributetrain.observe import chieflog, heartbeat, progress
from distributetrain.observe.heartbeat import Beat, Heartbeat

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "expected"), [
    (b"[1]<stdout>:dt-progress rank=1 step=1200 step_s=0.0412", Beat(1, 1200, 0.0412)),
    (b"[3]<stdout>:dt-progress rank=3 step=1500 done=1", Beat(3, 1500, None, True)),
    ("dt-progress rank=0 step=7 step_s=0.5 done=1", Beat(0, 7, 0.5, True)),
    (b"[2]<stdout>:dt-progress rank=2 step=90 step_s=0.1 compute_s=0.0431", Beat(2, 90, 0.1, False, 0.0431)),
    (b"[2]<stdout>:dt-progress rank=2 step=90 compute_s=-1", Beat(2, 90)),  # no negative time
])
def test_what_the_manager_reads_from_a_ranks_heartbeat(text: bytes | str, expected: Beat) -> None:
    assert heartbeat.parse(text) == expected
    assert heartbeat.parse(heartbeat.line(expected)) == expected


@pytest.mark.parametrize("text", [
    b"[0]<stdout>:dt-progress epoch=3/20 step=120 loss=0.41",  # rank 0's job progress: no rank
    b"dt-progress rank=2",                                     # no step: nothing to watch
    b"dt-progress rank=x step=3",                              # malformed: no line at all
    b"rank=1 size=2 weights_sha256=abc",
])
def test_lines_that_are_no_heartbeat(text: bytes) -> None:
    assert heartbeat.parse(text) is None


def test_a_heartbeat_is_not_the_jobs_progress_but_keeps_the_progress_format() -> None:
    report = progress.parse(b"dt-progress rank=4 step=9 step_s=0.25")
    assert report is not None and (report.rank, report.step) == (4, 9)
    assert progress.parse(progress.line(report)) == report


PROBE = """
import importlib.util, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
beat = train.Heartbeat(2, every=3600)
beat.beat()  # before any step: nothing
for batch in range(3):
    beat.on_train_batch_end(batch)
beat.beat()
beat.on_train_batch_end(3)
beat.on_train_begin()
beat.on_train_end()
beat.on_train_begin()
beat.on_train_batch_end(4)
beat.stop(done=False)  # fit raised: no done beat
beat.on_train_begin()
beat.on_train_batch_end(5, {"loss": 1.0, "compute_s": 0.25})  # timed_train_step's log
beat.on_train_batch_end(6, {"loss": 1.0, "compute_s": 0.75})
beat.beat()
beat.stop(done=False)
"""


def test_train_py_prints_the_heartbeat_the_manager_reads() -> None:
    # Train.py is self-contained (it imports no distributetrain): its own line must be what the package reads
    done = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "base-image" / "Train.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert heartbeat.parse_rank(next(x for x in done.stdout.splitlines() if "dt-rank" in x))[0] == 2  # type: ignore[index]
    beats = [heartbeat.parse(line) for line in done.stdout.splitlines() if "dt-progress" in line]
    assert [(b.rank, b.step, b.done, b.compute_seconds) for b in beats if b is not None] == [
        (2, 1, False, None),  # its first step, said at once
        (2, 3, False, None), (2, 4, True, None), (2, 7, False, 0.5)]  # the mean compute time of its steps
    assert beats[0] is not None and beats[0].step_seconds is None  # untimed: its time is the start-up's
    assert all(b is not None and b.step_seconds is not None and b.step_seconds >= 0 for b in beats[1:])


def test_the_helper_beats_from_its_thread_and_ends_marked_done() -> None:
    out = io.StringIO()
    ticks = itertools.count(0.0, 0.5)  # every clock read half a second on
    beat = Heartbeat(3, every=0.01, stream=out, clock=lambda: next(ticks))
    with beat:
        for _ in range(4):
            beat.step()
        while "step=4 step_s=" not in out.getvalue():
            pass
    beats = [heartbeat.parse(line) for line in out.getvalue().splitlines()[1:]]  # after its dt-rank line
    assert all(b is not None and b.rank == 3 for b in beats)
    assert Beat(3, 1) in beats  # the first step's, from the step itself
    timed = next(b for b in beats if b is not None and b.step == 4)
    assert timed.step_seconds is not None  # the thread's
    assert beats[-1] == Beat(3, 4, None, True)  # no step since the last beat: no step time, and done


def test_the_first_step_is_said_at_once_not_a_period_later() -> None:
    # a rank frozen before its first periodic beat must be known to the watchdog: else it blames the ranks
    # that only wait for it (tests/reliability/test_hangs.py, a worker frozen right after the first epoch)
    out = io.StringIO()
    beat = Heartbeat(1, every=3600, stream=out).start()
    beat.step(compute_seconds=0.5)
    beat.step()
    lines = out.getvalue().splitlines()
    assert [heartbeat.parse(line) for line in lines[1:]] == [Beat(1, 1)]  # once, untimed
    beat.stop()


def test_the_helper_reports_the_mean_compute_time_of_the_steps_since_its_last_beat() -> None:
    out = io.StringIO()
    beat = Heartbeat(1, every=3600, stream=out).start()
    beat.step(compute_seconds=0.2)
    beat.step(compute_seconds=0.4)
    beat._beat()
    beat.step(2, compute_seconds=0.2)  # two steps, 0.2 s of compute between them
    beat._beat()
    beat.step()                        # a step the script did not time
    beat.stop()
    beats = [heartbeat.parse(line) for line in out.getvalue().splitlines()[1:]]
    assert [(b.step, b.compute_seconds) for b in beats if b is not None] == [
        (1, None), (2, 0.3), (4, 0.1), (5, None)]  # the first step's beat is untimed


def test_a_helper_before_its_first_step_stays_quiet() -> None:
    out = io.StringIO()
    beat = Heartbeat(0, every=3600, stream=out)
    beat._beat()
    assert out.getvalue() == ""


def test_the_heartbeat_period_from_the_environment() -> None:
    assert heartbeat.every_from_env({"DT_HEARTBEAT_SECONDS": "2.5"}) == 2.5
    assert heartbeat.every_from_env({"DT_HEARTBEAT_SECONDS": "0"}) == heartbeat.DEFAULT_EVERY
    assert heartbeat.every_from_env({"DT_HEARTBEAT_SECONDS": "soon"}) == heartbeat.DEFAULT_EVERY
    assert heartbeat.every_from_env({}) == heartbeat.DEFAULT_EVERY


def test_the_launchers_hostfile_line_maps_ranks_to_hosts() -> None:
    hosts = (HostSlots("10.0.0.9", 2), HostSlots("10.0.0.10", 1))
    line = f"launcher 2026-11-26 10:20:33,123 INFO {chieflog.hostfile(hosts)}".encode()
    assert chieflog.parse_hostfile(line) == hosts
    assert [chieflog.rank_host(hosts, r) for r in range(4)] == ["10.0.0.9", "10.0.0.9", "10.0.0.10", None]
    assert chieflog.parse_hostfile(b"launcher 2026-11-26 10:20:33,123 INFO hostfile: junk") is None
    assert chieflog.parse_hostfile(b"[0]<stdout>:hostfile: 10.0.0.9 slots=1") is None


def test_each_rank_says_which_pod_it_runs_on() -> None:
    assert heartbeat.parse_rank(b"[2]<stdout>:dt-rank rank=2 host=train-worker-1") == (2, "train-worker-1")
    assert heartbeat.parse_rank(heartbeat.rank_line(0, "train-chief")) == (0, "train-chief")
    assert heartbeat.parse_rank(b"dt-rank rank=2 host=") is None
    assert heartbeat.parse_rank(b"dt-rank rank=two host=a") is None
    out = io.StringIO()
    Heartbeat(5, every=3600, stream=out).start().stop()
    assert heartbeat.parse_rank(out.getvalue().splitlines()[0]) == (5, socket.gethostname())


def test_a_helper_left_by_an_error_is_not_done() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), Heartbeat(1, every=3600, stream=out) as beat:
        beat.step()
        raise RuntimeError("Timed out waiting 30000ms for recv operation")
    assert all("done=1" not in line for line in out.getvalue().splitlines())
