"""Fault matrix with real processes (the process runtime: pods in their own network namespaces, real sshd in
the workers, the real launcher and horovodrun in the chief, Train.py with TensorFlow on the CPU): a worker's
training process or the chief's launcher killed mid-training, or the node of either failing. One test,
parametrised by the fault: each case starts the same 2-rank job, breaks one pod once the first epoch is done,
and checks the same outcome (the exit code, what the manager names, nothing left but the kept chief, every GPU
free, no rank alive), writing one row of the fault matrix."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from localcluster import TestCluster
from reliability_support import (
    Factory,
    ManagerThread,
    count,
    free_gpus,
    held,
    hostname_of,
    kube_of,
    leftovers,
    pods_of,
    spec,
    training_processes,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

TRAIN = ["python3", "/opt/distributetrain/Train.py", "--epochs", "500"]


def _launcher_pid(pod: str) -> int | None:
    """The chief container's own process: the launcher, PID 1 of the container's PID namespace."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"distributetrain.chief.launcher" in cmdline and hostname_of(int(proc.name)) == pod:
            return int(proc.name)
    return None


def _start(cluster: TestCluster) -> tuple[ManagerThread, dict[str, int]]:
    kube = kube_of(cluster)
    before = free_gpus(kube)
    job = spec(gpus="2", command=TRAIN, network_interface="eth0", schedule_timeout="120s", ssh_timeout="60s")
    manager = ManagerThread(kube_of(cluster), job).start()
    wait_until(lambda: re.search(r"epoch=1 ", manager.recorder.chief_out.getvalue()), timeout=240, every=0.5,
               message="the first epoch:\n" + manager.recorder.text)
    return manager, before


# ---- the faults: each breaks one pod of the running job and returns the moment it did --------------------
def _kill_training(cluster: TestCluster, pod: dict[str, Any]) -> float:
    """SIGKILL to the Train.py rank inside the pod (started there by horovodrun over ssh)."""
    victims = wait_until(lambda: training_processes(pod["metadata"]["name"]), timeout=30,
                         message="the pod's training process")
    fault_at = time.monotonic()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    return fault_at


def _kill_launcher(cluster: TestCluster, pod: dict[str, Any]) -> float:
    """SIGKILL to the chief container's own process, the launcher."""
    launcher = wait_until(lambda: _launcher_pid(pod["metadata"]["name"]), timeout=30,
                          message="the chief's launcher")
    fault_at = time.monotonic()
    os.kill(launcher, signal.SIGKILL)
    return fault_at


def _fail_node(cluster: TestCluster, pod: dict[str, Any]) -> float:
    """The pod's node fails: NotReady, its pods' processes gone."""
    fault_at = time.monotonic()
    cluster.call(cluster.runtime.fail_node(pod["spec"]["nodeName"]))
    return fault_at


# ---- what the manager must say of each ---------------------------------------------------------------------
def _names_the_rank(manager: ManagerThread, pod: dict[str, Any], code: int) -> None:
    """The launcher in the chief names the rank, the worker's address and the cause; the manager passes the
    training's failure through as the job's exit code, and says which pod and node that address is."""
    text = manager.recorder.text
    address, node = re.escape(pod["status"]["podIP"]), pod["spec"]["nodeName"]
    assert re.search(rf"rank \d+ on {address} exited with", text), text
    assert re.search(rf"chief train-chief ended with exit code {code} \(rank \d+ on worker train-worker-0, "
                     rf"node {node}, {address}, exited with", text), text
    assert "final_accuracy" not in text


def _names_the_pod_and_node(manager: ManagerThread, pod: dict[str, Any], code: int) -> None:
    assert pod["metadata"]["name"] in manager.message and pod["spec"]["nodeName"] in manager.message, \
        manager.message


def _names_the_chiefs_exit(manager: ManagerThread, pod: dict[str, Any], code: int) -> None:
    # the chief's container was killed: its exit code is the job's
    assert f"chief train-chief ended with exit code {code}" in manager.recorder.text, manager.recorder.text


@dataclass(frozen=True)
class Fault:
    """One row of the matrix: what breaks while the job trains, and what the manager must make of it."""

    row: str  # the row's name in docs/reliability.md
    pod: str  # the job's pod it hits
    inject: Callable[[TestCluster, dict[str, Any]], float]
    exit_code: int | None  # the job's; None: the training's own failure passed through (anything but 0)
    says: Callable[[ManagerThread, dict[str, Any], int], None]
    detected_by: str  # the manager's line that shows it noticed
    leaves: tuple[dict[str, list[str]], ...]  # what may be left of the job: nothing, or the kept chief
    notes: str = ""


NOTHING: dict[str, list[str]] = {}
KEPT_CHIEF = {"pods": ["train-chief"]}
NO_RANK_LEFT = "no training process left on the worker"
FAULTS = [
    Fault("worker's training process killed (real Horovod)", "train-worker-0", _kill_training, None,
          _names_the_rank, r"ended with exit code|failed \(", (NOTHING, KEPT_CHIEF),
          "the manager names the rank's pod, node and address (the cause: ssh's 255 for a killed rank)"),
    Fault("worker's node fails (real processes)", "train-worker-0", _fail_node, 70, _names_the_pod_and_node,
          r"failed \(", (NOTHING,)),
    Fault("chief killed (real processes: the launcher, SIGKILL)", "train-chief", _kill_launcher, 137,
          _names_the_chiefs_exit, r"ended with exit code", (KEPT_CHIEF,), NO_RANK_LEFT),
    Fault("chief's node fails (real processes)", "train-chief", _fail_node, 75, _names_the_pod_and_node,
          r"failed \(", (NOTHING,), NO_RANK_LEFT),
]


@pytest.fixture
def cluster(local_cluster_factory: Factory) -> TestCluster:
    # two nodes of one GPU: a worker with 1 GPU on one, the chief with 1 on the other: 2 Horovod ranks
    return local_cluster_factory(nodes=[1, 1], runtime="process")


@pytest.mark.parametrize("fault", FAULTS, ids=["worker-training-killed", "worker-node-fails", "chief-killed",
                                                "chief-node-fails"])
def test_a_fault_while_training_for_real(fault: Fault, cluster: TestCluster,
                                         row: Callable[..., object]) -> None:
    manager, before = _start(cluster)
    kube = kube_of(cluster)
    pod = pods_of(kube, "train")[fault.pod]
    fault_at = fault.inject(cluster, pod)
    code = manager.join(timeout=180)
    text = manager.recorder.text
    assert (code != 0) if fault.exit_code is None else (code == fault.exit_code), text
    fault.says(manager, pod, code)
    detected = manager.recorder.first(fault.detected_by)
    assert detected is not None and manager.ended_at is not None
    left = leftovers(kube, "train")
    assert left in fault.leaves, left
    after = free_gpus(kube)
    assert after == before
    # no training process survives anywhere: no rank outlives the job holding its GPU
    wait_until(lambda: not training_processes("train-worker-0") and not training_processes("train-chief"),
               timeout=60, message="every training process to end")
    row(fault.row, outcome=f"exit {code}", exit_code=code, detect_s=round(detected - fault_at, 3),
        cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count({kind: [n for n in names if n != "train-chief"] for kind, names in left.items()}),
        gpus_held=held(before, after), runtime="process", notes=fault.notes,
        extra={"manager_log_tail": text.splitlines()[-12:]})
