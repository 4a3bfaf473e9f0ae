"""Fault matrix, contention: managers racing for the same GPUs, many jobs at once, and a request that has to
wait for room. Nothing may deadlock, no partial gang may hold GPUs past the schedule timeout, and nothing may
be created while a manager waits."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from reliability_support import (
    IMAGE,
    Factory,
    ManagerThread,
    chief_exits,
    count,
    free_gpus,
    held,
    kube_of,
    leftovers,
    spec,
    wait_until,
)

from distributetrain import naming
from distributetrain.kube.gateway import Kube
from podsecurity import restricted


class GangMonitor(threading.Thread):
    """Samples every job's workers: how long at most a job had some workers holding GPUs while others could
    not start (a partial gang)."""

    def __init__(self, kube: Kube, jobs: list[str], every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.kube, self.jobs, self.every = kube, jobs, every
        self.stop = threading.Event()
        self.partial_since: dict[str, float] = {}
        self.longest: dict[str, float] = dict.fromkeys(jobs, 0.0)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            items, _ = self.kube.list("pods", "default", label_selector=f"{naming.MANAGED_BY_KEY}="
                                      f"{naming.MANAGED_BY},{naming.ROLE_LABEL}={naming.ROLE_WORKER}")
            now = time.monotonic()
            by_job: dict[str, list[dict[str, Any]]] = {}
            for pod in items:
                by_job.setdefault(pod["metadata"]["labels"][naming.JOB_LABEL], []).append(pod)
            for job in self.jobs:
                pods = by_job.get(job, [])
                bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
                partial = bool(bound) and len(bound) < len(pods)
                if partial:
                    since = self.partial_since.setdefault(job, now)
                    self.longest[job] = max(self.longest[job], now - since)
                else:
                    self.partial_since.pop(job, None)


class Barrier(ManagerThread):
    """A manager whose first plan waits for the other's: both plan the same free GPUs, then both create."""

    def __init__(self, kube: Kube, job: Any, barrier: threading.Barrier) -> None:
        super().__init__(kube, job)
        planned = self.recorder.planned

        def at_plan(plan: object, attempt: int) -> None:
            planned(plan, attempt)
            if attempt == 0:
                barrier.wait(timeout=30)

        self.recorder.planned = at_plan  # type: ignore[method-assign]


def test_two_managers_race_for_overlapping_gpus(local_cluster_factory: Factory,
                                                row: Callable[..., object]) -> None:
    # 10 GPUs; each job wants 7 = workers of 3 and 3 plus a chief of 1: both plan the same nodes, and their
    # workers interleave, so each can end up with half a gang
    cluster = local_cluster_factory(nodes=[3, 3, 3, 1], behaviors=[chief_exits(0, after=1.0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    barrier = threading.Barrier(2)
    jobs = ["alpha", "beta"]
    monitor = GangMonitor(kube, jobs)
    monitor.start()
    started = time.monotonic()
    managers = [Barrier(kube_of(cluster), spec(gpus="7", job_name=job, schedule_timeout="3s", backoff="0.5s",
                                                wait_for_gpus="60s"), barrier).start() for job in jobs]
    codes = [m.join(timeout=120) for m in managers]
    monitor.stop.set()
    monitor.join(5)
    elapsed = time.monotonic() - started
    assert codes == [0, 0], "\n\n".join(m.recorder.text for m in managers)
    # both planned the same GPUs at the same moment...
    first_plans = [[(e.node, e.gpus) for e in m.recorder.plans[0].allocation] for m in managers]
    assert first_plans[0] == first_plans[1]
    # ...and ran one after the other
    for job in jobs:
        assert leftovers(kube, job) == {"pods": [naming.chief_name(job)]}
    after = free_gpus(kube)
    assert after == before
    # a partial gang is deleted after the schedule timeout (3 s): generous bound for a loaded machine
    assert max(monitor.longest.values()) < 3.0 + 10.0, monitor.longest
    attempts = {m.orchestrator.spec.job_name: len(m.recorder.plans) for m in managers}
    row("two managers, overlapping GPUs, same moment", outcome="both exit 0, one after the other",
        exit_code=0, detect_s=round(max(monitor.longest.values()), 3), cleanup_s=None, objects_left=0,
        gpus_held=held(before, after),
        notes=f"detect = longest partial gang; plans per job {attempts}; both done in {elapsed:.1f} s",
        extra={"partial_gang_s": monitor.longest, "plans": attempts, "elapsed_s": elapsed})


def test_interleaved_gangs_release_within_the_schedule_timeout(local_cluster_factory: Factory,
                                                               row: Callable[..., object]) -> None:
    """Two managers whose plans overlap on one node create their gangs at the same moment: one of them ends up
    with a partial gang (one worker bound, the other Pending behind the other job's). It must delete that
    gang after the schedule timeout, wait for room, and then run: both finish, one after the other."""
    cluster = local_cluster_factory(nodes=[2, 2, 2, 2, 1], behaviors=[chief_exits(0, after=5.0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    _blocker(kube, "node-1", 2)  # only while "beta" plans: its plan then avoids node-1, alpha's will not
    wait_until(lambda: free_gpus(kube)["node-1"] == 0, timeout=10)
    barrier = threading.Barrier(2)
    beta_planned = threading.Event()
    job = {"gpus": "5", "schedule_timeout": "3s", "backoff": "0.5s", "wait_for_gpus": "60s"}
    beta = Barrier(kube_of(cluster), spec(job_name="beta", **job), barrier)
    at_plan = beta.recorder.planned

    def free_node_1_then_meet(plan: object, attempt: int) -> None:
        if attempt == 0:
            kube.delete("pods", "default", "someone-else", grace_seconds=0)
            wait_until(lambda: free_gpus(kube)["node-1"] == 2, timeout=10)
            beta_planned.set()
        at_plan(plan, attempt)

    beta.recorder.planned = free_node_1_then_meet  # type: ignore[method-assign]
    monitor = GangMonitor(kube, ["alpha", "beta"], every=0.05)
    monitor.start()
    started = time.monotonic()
    beta.start()
    assert beta_planned.wait(30)
    alpha = Barrier(kube_of(cluster), spec(job_name="alpha", **job), barrier).start()
    codes = [alpha.join(timeout=120), beta.join(timeout=120)]
    monitor.stop.set()
    monitor.join(5)
    elapsed = time.monotonic() - started
    assert codes == [0, 0], alpha.recorder.text + "\n\n" + beta.recorder.text
    plans = {"alpha": alpha.recorder.plans[0], "beta": beta.recorder.plans[0]}
    nodes = {job: {e.node for e in plan.workers} for job, plan in plans.items()}
    assert nodes["alpha"] & nodes["beta"] and nodes["alpha"] != nodes["beta"]  # overlapping, not identical
    loser = "alpha" if len(alpha.recorder.plans) > 1 else "beta"
    loser_text = (alpha if loser == "alpha" else beta).recorder.text
    assert "deleting the gang so no GPU stays held" in loser_text
    assert monitor.longest[loser] > 0  # it really had half a gang...
    assert monitor.longest[loser] < 3.0 + 10.0, monitor.longest  # ...and not for long: generous bound
    for job_name in ("alpha", "beta"):
        assert leftovers(kube, job_name) == {"pods": [naming.chief_name(job_name)]}
    after = free_gpus(kube)
    assert after == before
    row("two managers, gangs interleaved on a shared node", outcome="partial gang deleted, both exit 0",
        exit_code=0, detect_s=round(monitor.longest[loser], 3), cleanup_s=None, objects_left=0,
        gpus_held=held(before, after),
        notes=f"detect = how long the partial gang held GPUs (schedule timeout 3 s); both done in "
              f"{elapsed:.1f} s",
        extra={"partial_gang_s": monitor.longest, "elapsed_s": elapsed})


def test_twenty_jobs_at_once_on_100_nodes(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(nodes=[8] * 100, behaviors=[chief_exits(0, after=1.0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    jobs = [f"job-{i:02d}" for i in range(20)]
    sizes = {job: 4 + (i * 7) % 17 for i, job in enumerate(jobs)}  # 4..20 GPUs: 1 to 3 pods each
    started = time.monotonic()
    managers = [ManagerThread(kube_of(cluster), spec(gpus=str(sizes[job]), job_name=job,
                                                     schedule_timeout="10s", backoff="0.5s",
                                                     wait_for_gpus="60s")).start()
                for job in jobs]
    for manager in managers:
        manager.join(timeout=180)
    elapsed = time.monotonic() - started
    failed = [m for m in managers if m.code != 0]
    assert not failed, f"{len(failed)} of 20 failed:\n" + "\n\n".join(m.recorder.text for m in failed)
    orphans: dict[str, dict[str, list[str]]] = {}
    for job in jobs:
        left = leftovers(kube, job)
        if left != {"pods": [naming.chief_name(job)]}:
            orphans[job] = left
    assert orphans == {}
    everything, _ = kube.list("pods", None)
    assert all(p["metadata"]["name"].endswith("-chief") for p in everything)
    after = free_gpus(kube)
    assert after == before
    per_job = {m.orchestrator.spec.job_name: sum(m.orchestrator.kube.requests.values()) for m in managers}
    verbs: Counter[str] = Counter()
    for m in managers:
        verbs.update(m.orchestrator.kube.requests)
    # bounded: a job's requests do not depend on the 100 nodes (two paginated lists for the inventory)
    # (about 45 a job: the inventory, the objects, a budget, watches; a collision adds a gang and a re-plan)
    assert max(per_job.values()) <= 80, per_job
    row("20 jobs at once on 100 nodes", outcome="all exit 0, zero orphans", exit_code=0, detect_s=None,
        cleanup_s=None, objects_left=sum(count(left) for left in orphans.values()),
        gpus_held=held(before, after),
        notes=f"{elapsed:.1f} s for all; API requests per job max {max(per_job.values())}, "
              f"mean {sum(per_job.values()) / len(per_job):.1f}; by verb {dict(sorted(verbs.items()))}",
        extra={"requests_per_job": per_job, "by_verb": dict(verbs), "elapsed_s": elapsed})


def _blocker(kube: Kube, node: str, gpus: int) -> None:
    kube.create(restricted({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "someone-else", "namespace": "default"},
                 "spec": {"nodeName": node, "restartPolicy": "Never",
                          "tolerations": [{"key": naming.DEFAULT_RESOURCE, "operator": "Exists"}],
                          "containers": [{"name": "c", "image": IMAGE, "resources": {
                              "limits": {naming.DEFAULT_RESOURCE: str(gpus)}}}]}}))


def test_wait_for_gpus_then_proceed(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_exits(0)])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    _blocker(kube, "node-1", 5)  # 5 of the 10 GPUs are someone else's: 6 do not fit
    wait_until(lambda: free_gpus(kube)["node-1"] == 0, timeout=10)
    manager = ManagerThread(kube_of(cluster), spec(wait_for_gpus="60s")).start()
    wait_until(lambda: "waiting for GPUs to free up" in manager.recorder.text, timeout=20)
    waiting_until = time.monotonic() + 3.0
    while time.monotonic() < waiting_until:  # nothing of the job exists while it waits
        assert leftovers(kube, "train") == {}
        time.sleep(0.2)
    freed_at = time.monotonic()
    kube.delete("pods", "default", "someone-else", grace_seconds=0)
    code = manager.join()
    assert code == 0, manager.recorder.text
    proceeded = manager.recorder.first(r"plan \(attempt 1\)")
    assert proceeded is not None and proceeded > freed_at
    assert "6 GPU(s) as 5 on node-1, 1 on node-3" in manager.recorder.text
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}
    after = free_gpus(kube)
    assert after == before
    row("not enough GPUs, --wait-for-gpus 60s, room frees", outcome="waited, created nothing, exit 0",
        exit_code=code, detect_s=round(proceeded - freed_at, 3), cleanup_s=None, objects_left=0,
        gpus_held=held(before, after), notes="detect = room freed -> plan (polling with backoff)")


def test_wait_for_gpus_gives_up_clearly(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_exits(0)])
    kube = kube_of(cluster)
    _blocker(kube, "node-1", 5)
    wait_until(lambda: free_gpus(kube)["node-1"] == 0, timeout=10)
    before = free_gpus(kube)
    started = time.monotonic()
    manager = ManagerThread(kube_of(cluster), spec(wait_for_gpus="3s")).start()
    seen: set[str] = set()
    while manager.ended_at is None and time.monotonic() - started < 60:
        seen.update(k for k in leftovers(kube, "train"))
        time.sleep(0.2)
    code = manager.join()
    assert code == 3, manager.recorder.text
    assert seen == set()  # never created anything while waiting
    assert "after waiting 3s" in manager.message and "nothing was created" in manager.message
    assert "6" in manager.message  # the number asked for
    assert leftovers(kube, "train") == {}
    after = free_gpus(kube)
    assert after == before
    assert manager.ended_at is not None
    row("not enough GPUs, --wait-for-gpus 3s, room never frees", outcome="exit 3, nothing created",
        exit_code=code, detect_s=round(manager.ended_at - started, 3), cleanup_s=0.0, objects_left=0,
        gpus_held=held(before, after), notes="detect = the wait, then the clear failure")


def test_api_requests_per_job_do_not_grow_with_the_cluster(local_cluster_factory: Factory,
                                                           row: Callable[..., object]) -> None:
    """The same job on 3 nodes and on 300: the same requests, verb by verb (the inventory is two paginated
    lists, never a query per node)."""
    counts = {}
    for nodes in ([5, 3, 2], [5, 3, 2] + [0] * 297):
        cluster = local_cluster_factory(nodes=nodes, behaviors=[chief_exits(0)])
        manager = ManagerThread(kube_of(cluster), spec()).start()
        assert manager.join() == 0, manager.recorder.text
        counts[len(nodes)] = dict(sorted(manager.orchestrator.kube.requests.items()))
    # lists, gets, creates and deletes are the same; only a watch may reconnect by timing
    for verb in ("list", "get", "create", "delete"):
        assert counts[300].get(verb, 0) == counts[3].get(verb, 0), counts
    assert abs(counts[300].get("watch", 0) - counts[3].get("watch", 0)) <= 2, counts
    row("API requests of one job: 3 nodes vs 300 nodes", outcome="same by verb", exit_code=0,
        notes=f"{sum(counts[3].values())} requests: {counts[3]}", extra={"by_verb": counts})
