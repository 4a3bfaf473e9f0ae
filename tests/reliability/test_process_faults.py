"""Fault matrix with real processes (the process runtime: pods in their own network namespaces, real sshd in
the workers, the real launcher and horovodrun in the chief, Train.py with TensorFlow on the CPU): a worker's
training process killed mid-training, and a worker's node failing."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_support import (
    Factory,
    ManagerThread,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    pods_of,
    spec,
    wait_until,
)

from localcluster import TestCluster

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

TRAIN = ["python3", "/opt/distributetrain/Train.py", "--epochs", "500"]


def _hostname_of(pid: int) -> str | None:
    """The pod a process runs in: the hostname its UTS namespace carries (the kubelet sets the pod's name)."""
    try:
        root = Path(f"/proc/{pid}/root/etc/hostname")
        return root.read_text().strip() or None
    except OSError:
        return None


def _training_processes(pod: str) -> list[int]:
    """The Train.py processes inside `pod` (started there by horovodrun over ssh)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"Train.py" in cmdline and b"horovodrun" not in cmdline and b"sh\x00-c" not in cmdline \
                and _hostname_of(int(proc.name)) == pod:
            found.append(int(proc.name))
    return found


def _start(cluster: TestCluster) -> tuple[ManagerThread, dict[str, int]]:
    kube = kube_of(cluster)
    before = free_gpus(kube)
    job = spec(gpus="2", command=TRAIN, network_interface="eth0", schedule_timeout="120s", ssh_timeout="60s")
    manager = ManagerThread(kube_of(cluster), job).start()
    wait_until(lambda: re.search(r"epoch=1 ", manager.recorder.chief_out.getvalue()), timeout=240, every=0.5,
               message="the first epoch:\n" + manager.recorder.text)
    return manager, before


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    # two nodes of one GPU: a worker with 1 GPU on one, the chief with 1 on the other: 2 Horovod ranks
    return local_cluster_factory(nodes=[1, 1], runtime="process")


def test_worker_training_process_killed(cluster: TestCluster, row: Callable[..., object]) -> None:
    manager, before = _start(cluster)
    kube = kube_of(cluster)
    worker = pods_of(kube, "train")["train-worker-0"]
    worker_ip = worker["status"]["podIP"]
    victims = wait_until(lambda: _training_processes("train-worker-0"), timeout=30,
                         message="the worker's training process")
    fault_at = time.monotonic()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    code = manager.join(timeout=180)
    text = manager.recorder.text
    # the launcher in the chief names the rank, the worker's address and the cause; the manager passes the
    # training's failure through as the job's exit code
    assert code != 0, text
    assert re.search(rf"rank \d+ on {re.escape(worker_ip)} exited with", text), text
    # and the manager says which pod and node that address is
    node = worker["spec"]["nodeName"]
    assert re.search(rf"chief train-chief ended with exit code {code} \(rank \d+ on worker train-worker-0, "
                     rf"node {node}, {re.escape(worker_ip)}, exited with", text), text
    assert "final_accuracy" not in text
    detected = manager.recorder.first(r"ended with exit code|failed \(")
    assert detected is not None and manager.ended_at is not None
    left = leftovers(kube, "train")
    assert left in ({}, {"pods": ["train-chief"]}), left
    after = free_gpus(kube)
    assert after == before
    # no training process survives anywhere
    wait_until(lambda: not _training_processes("train-worker-0") and not _training_processes("train-chief"),
               timeout=60, message="every training process to end")
    row("worker's training process killed (real Horovod)", outcome=f"exit {code}", exit_code=code,
        detect_s=round(detected - fault_at, 3), cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count({k: [n for n in v if n != "train-chief"] for k, v in left.items()}),
        gpus_held=held(before, after), runtime="process",
        notes="the manager names the rank's pod, node and address (the cause: ssh's 255 for a killed rank)",
        extra={"manager_log_tail": text.splitlines()[-12:]})


def test_worker_node_fails_with_real_processes(cluster: TestCluster, row: Callable[..., object]) -> None:
    manager, before = _start(cluster)
    kube = kube_of(cluster)
    node = pods_of(kube, "train")["train-worker-0"]["spec"]["nodeName"]
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.fail_node(node))
    code = manager.join(timeout=180)
    text = manager.recorder.text
    assert code == 70, text
    assert "train-worker-0" in manager.message and node in manager.message
    detected = manager.recorder.first(r"failed \(")
    assert detected is not None and manager.ended_at is not None
    left = leftovers(kube, "train")
    assert left == {}, left
    after = free_gpus(kube)
    assert after == before
    wait_until(lambda: not _training_processes("train-worker-0") and not _training_processes("train-chief"),
               timeout=60, message="every training process to end")
    row("worker's node fails (real processes)", outcome=f"exit {code}", exit_code=code,
        detect_s=round(detected - fault_at, 3), cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count(left), gpus_held=held(before, after), runtime="process")


def _launcher_pid(pod: str) -> int | None:
    """The chief container's own process: the launcher, PID 1 of the container's PID namespace."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"distributetrain.chief.launcher" in cmdline and _hostname_of(int(proc.name)) == pod:
            return int(proc.name)
    return None


def test_chief_killed_with_real_processes(cluster: TestCluster, row: Callable[..., object]) -> None:
    manager, before = _start(cluster)
    kube = kube_of(cluster)
    launcher = wait_until(lambda: _launcher_pid("train-chief"), timeout=30, message="the chief's launcher")
    fault_at = time.monotonic()
    os.kill(launcher, signal.SIGKILL)
    code = manager.join(timeout=180)
    text = manager.recorder.text
    assert code == 137, text  # the chief's container was killed: its exit code is the job's
    assert "chief train-chief ended with exit code 137" in text
    detected = manager.recorder.first(r"ended with exit code")
    assert detected is not None and manager.ended_at is not None
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}, left
    after = free_gpus(kube)
    assert after == before
    # the worker's rank did not outlive the job: no zombie holding its GPU
    wait_until(lambda: not _training_processes("train-worker-0") and not _training_processes("train-chief"),
               timeout=60, message="every training process to end")
    row("chief killed (real processes: the launcher, SIGKILL)", outcome=f"exit {code}", exit_code=code,
        detect_s=round(detected - fault_at, 3), cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count(left) - 1, gpus_held=held(before, after), runtime="process",
        notes="no training process left on the worker")


def test_chief_node_fails_with_real_processes(cluster: TestCluster, row: Callable[..., object]) -> None:
    manager, before = _start(cluster)
    kube = kube_of(cluster)
    node = pods_of(kube, "train")["train-chief"]["spec"]["nodeName"]
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.fail_node(node))
    code = manager.join(timeout=180)
    text = manager.recorder.text
    assert code == 75, text
    assert "train-chief" in manager.message and node in manager.message
    detected = manager.recorder.first(r"failed \(")
    assert detected is not None and manager.ended_at is not None
    left = leftovers(kube, "train")
    assert left == {}, left
    after = free_gpus(kube)
    assert after == before
    wait_until(lambda: not _training_processes("train-worker-0") and not _training_processes("train-chief"),
               timeout=60, message="every training process to end")
    row("chief's node fails (real processes)", outcome=f"exit {code}", exit_code=code,
        detect_s=round(detected - fault_at, 3), cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count(left), gpus_held=held(before, after), runtime="process",
        notes="no training process left on the worker")
