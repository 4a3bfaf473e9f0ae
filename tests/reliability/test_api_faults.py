"""Fault matrix, the Kubernetes API: the API server restarting and watch streams cut mid-job (what happened
meanwhile must be neither lost nor seen twice), resourceVersions compacted away (410: list again), and
injected failures (500, 503, 429 with Retry-After, 409 on create): bounded retries with backoff, then a clear
failure and a full cleanup."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

import pytest
from localcluster import TestCluster
from reliability_support import (
    Factory,
    ManagerThread,
    chief_exits,
    chief_runs_forever,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    running_job,
    spec,
    wait_until,
)

CHIEF_LINES = ["epoch 1 loss 0.9", "epoch 2 loss 0.5", "epoch 3 loss 0.2"]


def _training(cluster: TestCluster, manager: ManagerThread) -> None:
    kube = kube_of(cluster)
    wait_until(lambda: running_job(kube, "train", workers=1) and "supervising" in manager.recorder.text,
               timeout=30, message="the job to be training")
    wait_until(lambda: "epoch 1" in manager.recorder.chief_out.getvalue(), timeout=10,
               message="the chief's log to reach the manager")
    time.sleep(0.3)


def _restart_in_background(cluster: TestCluster, down: float) -> threading.Thread:
    thread = threading.Thread(target=cluster.restart, kwargs={"down_seconds": down}, daemon=True)
    thread.start()
    return thread


def _log(cluster: TestCluster, text: str) -> None:
    cluster.call(cluster.runtime.append_log("default", "train-chief", text))  # type: ignore[attr-defined]


def _chief_exit(cluster: TestCluster, code: int) -> None:
    cluster.call(cluster.runtime.exit_container("default", "train-chief", code))  # type: ignore[attr-defined]


@pytest.mark.parametrize("compacted", [False, True], ids=["resume", "relist-410"])
def test_api_server_restart_mid_job(local_cluster_factory: Factory, caplog: pytest.LogCaptureFixture,
                                    row: Callable[..., object], compacted: bool) -> None:
    """While the API server is down the chief logs more and ends: after the restart the manager must see
    that end (from its last resourceVersion, or by listing again when that version is gone) and copy every
    log line exactly once."""
    caplog.set_level(logging.INFO, logger="distributetrain")
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube_of(cluster), spec()).start()
    _training(cluster, manager)

    restart = _restart_in_background(cluster, down=1.5)
    time.sleep(0.3)  # the server is down now: every stream was cut
    fault_at = time.monotonic()
    _log(cluster, "epoch 2 loss 0.5\nepoch 3 loss 0.2\n")
    _chief_exit(cluster, 0)
    if compacted:
        cluster.compact()  # etcd compaction: the manager's last resourceVersion is now too old
    restart.join(30)
    code = manager.join()
    assert code == 0, manager.recorder.text

    watch_logs = [r.getMessage() for r in caplog.records if r.name == "distributetrain.kube.watch"]
    if compacted:
        assert any("too old; listing again" in m for m in watch_logs), watch_logs
    else:
        assert any(re.search(r"resuming from \d+", m) for m in watch_logs) or not any(
            "too old" in m for m in watch_logs), watch_logs
        assert not any("too old" in m for m in watch_logs), watch_logs
    chief_log = manager.recorder.chief_out.getvalue().splitlines()
    assert [line for line in chief_log if line.startswith("epoch")] == CHIEF_LINES  # none lost, none twice
    assert "chief train-chief ended with exit code 0" in manager.recorder.text
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    detected = manager.recorder.first("ended with exit code")
    assert detected is not None and manager.ended_at is not None
    row("API server restarted mid-job" + (", history compacted (410)" if compacted else ""),
        outcome="exit 0, chief's end seen once", exit_code=code, detect_s=round(detected - fault_at, 3),
        cleanup_s=round(manager.ended_at - detected, 3), objects_left=count(left) - 1,
        gpus_held=held(before, after), notes="down 1.5 s; detect includes the downtime")


def test_watch_streams_cut_repeatedly(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube_of(cluster), spec()).start()
    _training(cluster, manager)
    cuts = 0
    for line in CHIEF_LINES[1:]:
        cuts += cluster.cut_watches()
        _log(cluster, line + "\n")
        time.sleep(0.3)
    assert cuts >= 2
    fault_at = time.monotonic()
    cluster.cut_watches()
    _chief_exit(cluster, 0)
    code = manager.join()
    assert code == 0, manager.recorder.text
    chief_log = manager.recorder.chief_out.getvalue().splitlines()
    assert [line for line in chief_log if line.startswith("epoch")] == CHIEF_LINES
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    detected = manager.recorder.first("ended with exit code")
    assert detected is not None and manager.ended_at is not None
    row("watch streams cut mid-job (3 times)", outcome="exit 0", exit_code=code,
        detect_s=round(detected - fault_at, 3), cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count(left) - 1, gpus_held=held(before, after))


@pytest.mark.parametrize("code,retry_after", [(500, None), (503, None), (429, 1)], ids=["500", "503", "429"])
def test_transient_api_errors_are_retried(local_cluster_factory: Factory, caplog: pytest.LogCaptureFixture,
                                          row: Callable[..., object], code: int,
                                          retry_after: int | None) -> None:
    """Two failures in a row on the first worker's create, and one on the inventory's pod list: retried, the
    job runs to the end as if nothing happened."""
    caplog.set_level(logging.WARNING, logger="distributetrain")
    cluster = local_cluster_factory(behaviors=[chief_exits(0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    on_create = cluster.inject_fault(code, verb="create", resource="pods", count=2, retry_after=retry_after)
    on_list = cluster.inject_fault(code, verb="list", resource="pods", namespace=None, count=1,
                                   retry_after=retry_after)
    started = time.monotonic()
    manager = ManagerThread(kube_of(cluster), spec()).start()
    result = manager.join()
    assert result == 0, manager.recorder.text
    assert (on_create.hits, on_list.hits) == (2, 1)
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 3, retries
    assert all(f" {code} " in m or f": {code} " in m for m in retries), retries
    if retry_after is not None:
        assert all("retrying in 1.00s" in m for m in retries), retries  # the server's Retry-After
    else:
        # exponential backoff with jitter: attempt k of one request waits 0.25 s * 2^(k-1), times 0.5..1.5
        for message in retries:
            match = re.search(r"retrying in ([0-9.]+)s \(attempt (\d+) of 6\)", message)
            assert match is not None, message
            pause, attempt = float(match[1]), int(match[2])
            assert 0.125 * 2 ** (attempt - 1) - 0.01 <= pause <= 0.375 * 2 ** (attempt - 1) + 0.01, message
        assert any("(attempt 2 of 6)" in m for m in retries)  # the same create retried twice
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    assert manager.ended_at is not None
    row(f"API answers {code} " + (f"(Retry-After {retry_after}) " if retry_after else "") + "3 times",
        outcome="retried, exit 0", exit_code=result, detect_s=None,
        cleanup_s=None, objects_left=count(left) - 1, gpus_held=held(before, after),
        notes=f"job wall time {manager.ended_at - started:.2f} s with 3 retries")


@pytest.mark.parametrize("code", [500, 503, 429])
def test_persistent_api_errors_fail_clearly_and_clean_up(local_cluster_factory: Factory,
                                                         row: Callable[..., object], code: int) -> None:
    cluster = local_cluster_factory(behaviors=[chief_exits(0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    fault = cluster.inject_fault(code, verb="create", resource="pods", count=1000,
                                 retry_after=1 if code == 429 else None)
    started = time.monotonic()
    manager = ManagerThread(kube_of(cluster), spec()).start()
    result = manager.join()
    cluster.cluster.faults.clear()
    assert result == 72, manager.recorder.text
    assert fault.hits == 6  # bounded: Kube's attempts, then give up
    assert f"create pods default/train-worker-0: the API server answered {code}" in manager.message
    assert "gave up after 6 attempts" in manager.message
    assert "deleting all it created" in manager.recorder.text
    left = leftovers(kube, "train")
    assert left == {}  # the Secret and the NetworkPolicy made before the failure are gone too
    after = free_gpus(kube)
    assert after == before
    detected = manager.recorder.first(r"failed \(")
    assert detected is not None and manager.ended_at is not None
    row(f"API answers {code} on every pod create", outcome="exit 72 after 6 attempts", exit_code=result,
        detect_s=round(detected - started, 3), cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count(left), gpus_held=held(before, after),
        notes="detect = time spent retrying with backoff")


@pytest.mark.parametrize("times", [1, 1000], ids=["once", "always"])
def test_conflict_on_create(local_cluster_factory: Factory, row: Callable[..., object], times: int) -> None:
    """409 on the hostfile's create while no such object exists: a conflict that goes away is retried; one
    that stays fails the job clearly, and everything made before it (workers, Secret) is deleted."""
    cluster = local_cluster_factory(behaviors=[chief_exits(0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    fault = cluster.inject_fault(409, verb="create", resource="configmaps", count=times)
    started = time.monotonic()
    manager = ManagerThread(kube_of(cluster), spec()).start()
    result = manager.join()
    cluster.cluster.faults.clear()
    left = leftovers(kube, "train")
    after = free_gpus(kube)
    assert after == before
    if times == 1:
        assert result == 0, manager.recorder.text
        assert left == {"pods": ["train-chief"]}
        row("API answers 409 once on create (the hostfile)", outcome="retried, exit 0", exit_code=result,
            objects_left=count(left) - 1, gpus_held=held(before, after))
        return
    assert result == 72, manager.recorder.text
    assert fault.hits <= 5  # bounded
    assert "ConfigMap default/train-hostfile already exists and was not created by this manager" in \
        manager.message
    assert "--job-name" in manager.message
    assert left == {}  # the workers made before the 409 are gone with the Secret
    detected = manager.recorder.first(r"failed \(")
    assert detected is not None and manager.ended_at is not None
    row("API answers 409 on every create of the hostfile", outcome=f"exit 72 after {fault.hits} attempts",
        exit_code=result, detect_s=round(detected - started, 3),
        cleanup_s=round(manager.ended_at - detected, 3),
        objects_left=count(left), gpus_held=held(before, after), notes="detect from the manager's start")


def test_someone_elses_object_with_our_name_is_left_alone(local_cluster_factory: Factory,
                                                         row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_exits(0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    kube.create({"apiVersion": "v1", "kind": "Secret",
                 "metadata": {"name": "train-ssh", "namespace": "default"},
                 "stringData": {"token": "not ours"}})
    manager = ManagerThread(kube_of(cluster), spec()).start()
    result = manager.join()
    assert result == 72, manager.recorder.text
    assert "Secret default/train-ssh already exists and was not created by this manager" in manager.message
    assert kube.get("secrets", "default", "train-ssh") is not None  # never touched: not labelled as ours
    left = leftovers(kube, "train")
    assert left == {}
    after = free_gpus(kube)
    assert after == before
    row("409: an unlabelled object already has the job's Secret name", outcome="exit 72, foreign object kept",
        exit_code=result, objects_left=count(left), gpus_held=held(before, after))


# ---- outages while the job runs (issue 25): the job must outlive them ------------------------------------
@pytest.mark.parametrize(("mode", "seconds"), [("refuse", 12.0), ("hang", 8.0), ("429", 12.0), ("503", 8.0)])
def test_a_running_job_outlives_an_api_outage(local_cluster_factory: Factory, row: Callable[..., object],
                                              mode: str, seconds: float) -> None:
    """Twice the bounded retries of creation (6 attempts: ~5 s of 429s, ~8 s of refusals) and more: while the
    job runs the manager retries for --api-outage-tolerance, the chief's log is copied once, every line,
    and what the chief did meanwhile (it ended) is judged once the API answers."""
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube_of(cluster), spec()).start()
    _training(cluster, manager)
    fault_at = time.monotonic()
    with cluster.api_outage(mode, seconds=seconds, retry_after=2):
        _log(cluster, "epoch 2 loss 0.5\nepoch 3 loss 0.2\n")
        time.sleep(seconds / 2)
        _chief_exit(cluster, 0)
        time.sleep(seconds / 2)
    code = manager.join()
    assert code == 0, manager.recorder.text
    chief_log = manager.recorder.chief_out.getvalue().splitlines()
    assert [line for line in chief_log if line.startswith("epoch")] == CHIEF_LINES  # none lost, none twice
    assert "chief train-chief ended with exit code 0" in manager.recorder.text
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    detected = manager.recorder.first("ended with exit code")
    assert detected is not None and manager.ended_at is not None
    row(f"API {mode} for {seconds:g} s while the job runs", outcome="exit 0, every log line once",
        exit_code=code, detect_s=round(detected - fault_at, 3),
        cleanup_s=round(manager.ended_at - detected, 3), objects_left=count(left) - 1,
        gpus_held=held(before, after),
        notes="tolerated by --api-outage-tolerance (30m); the chief ended during the outage")


def test_an_outage_longer_than_the_tolerance_leaves_the_job_to_its_owner(
        local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    """Past --api-outage-tolerance the manager says so and exits 77, deleting nothing: half a cleanup
    through a dead API would be worse than none, and a new manager pod of its Job adopts the job."""
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    manager = ManagerThread(kube_of(cluster), spec(api_outage_tolerance="4s")).start()
    _training(cluster, manager)
    outage = cluster.api_outage("refuse")
    try:
        code = manager.join()
    finally:
        outage.clear()
    assert code == 77, manager.recorder.text
    assert "longer than --api-outage-tolerance (4s)" in manager.message
    assert "its pods are left running with their owner" in manager.recorder.text
    assert "deleting all it created" not in manager.recorder.text
    pods = leftovers(kube, "train")["pods"]
    assert pods == ["train-chief", "train-worker-0"]  # still training, for the next manager to adopt
    assert running_job(kube, "train", workers=1) is not None
    row("API refused longer than --api-outage-tolerance", outcome="exit 77, the job left running",
        exit_code=code, objects_left=count(leftovers(kube, "train")),
        notes="tolerance 4 s; nothing deleted through a dead API; the manager's Job adopts it")
