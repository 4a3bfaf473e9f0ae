"""The manager's metrics server (metrics.py) as Manager.sh runs it: a process of its own reading the state
file the phases replace, scraped over HTTP on loopback and parsed with prometheus_client's own parser."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster import wait_until
from prometheus_client.parser import text_string_to_metric_families

from distributetrain.observe import jobstate, progress
from distributetrain.observe.jobstate import PodState, RankState

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def write(path: Path, state: jobstate.JobState) -> None:
    partial = path.with_name("state.new")
    partial.write_text(jobstate.dumps(state))
    partial.replace(path)  # as publisher.py does


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    state, port = tmp_path / "state.json", free_port()
    proc = subprocess.Popen([sys.executable, "-m", "distributetrain.observe.metrics", "--state", str(state),
                             "--port", str(port), "--address", "127.0.0.1"],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _answers(port), timeout=30, interval=0.1, what="the metrics server")
        yield port, state
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err  # SIGTERM ends it cleanly
        assert f"distributetrain: serving the job's metrics on 127.0.0.1:{port}/metrics" in err


def _answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


JOB = (("job_name", "train"), ("namespace", "ml"))


def test_each_scrape_reads_the_state_the_phases_left(server: tuple[int, Path]) -> None:
    port, path = server
    assert scrape(port) == {}  # before PreTraining wrote anything: no job metrics, but an answer
    state = jobstate.initial(job="train", namespace="ml", gpus=6, started_at=100.0, now=100.0)
    write(path, state)
    samples = scrape(port)
    assert samples[("distributetrain_job_phase", (*JOB, ("phase", "Planning")))] == 1.0
    assert samples[("distributetrain_gpus_requested", JOB)] == 6.0
    assert samples[("distributetrain_replans_total", JOB)] == 0.0
    # what PostTraining (another process) wrote later: the same endpoint, the new state
    state = jobstate.with_pod(state, PodState("train-worker-0", "worker", "node-1", 5, ready=True))
    state = jobstate.with_pod(state, PodState("train-chief", "chief", "node-3", 1, ready=True))
    for phase, at in (("Scheduling", 101.5), ("Launching", 103.0), ("Running", 104.0)):
        state = jobstate.enter(state, phase, at)
    state = jobstate.replace(state, replans=2, restarts=1)
    state = jobstate.with_progress(state, progress.Progress(epoch=2, epochs=20, step=14, loss=0.5,
                                                            accuracy=0.8, steps_per_s=12.5,
                                                            extra=(("val_loss", 0.4),)), 130.0)
    write(path, state)
    samples = scrape(port)
    assert samples[("distributetrain_job_phase", (*JOB, ("phase", "Running")))] == 1.0
    assert samples[("distributetrain_job_phase", (*JOB, ("phase", "Planning")))] == 0.0
    assert {dict(k[1])["phase"]: v for k, v in samples.items()
            if k[0] == "distributetrain_phase_reached_seconds"} == {
        "Planning": 0.0, "Scheduling": 1.5, "Launching": 3.0, "Running": 4.0}
    assert samples[("distributetrain_gpus_held", JOB)] == 6.0
    assert samples[("distributetrain_workers_ready", JOB)] == 1.0
    assert samples[("distributetrain_replans_total", JOB)] == 2.0
    assert samples[("distributetrain_restarts_total", JOB)] == 1.0
    assert samples[("distributetrain_first_step_seconds", JOB)] == 30.0
    assert samples[("distributetrain_training_epoch", JOB)] == 2.0
    assert samples[("distributetrain_training_epochs", JOB)] == 20.0
    assert samples[("distributetrain_training_step", JOB)] == 14.0
    assert samples[("distributetrain_training_loss", JOB)] == 0.5
    assert samples[("distributetrain_training_accuracy", JOB)] == 0.8
    assert samples[("distributetrain_training_steps_per_second", JOB)] == 12.5
    assert samples[("distributetrain_training_metric", (("job_name", "train"), ("name", "val_loss"),
                                                        ("namespace", "ml")))] == 0.4
    assert samples[("distributetrain_pod_info", (("gpus", "5"), *JOB[:1], *JOB[1:], ("node", "node-1"),
                                                 ("pod", "train-worker-0"), ("role", "worker")))] == 1.0
    # a file being rewritten or broken never breaks the endpoint
    path.write_text("{half")
    assert scrape(port) == {}


def test_a_taken_port_is_said_and_ends_the_server_alone(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "distributetrain.observe.metrics", "--state",
                               str(tmp_path / "s.json"), "--port", str(port), "--address", "127.0.0.1"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "the job goes on without them" in done.stderr


def test_every_ranks_step_time_and_the_skew(server: tuple[int, Path]) -> None:
    port, path = server
    state = jobstate.replace(jobstate.initial(job="train", namespace="ml", gpus=3, now=1000.0), ranks=(
        RankState(0, "train-chief", "node-1", 0.1), RankState(1, "train-worker-0", "node-2", 0.3),
        RankState(2, "train-worker-1", "node-3", 0.1), RankState(3, "train-worker-2", "node-4", None)))
    write(path, jobstate.loads(jobstate.dumps(state)))  # as the state file carries it
    samples = scrape(port)
    steps = {dict(labels)["rank"]: (dict(labels)["pod"], dict(labels)["node"], value)
             for (name, labels), value in samples.items() if name == "distributetrain_rank_step_seconds"}
    assert steps == {"0": ("train-chief", "node-1", 0.1), "1": ("train-worker-0", "node-2", 0.3),
                     "2": ("train-worker-1", "node-3", 0.1)}  # rank 3 has no step time yet
    assert samples[("distributetrain_rank_step_skew", JOB)] == pytest.approx(3.0)
