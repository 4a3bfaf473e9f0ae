"""What keeps a job at its size (recovery.py, pure): when a worker counts as lost, how many GPUs to add now,
the names of replacements, and the chief's lines a recovery is read from."""

from __future__ import annotations

from typing import Any

import pytest

from distributetrain import naming
from distributetrain.hostfile import HostSlots
from distributetrain.manager.recovery import (
    Member,
    Recovery,
    elastic_size,
    gpus_to_add,
    hostfile_entries,
    lost_reason,
    next_index,
    node_is_ready,
    resumed_epoch,
)


def _recovery(mode: str, *, gpus: int = 6, min_gpus: int | None = None, max_gpus: int | None = None,
              restarts: int = 0) -> Recovery:
    made = Recovery.of(mode=mode, gpus=gpus, min_gpus=min_gpus, max_gpus=max_gpus, restarts=restarts,
                       replace_timeout=60.0, grow_interval=30.0)
    assert made is not None
    return made


def _pod(phase: str = "Running", *, deleting: bool = False, reason: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train-worker-0"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status["reason"] = reason
    return {"metadata": metadata, "spec": {"nodeName": "node-1"}, "status": status}


def test_no_mode_no_recovery() -> None:
    assert Recovery.of(mode=None, gpus=6, min_gpus=None, max_gpus=None, restarts=0, replace_timeout=1.0,
                       grow_interval=1.0) is None


def test_elastic_defaults_its_bounds_to_the_target_and_never_relaunches() -> None:
    elastic = _recovery(naming.RECOVERY_ELASTIC, min_gpus=2, restarts=3)
    assert (elastic.minimum, elastic.target, elastic.maximum, elastic.restarts) == (2, 6, 6, 0)
    assert elastic.elastic


def test_a_restart_job_needs_every_gpu() -> None:
    restart = _recovery(naming.RECOVERY_RESTART, restarts=2)
    assert (restart.minimum, restart.target, restart.maximum, restart.restarts) == (6, 6, 6, 2)
    assert not restart.elastic


@pytest.mark.parametrize(("pod", "node_ready", "expected"), [
    (None, None, "its pod disappeared"),
    (_pod(deleting=True), None, "its pod is being deleted"),
    (_pod("Failed", reason="Evicted"), None, "Evicted"),
    (_pod("Succeeded"), None, "Succeeded"),
    (_pod(), False, "its node node-1 is NotReady"),
])
def test_a_worker_is_lost_when(pod: dict[str, Any] | None, node_ready: bool | None, expected: str) -> None:
    reason = lost_reason(pod, node_ready=node_ready)
    assert reason is not None and expected in reason


@pytest.mark.parametrize("node_ready", [None, True])
def test_a_running_worker_on_a_ready_node_is_not_lost(node_ready: bool | None) -> None:
    assert lost_reason(_pod(), node_ready=node_ready) is None


@pytest.mark.parametrize(("mode", "running", "free", "expected"), [
    # elastic, short of its target: it trains meanwhile, so it takes whatever is free
    (naming.RECOVERY_ELASTIC, 1, 3, 3),
    (naming.RECOVERY_ELASTIC, 1, 9, 5),
    (naming.RECOVERY_ELASTIC, 1, 0, 0),
    # restart, short of its target: a relaunch needs every GPU, so all of the shortfall or nothing
    (naming.RECOVERY_RESTART, 1, 3, 0),
    (naming.RECOVERY_RESTART, 1, 5, 5),
    (naming.RECOVERY_RESTART, 6, 9, 0),
])
def test_gpus_to_add(mode: str, running: int, free: int, expected: int) -> None:
    assert gpus_to_add(_recovery(mode, min_gpus=1 if mode == naming.RECOVERY_ELASTIC else None,
                                 restarts=1), running=running, free=free) == expected


def test_an_elastic_job_grows_to_its_maximum_with_what_is_free() -> None:
    elastic = _recovery(naming.RECOVERY_ELASTIC, min_gpus=2, max_gpus=10)
    assert gpus_to_add(elastic, running=6, free=3) == 3
    assert gpus_to_add(elastic, running=6, free=9) == 4
    assert gpus_to_add(elastic, running=10, free=9) == 0
    assert gpus_to_add(_recovery(naming.RECOVERY_ELASTIC, min_gpus=2), running=6, free=9) == 0


def test_a_replacement_never_reuses_a_name() -> None:
    assert next_index([]) == 0
    assert next_index(["train-worker-0", "train-worker-3", "train-chief"]) == 4


def test_hostfile_entries_name_each_address() -> None:
    hosts, names = hostfile_entries([Member("train-worker-2", "node-4", "10.244.4.2", 5)])
    assert hosts == [HostSlots("10.244.4.2", 5)]
    assert names == {"10.244.4.2": "train-worker-2"}


def test_the_chiefs_lines_a_recovery_is_read_from() -> None:
    assert elastic_size(b"[0]<stdout>:elastic size=1 from_epoch=7\n") == (1, 7)
    assert elastic_size(b"epoch=7 accuracy=0.9\n") is None
    assert resumed_epoch(b"[0]<stdout>:resumed_from_epoch=4\n") == 4
    assert resumed_epoch(b"dt-progress epoch=4/12\n") is None


def test_node_ready_reads_the_ready_condition() -> None:
    def node(status: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                          {"type": "Ready", "status": status}]}}
    assert node_is_ready(node("True"))
    assert not node_is_ready(node("False"))
    assert not node_is_ready(node("Unknown"))
    assert not node_is_ready({})
