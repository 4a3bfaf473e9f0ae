"""A hang with real processes (the process runtime: real sshd in the worker, the real launcher and horovodrun
in the chief, Train.py with TensorFlow on the CPU): the worker's training processes frozen mid-training (the
local cluster's cgroup freezer, `localcluster fault freeze`) while its pod stays Running and Ready, and its
sshd answers. Nothing about the pods changes: only the ranks' heartbeats tell.

Two hang timeouts, one test: 20 s, shorter than Gloo's own 30 s collective timeout, so the watchdog acts;
60 s (the issue's), so Gloo's timeout fails rank 0 first and the manager must blame the frozen rank, not
rank 0 that only waited. Either way the job ends naming the frozen worker's pod, node and last step, exit
79, nothing left but the kept chief, every GPU free, no rank alive.

A straggler, on the same cluster: the worker's training held to a share of a CPU (a cgroup CPU quota,
`localcluster fault throttle`) while it trains. Every rank's wall step time stays the same - the chief waits
in the all-reduce for the worker - so only the ranks' compute times tell; the manager (the real CLI, whose
Events a user reads) must name the worker, and must name no one while the two train alike."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable

import pytest
from localcluster import TestCluster
from reliability_support import (
    IMAGE,
    Factory,
    ManagerProcess,
    ManagerThread,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    pods_of,
    spec,
    training_processes,
    wait_until,
)

from distributetrain.errors import EXIT_HUNG
from distributetrain.observe import events, heartbeat

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

TRAIN = ["python3", "/opt/distributetrain/Train.py", "--epochs", "500"]
# the hang timeout, and who ends the hang: the watchdog, or Gloo's 30 s timeout failing rank 0 first
CASES = [(20.0, "the watchdog (no step for --hang-timeout)"),
         (60.0, "Gloo's timeout failed rank 0 first; the manager blamed the frozen rank")]


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    # two nodes of one GPU: the chief (rank 0) on one, a worker (rank 1) on the other
    return local_cluster_factory(nodes=[1, 1], runtime="process")


@pytest.mark.parametrize(("hang_timeout", "ended_by"), CASES, ids=["watchdog", "gloo-timeout"])
def test_a_frozen_worker_ends_the_job_naming_it(hang_timeout: float, ended_by: str, cluster: TestCluster,
                                                row: Callable[..., object]) -> None:
    kube = kube_of(cluster)
    before = free_gpus(kube)
    job = spec(gpus="2", command=TRAIN, network_interface="eth0", schedule_timeout="120s", ssh_timeout="60s",
               hang_timeout=f"{hang_timeout:g}s")
    manager = ManagerThread(kube, job).start()
    recorder = manager.recorder
    # training is under way and rank 1 (the worker) has beaten at least once
    wait_until(lambda: re.search(r"epoch=2 ", recorder.chief_out.getvalue())
               and re.search(r"dt-progress rank=1 step=\d+", recorder.chief_out.getvalue()),
               timeout=300, every=0.5, message="the second epoch and rank 1's heartbeat:\n" + recorder.text)
    worker = pods_of(kube, "train")["train-worker-0"]
    frozen_at = time.monotonic()
    frozen = cluster.freeze("train-worker-0", match="Train.py")
    assert frozen.action == "frozen" and frozen.processes, frozen
    code = manager.join(timeout=180)
    text = recorder.text
    assert code == EXIT_HUNG, text
    # the manager names the frozen worker, its node and its last step; not rank 0, which only waited
    node, address = worker["spec"]["nodeName"], worker["status"]["podIP"]
    said = re.search(rf"the training hung: rank 1 on worker train-worker-0, node {re.escape(node)}, "
                     rf"{re.escape(address)}, last step (\d+): fell silent", text)
    assert said is not None, text
    if hang_timeout < 30:  # the watchdog stopped the job
        assert "train-worker-0" in manager.message, manager.message
    else:  # Gloo failed rank 0; the manager's last line puts the blame where it belongs
        assert re.search(r"chief train-chief ended with exit code 79 \(rank 1 on worker train-worker-0, .*; "
                         r"rank 0 on chief train-chief, .*, exited with \d+ waiting for it\)", text), text
    detected = recorder.first(r"the training hung")
    assert detected is not None and manager.ended_at is not None
    left = leftovers(kube, "train")
    assert left in ({}, {"pods": ["train-chief"]}), left
    assert free_gpus(kube) == before
    wait_until(lambda: not training_processes("train-worker-0") and not training_processes("train-chief"),
               timeout=60, message="every training process to end")
    row(f"worker's training frozen (cgroup freezer; pod Running and Ready), --hang-timeout {hang_timeout:g}s",
        outcome=f"exit {code}", exit_code=code, detect_s=round(detected - frozen_at, 3),
        cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count({kind: [n for n in names if n != "train-chief"] for kind, names in left.items()}),
        gpus_held=held(before, free_gpus(kube)), runtime="process",
        notes=f"ended by {ended_by}; names rank 1, its pod, node and last step {said[1]}",
        extra={"manager_lines": [f"+{at - frozen_at:.1f}s {line}" for at, line in recorder.lines
                                 if at >= frozen_at],
               "heartbeats": [line for _, line in recorder.chief_lines if "step_s=" in line][-6:],
               "manager_log_tail": text.splitlines()[-12:]})


STRAGGLER_CPU = 0.25  # the worker's training held to a quarter of a CPU: at least half its unthrottled speed
HEALTHY_BEATS = 5     # heartbeats of each rank with compute times before the throttle: no straggler in them


def _beats(output: str, rank: int) -> list[heartbeat.Beat]:
    found = (heartbeat.parse(line) for line in output.splitlines() if "dt-progress rank=" in line)
    return [b for b in found if b is not None and b.rank == rank and b.compute_seconds is not None]


def test_a_throttled_worker_is_reported_as_a_straggler_and_a_healthy_run_names_no_one(
        cluster: TestCluster, managers: list[ManagerProcess], row: Callable[..., object]) -> None:
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerProcess(cluster, "--gpus", "2", "--image", IMAGE, "--job-name", "train",
                             "--network-interface", "eth0", "--schedule-timeout", "120s", "--ssh-timeout",
                             "60s", "--", *TRAIN)
    managers.append(manager)
    # healthy: both ranks train alike for HEALTHY_BEATS heartbeats each, each beat judged, none reported
    wait_until(lambda: all(len(_beats(manager.output, r)) >= HEALTHY_BEATS for r in (0, 1)), timeout=300,
               every=1, message="both ranks' heartbeats with compute times:\n" + manager.output)
    assert "straggler:" not in manager.output, manager.output
    worker = pods_of(kube, "train")["train-worker-0"]
    throttled_at = time.monotonic()
    throttled = cluster.throttle("train-worker-0", STRAGGLER_CPU, match="Train.py")
    assert throttled.processes, throttled
    step_at_throttle = _beats(manager.output, 1)[-1].step
    detected = manager.wait_for(r"straggler: rank 1 on ", timeout=150)
    node = worker["spec"]["nodeName"]
    said = re.search(rf"straggler: rank 1 on worker train-worker-0, node {re.escape(node)} computes a step "
                     r"\(forward and backward, before the all-reduce\) in ([\d.e-]+)s a step, ([\d.]+) "
                     r"times the other ranks' median", manager.output)
    assert said is not None, manager.output
    assert "straggler: rank 0" not in manager.output  # the chief, which waited for it, is not named
    # the Event on the worker's pod, as `kubectl get events` shows it to a user
    wait_until(lambda: events.STRAGGLER in cluster.kubectl(
        "get", "events", "--field-selector", "involvedObject.name=train-worker-0", "-o",
        "jsonpath={.items[*].reason}").stdout, timeout=30, message="the Straggler Event on train-worker-0")
    message = cluster.kubectl("get", "events", "--field-selector",
                              f"involvedObject.name=train-worker-0,reason={events.STRAGGLER}", "-o",
                              "jsonpath={.items[0].message}").stdout
    assert "rank 1 on worker train-worker-0" in message, message
    steps_to_report = max(b.step for b in _beats(manager.output, 1)) - step_at_throttle
    # reported once: the job trains on (no --replace-stragglers); the user stops it
    stopped_at = manager.signal(signal.SIGTERM)
    code = manager.wait()
    assert leftovers(kube, "train") == {}, manager.output
    assert free_gpus(kube) == before
    row(f"worker's training throttled to {STRAGGLER_CPU:g} CPU (cgroup cpu quota) mid-training",
        outcome=f"reported as a straggler; manager stopped, exit {code}", exit_code=code,
        detect_s=round(detected - throttled_at, 3), cleanup_s=round(time.monotonic() - stopped_at, 3),
        objects_left=0, gpus_held=held(before, free_gpus(kube)), runtime="process",
        notes=f"names rank 1, its pod and node; compute {said[2]}x the chief's; no straggler in "
              f"{HEALTHY_BEATS} healthy heartbeats of each rank before",
        extra={"steps_to_report": steps_to_report,
               "compute_s": [(b.rank, b.compute_seconds) for r in (0, 1) for b in _beats(manager.output, r)],
               "manager_log_tail": manager.output.splitlines()[-12:]})
