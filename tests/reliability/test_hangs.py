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
Events a user reads) must name the worker, and must name no one while the two train alike.

The same freeze with a job that survives it, on nodes of 1, 1 and 1 GPU (the third a spare), through the real
CLI so that its Events are what `kubectl get events` shows:
- `--on-hang replace` (elastic, `--min-gpus 1`): the manager names the frozen worker, deletes it and places a
  replacement on the spare node (never back on the frozen one's); the chief's rank trains on alone meanwhile
  and Horovod grows back to 2; the job ends exit 0 with its accuracy.
- `--on-hang restart` (`--restarts 1`): the same, but the training stops with the worker and the chief's
  launcher relaunches it on the replacement from its last checkpoint; every epoch is reported once.
Two moments: mid-training (both ranks have sent heartbeats) and right after the first epoch, before any rank's
first periodic heartbeat: the frozen rank must still be told from the chief's rank that only waits for it."""

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
    process_cluster,
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
    # training is under way and rank 1 (the worker) has sent a periodic heartbeat (not only its first step's)
    wait_until(lambda: re.search(r"epoch=2 ", recorder.chief_out.getvalue())
               and re.search(r"dt-progress rank=1 step=\d+ step_s=", recorder.chief_out.getvalue()),
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


# ---- a hang the job survives: --on-hang replace (elastic) and restart ------------------------------------
ACCURACY_THRESHOLD = 0.85  # test_recovery.py's: what a plain run of Train.py reaches
# elastic, 2 ranks train ~2.5 epochs a second here and the chief's alone ~3; Horovod grew back 8 s after the
# replacement was placed (Ready in 1.3 s): 200 epochs leave a minute of slack for a slower growth, and the
# training ends at 2 ranks. A restart job is frozen by epoch 10-35 and redoes none: 100 are plenty
EPOCHS = {"replace": 200, "restart": 100}
MOMENTS = {
    # both ranks have sent a periodic heartbeat (every 10 s): the watchdog knows each one's last step
    "mid-training": r"dt-progress rank=1 step=\d+ step_s=",
    # the first epoch ended, no rank's periodic heartbeat has come yet
    "first-epoch": r"(?:^|:)epoch=1 ",
}
CASES_SURVIVED = [("replace", "mid-training"), ("restart", "mid-training"), ("restart", "first-epoch")]


@pytest.fixture
def spare_cluster(local_cluster_factory: Factory) -> TestCluster:
    # the chief and a worker on two nodes of one GPU; the third is where a replacement can go
    return process_cluster(local_cluster_factory, [1, 1, 1])


def _said(manager: ManagerProcess, pattern: str, after: float, timeout: float) -> float:
    """When the manager's output (its lines and the chief's) first matched `pattern` after `after`."""
    regex = re.compile(pattern)

    def seen() -> float | None:
        return next((t for t, line in list(manager.lines) if t >= after and regex.search(line)), None)

    deadline = time.monotonic() + timeout
    while (found := seen()) is None and time.monotonic() < deadline:
        if manager.proc.poll() is not None:  # ended: its last lines may still be on their way
            time.sleep(1.0)
            found = seen()
            break
        time.sleep(0.2)
    if found is None:
        raise AssertionError(f"no line matching {pattern!r}; output:\n{manager.output[-8000:]}")
    return found


def _epochs(manager: ManagerProcess, after: float = 0.0, before: float = float("inf")) -> list[int]:
    """The epochs rank 0 reported done (`epoch=E ...`), between two moments (monotonic)."""
    return [int(found[1]) for t, line in list(manager.lines)
            if after <= t < before and (found := re.search(r"(?:^|>:)epoch=(\d+) ", line))]


def _events(cluster: TestCluster, pod: str, reason: str) -> str:
    """The messages of `reason` Events on `pod`, as `kubectl get events` shows them."""
    return cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={pod},reason={reason}",
                           "-o", "jsonpath={.items[*].message}").stdout


@pytest.mark.parametrize(("on_hang", "moment"), CASES_SURVIVED,
                         ids=[f"{a}-{m}" for a, m in CASES_SURVIVED])
def test_a_frozen_worker_is_replaced_and_the_training_goes_on(
        on_hang: str, moment: str, spare_cluster: TestCluster, managers: list[ManagerProcess],
        row: Callable[..., object]) -> None:
    cluster = spare_cluster
    kube = kube_of(cluster)
    before = free_gpus(kube)
    epochs = EPOCHS[on_hang]
    mode = ["--min-gpus", "1"] if on_hang == "replace" else ["--restarts", "1"]
    manager = ManagerProcess(cluster, "--gpus", "2", "--image", IMAGE, "--job-name", "train",
                             "--network-interface", "eth0", "--schedule-timeout", "120s", "--ssh-timeout",
                             "60s", "--hang-timeout", "20s", "--on-hang", on_hang, *mode, "--",
                             "python3", "/opt/distributetrain/Train.py", "--epochs", str(epochs))
    managers.append(manager)
    _said(manager, MOMENTS[moment], 0.0, 300)
    pods = pods_of(kube, "train")
    worker, chief_node = pods["train-worker-0"], pods["train-chief"]["spec"]["nodeName"]
    node, address = worker["spec"]["nodeName"], worker["status"]["podIP"]
    frozen_at = time.monotonic()
    frozen = cluster.freeze("train-worker-0", match="Train.py")
    assert frozen.action == "frozen" and frozen.processes, frozen

    # named: the frozen worker's rank, pod, node, address and last step; not the chief's rank that waits
    detected = _said(manager, r"the training hung: rank \d+ on worker train-worker-0, node "
                              rf"{re.escape(node)}, {re.escape(address)}, last step \d+: fell silent .*"
                              rf"--on-hang {on_hang}$", frozen_at, 60)
    said = re.search(r"the training hung: (rank \d+ on .*)$", manager.output, re.MULTILINE)
    assert said is not None and "on chief" not in said[1], manager.output[-8000:]
    _said(manager, rf"--on-hang {on_hang}: deleted worker\(s\) train-worker-0; node\(s\) {re.escape(node)} "
                   "kept out of the re-plan", frozen_at, 30)
    # the replacement goes to the spare node: neither the frozen worker's nor the chief's
    joined = _said(manager, r"worker train-worker-1 Ready on ", frozen_at, 180)
    replaced_on = re.search(r"worker train-worker-1 Ready on (\S+) ", manager.output)
    assert replaced_on is not None and replaced_on[1] not in (node, chief_node), manager.output[-8000:]
    if on_hang == "replace":  # Horovod re-formed without the frozen rank and grew back to 2
        recovered = _said(manager, r"training runs on 2 of 2 GPU\(s\)", joined, 300)
        stopped = detected
        # the chief's rank trains alone until the replacement joins, unless the replacement (Ready a second
        # or two after the deletion) is in the hostfile before Horovod re-forms: then it re-forms at 2 at once
        alone = next((t for t, line in list(manager.lines) if detected <= t <= recovered
                      and "training runs on 1 of 2 GPU(s)" in line), None)
        how = (f"the chief's rank alone {alone - frozen_at:.1f} s" if alone is not None
               else "re-formed at 2 directly (the replacement already Ready)") + \
            f", 2 GPUs again {recovered - frozen_at:.1f} s"
    else:  # the launcher relaunched, and the new training made its first step
        relaunched = _said(manager, r"relaunching the training, from its latest checkpoint if it keeps one "
                                    r"\(relaunch 1 of 1\)", detected, 300)
        recovered = _said(manager, r"first_step_unix=", relaunched, 300)
        stopped = relaunched
        how = f"first step after the relaunch {recovered - frozen_at:.1f} s; every epoch 1-{epochs} once"
    # rank 0 completes no epoch while its peer is frozen: what it reported before is what was done
    done_before = max(_epochs(manager, before=stopped), default=0)

    code = manager.wait(timeout=600)
    output = manager.output
    assert code == 0, output[-8000:]
    # the Event a user reads on the frozen worker, which is gone
    assert "rank" in _events(cluster, "train-worker-0", events.TRAINING_HUNG), \
        cluster.kubectl("get", "events").stdout
    accuracy = float(re.findall(r"final_accuracy=([0-9.]+)", output)[-1])
    assert accuracy >= ACCURACY_THRESHOLD, output[-4000:]
    checksums = dict(re.findall(r"rank=(\d+) size=2 weights_sha256=([0-9a-f]{64})", output))
    assert sorted(checksums) == ["0", "1"] and len(set(checksums.values())) == 1, output[-4000:]
    reported = _epochs(manager)
    if on_hang == "restart":
        # resumed from the checkpoint of the last epoch done before the freeze: no epoch redone, none lost
        resumed = re.search(r"after 1 restart\(s\) \(the training resumed from epoch (\d+)\)", output)
        assert resumed is not None and int(resumed[1]) == done_before, output[-8000:]
        assert reported == list(range(1, epochs + 1)), reported
    else:
        assert reported[-1] == epochs, reported[-10:]
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}, left  # the frozen worker and its replacement gone
    after = free_gpus(kube)
    assert after == before
    wait_until(lambda: not any(training_processes(p) for p in ("train-chief", "train-worker-0",
                                                                "train-worker-1")),
               timeout=60, message="every training process to end")
    outcome = ("replaced on another node, back to 2 GPUs" if on_hang == "replace"
               else f"relaunched from epoch {done_before} on another node")
    notes = (f"names the frozen rank, its pod, node and last step; replacement on {replaced_on[1]} Ready "
             f"{joined - frozen_at:.1f} s after the freeze; {how}; final accuracy {accuracy:.4f}, one "
             "checksum on 2 ranks")
    when = "mid-training" if moment == "mid-training" else "right after the first epoch"
    row(f"worker's training frozen {when}, --on-hang {on_hang} "
        + ("(elastic, --min-gpus 1)" if on_hang == "replace" else "(--restarts 1)") + ", --hang-timeout 20s",
        outcome=f"{outcome}; exit {code}", exit_code=code, detect_s=round(detected - frozen_at, 3),
        objects_left=count(left) - 1, gpus_held=held(before, after), runtime="process", notes=notes,
        extra={"recovered_s": recovered - frozen_at, "replacement_ready_s": joined - frozen_at,
               "done_before": done_before, "accuracy": accuracy,
               "manager_lines": [f"+{t - frozen_at:.1f}s {line}" for t, line in manager.lines
                                 if t >= frozen_at and "distributetrain:" in line][:30]})
