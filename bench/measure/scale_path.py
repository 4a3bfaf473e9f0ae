"""The manager's way to its first plan, stamped step by step (scale_manager.py runs it in a fresh process).

Nothing of the path is copied here: the product's own objects run it, and two thin subclasses only note when
each step ends - the manager's Kube (when each list or get returns) and its Observer (when it says a line
and when it is told of the plan, the hook joblog.Reporter offers for that). `PreTraining.plan` reads the
namespace's LimitRanges, quotas and labels (placing.namespace_policies), then `placing.survey`:
`gateway.list_nodes_and_pods` (every node; the pods that may hold resources, with the manager's field
selector, from the watch cache, decoded slim) and the accounting with the job's pod demands
(manifests.pod_demands, which PreTraining passes always: cpu and memory per GPU), then logs the inventory
table, places (fit.place) and checks the namespace. Before `plan`, PreTraining.run also looks for an earlier
run's objects and for a Kueue API (a few small requests), not timed here.

After the cold and warm plans, where a list's time goes: the transfer alone of the same two lists (the same
requests, the raw bytes, not decoded), decoding every field of those bytes with orjson (what the slim
decoder avoids), and the client's model objects for one page, scaled to all (what the raw lists avoid).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.measure.proctimes import tree_cpu
from distributetrain.kube import requests
from distributetrain.kube.gateway import Kube, gc_paused
from distributetrain.manager.pretraining import PreTraining
from distributetrain.observe import jobstate
from distributetrain.observe.observer import Observer
from distributetrain.request.jobspec import JobSpec

JOB_GPUS = 64
IMAGE = "distributetrain/base:0.1.0"
WARM_REPEATS = 3
#: the steps of PreTraining.plan, in order (see the module's docstring)
PLAN_STEPS = ("namespace", "nodes", "pods", "accounting", "plan")
_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"]+)"')


@dataclass(frozen=True)
class Stamp:
    """Three clocks at one moment: wall, this process's CPU, the API server's CPU (seconds)."""

    wall: float
    cpu: float
    server: float

    def __sub__(self, other: Stamp) -> Stamp:
        return Stamp(self.wall - other.wall, self.cpu - other.cpu, self.server - other.server)

    def __add__(self, other: Stamp) -> Stamp:
        return Stamp(self.wall + other.wall, self.cpu + other.cpu, self.server + other.server)

    def to_json(self) -> dict[str, float]:
        return {"wall": round(self.wall, 4), "cpu": round(self.cpu, 4), "server_cpu": round(self.server, 4)}


class Clocks:
    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.ends: list[tuple[str, Stamp]] = []

    def now(self) -> Stamp:
        return Stamp(time.perf_counter(), time.process_time(), tree_cpu(self.server_pid))

    def mark(self, what: str) -> None:
        self.ends.append((what, self.now()))


class StampedKube(Kube):
    """The manager's connection, noting when each list and get returns."""

    def __init__(self, kube: Kube, clocks: Clocks) -> None:
        super().__init__(kube.api_client)
        self.clocks = clocks

    def list(self, *args: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        out = super().list(*args, **kwargs)
        self.clocks.mark(f"list {args[0]}")
        return out

    def get(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        out = super().get(*args, **kwargs)
        self.clocks.mark(f"get {args[0]}")
        return out


class StampedObserver(Observer):
    """The manager's Reporter, noting when it says a line and when it is told of the plan."""

    def __init__(self, kube: Kube, spec: JobSpec, clocks: Clocks) -> None:
        super().__init__(kube, jobstate.initial(job=spec.job_name, namespace=spec.namespace, gpus=spec.gpus))
        self.clocks = clocks

    def say(self, message: str) -> None:
        super().say(message)
        self.clocks.mark("say")

    def planned(self, plan: object, attempt: int) -> None:
        super().planned(plan, attempt)
        self.clocks.mark("planned")


def plan_steps(start: Stamp, ends: Sequence[tuple[str, Stamp]]) -> dict[str, Stamp]:
    """PLAN_STEPS from the marks one PreTraining.plan left, `start` when it was called: the namespace's
    reads end at the last mark before the nodes list returns, the accounting at the first line said after
    the pods list (the inventory table), the plan when the Reporter is told of it."""
    whats = [what for what, _ in ends]
    nodes = whats.index("list nodes")
    pods = whats.index("list pods", nodes)
    table = whats.index("say", pods)
    planned = whats.index("planned", table)
    bounds = [start, ends[nodes - 1][1] if nodes else start, ends[nodes][1], ends[pods][1], ends[table][1],
              ends[planned][1]]
    return {step: bounds[i + 1] - bounds[i] for i, step in enumerate(PLAN_STEPS)}


def _total(steps: dict[str, Stamp]) -> Stamp:
    total = Stamp(0.0, 0.0, 0.0)
    for stamp in steps.values():
        total = total + stamp
    return total


def _peak_rss_mib() -> float:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux carries it across fork and exec, so a
    child started by a big parent reports the parent's RSS; VmHWM belongs to this process's memory alone."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024


def _raw_pages(kube: Kube, kind: str, field_selector: str | None) -> list[bytes]:
    """Every page of the list the manager sends (kube.list's requests), as the bytes the server sent."""
    pages: list[bytes] = []
    token: str | None = None
    while True:
        body: bytes = kube.send(requests.list_request(
            kind, limit=kube.page_size, continue_token=token, field_selector=field_selector,
            resource_version="0")).data
        pages.append(body)
        # the continue token sits in the list's metadata, at the head of the body: no need to decode it all
        found = _CONTINUE.search(body, 0, 4096)
        token = found.group(1).decode() if found else None
        if token is None:
            return pages


def _transfer(kube: Kube, clocks: Clocks) -> dict[str, Any]:
    """The manager's two lists as raw bytes, then what decoding them otherwise would cost."""
    before = clocks.now()
    node_pages = _raw_pages(kube, "nodes", None)
    pod_pages = _raw_pages(kube, "pods", requests.NOT_TERMINATED)
    transfer = clocks.now() - before
    pages = [*node_pages, *pod_pages]
    t0 = time.perf_counter()
    with gc_paused():
        decoded = [orjson.loads(page) for page in pages]
    decode = time.perf_counter() - t0
    pod_count = sum(len(d["items"]) for d in decoded if d.get("kind") == "PodList")
    last = decoded[-1]["items"]
    pod_bytes = sum(len(orjson.dumps(p)) for p in last)
    del decoded
    sample = pod_pages[0]  # a full page, if there are several
    sample_items = len(orjson.loads(sample)["items"])
    t0 = time.perf_counter()
    kube.api_client.deserialize(sample.decode(), "V1PodList", "application/json")  # as the client does
    models_sample = time.perf_counter() - t0
    return {
        "transfer": transfer.to_json(),
        "bytes": sum(len(page) for page in pages),
        "pods_listed": pod_count,
        "pod_json_bytes_mean": round(pod_bytes / max(len(last), 1)),
        "orjson_decode_s": round(decode, 3),
        "client_models_s_estimated": round(models_sample * pod_count / max(sample_items, 1), 1),
        "client_models_sample": {"pods": sample_items, "seconds": round(models_sample, 3)},
    }


def measure(kubeconfig: str, server_pid: int, *, imports: Stamp) -> dict[str, Any]:
    """Cold: connecting, the request and PreTraining (its pod demands), one plan; then WARM_REPEATS plans
    more; then the transfer apart. `imports`: the manager's imports, timed by scale_manager.py."""
    load = os.getloadavg()[0]
    clocks = Clocks(server_pid)
    before = clocks.now()
    kube = StampedKube(Kube.connect(kubeconfig=kubeconfig), clocks)
    spec = JobSpec.from_sources({"gpus": str(JOB_GPUS), "image": IMAGE, "job_name": "bench-scale"}, {})
    observer = StampedObserver(kube, spec, clocks)
    pretraining = PreTraining(kube, spec, reporter=observer)  # builds the pod demands, as the manager's does
    setup = clocks.now() - before
    runs: list[dict[str, Stamp]] = []
    plan = None
    for _ in range(1 + WARM_REPEATS):
        clocks.ends.clear()
        start = clocks.now()
        plan = pretraining.plan(attempt=0)
        runs.append(plan_steps(start, clocks.ends))
    assert plan is not None
    peak_mib = _peak_rss_mib()
    observer.close()
    cold = {"imports": imports, "setup": setup, **runs[0]}
    cold_total = _total(cold)
    warm_totals = [_total(run) for run in runs[1:]]
    warm_median = {step: Stamp(*(statistics.median(getattr(run[step], clock) for run in runs[1:])
                                 for clock in ("wall", "cpu", "server")))
                   for step in PLAN_STEPS}
    out = {
        # the keys the goals read (bench/report/goals.py): the cold run from the first import to the plan
        "inventory_plus_plan_s": {"cold": round(cold_total.wall, 3),
                                  "warm_p50": round(statistics.median(t.wall for t in warm_totals), 3),
                                  "max": round(max(t.wall for t in [cold_total, *warm_totals]), 3),
                                  "warm": [round(t.wall, 3) for t in warm_totals]},
        "cold": {"total": cold_total.to_json(), **{step: s.to_json() for step, s in cold.items()}},
        "warm_median": {"total": Stamp(*(statistics.median(getattr(t, c) for t in warm_totals)
                                         for c in ("wall", "cpu", "server"))).to_json(),
                        **{step: s.to_json() for step, s in warm_median.items()}},
        "peak_rss_mib": round(peak_mib, 1),
        "load_average_1m": round(load, 1),
        "plan": [(entry.node, entry.gpus) for entry in plan.allocation],
        "demands": [d.role for d in pretraining.demands if d.requests is not None],
        **_transfer(kube, clocks),
    }
    kube.api_client.close()  # type: ignore[no-untyped-call]
    return out
