"""The placement experiment: which traces and policies, run in parallel, collected as JSON-ready records."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from multiprocessing import get_context
from typing import Any

import numpy as np

from bench.sim import model
from bench.sim.agreement import comparing
from bench.sim.metrics import summarize
from bench.sim.policies import IDEAL, POLICIES, SPANS_MORE_THAN_FEWEST, Context, PlaceFn, planner_policy
from bench.sim.simulator import fill_until_full, frag_table_for, simulate
from bench.sim.workload import make_cluster, make_trace, sample_sizes

#: a planner policy beyond these two is a new idea of ours and enters the comparison on its own
_KNOWN_PLANNER_POLICIES = ("optimal", "largest-first")



#: asked alongside ours at every decision of seed 0 (all span the fewest nodes, so see the same view)
COMPARED = ("bestfit", "fgd", "mostalloc", "original")


@dataclass(frozen=True)
class Case:
    cluster: str
    scale: str
    mix: str
    load: float
    seed: int
    days: float
    warmup_days: float
    span: str = "derived"  # or "rough"

    @property
    def cluster_key(self) -> str:
        return f"{self.cluster}-{self.scale}"


@dataclass(frozen=True)
class Plan:
    cases: tuple[Case, ...]
    fill_seeds: tuple[int, ...]
    scales: tuple[str, ...]


def grid(quick: bool) -> Plan:
    """Full: both scales, three loads on the Helios mix, the stress mix at 0.9, and the rough span cost at
    0.9, five seeds. Quick: the small clusters, one seed, two days."""
    clusters = ("C1", "C2", "C3")
    scales = ("small",) if quick else ("small", "large")
    seeds = (0,) if quick else tuple(range(5))
    # large clusters see ~17,000 jobs a day at load 0.9; small ones ~1,500, so they need more days
    days = {"small": (2.0, 0.5)} if quick else {"small": (8.0, 1.0), "large": (2.0, 0.5)}
    cases = []
    for scale in scales:
        length, warmup = days[scale]
        for cluster in clusters:
            for seed in seeds:
                for load in model.LOADS:
                    cases.append(Case(cluster, scale, "helios", load, seed, length, warmup))
                cases.append(Case(cluster, scale, "stress", 0.9, seed, length, warmup))
                if not quick and seed < 3:
                    cases.append(Case(cluster, scale, "helios", 0.9, seed, length, warmup, span="rough"))
    # the biggest first, so two workers finish together
    cases.sort(key=lambda c: (c.scale != "large", -c.load, c.seed))
    return Plan(cases=tuple(cases), fill_seeds=seeds, scales=scales)


def policy_set(ctx: Context) -> dict[str, PlaceFn]:
    from distributetrain.placement.planner import POLICIES as PLANNER_POLICIES

    out = {key: factory(ctx) for key, (_, factory) in POLICIES.items()}
    for name in PLANNER_POLICIES:
        if name not in _KNOWN_PLANNER_POLICIES:
            out[f"planner:{name}"] = planner_policy(name)
    return out


def fewest_only(key: str) -> bool:
    """Policies of ours and the peers we model span the fewest nodes, except those marked; a new planner
    policy is not assumed to."""
    return key in POLICIES and key not in SPANS_MORE_THAN_FEWEST


def run_case(case: Case, span_end: str = "median") -> dict[str, Any]:
    """One trace under every policy; `span_end` picks the fitted span cost's median or an end of its
    interval (model.SPAN_COST_ENDS) for the "derived" cases."""
    cluster = make_cluster(case.cluster, case.scale)
    mix = model.MIXES[case.mix]
    trace = make_trace(cluster, mix, case.load, case.seed, days=case.days, warmup_days=case.warmup_days)
    span = model.SPAN_COST_ENDS[span_end] if case.span == "derived" else model.ROUGH_SPAN_COST
    table = frag_table_for(mix, cluster)
    places: dict[str, PlaceFn | None] = {**policy_set(Context(cluster.capacity_map(), mix)), IDEAL: None}
    records, series = [], {}
    counts: dict[str, Any] | None = None
    if case.seed == 0 and case.span == "derived":
        others = {k: p for k, p in places.items() if p is not None and k in COMPARED}
        places["ours"], counts = comparing(places["ours"], others)  # type: ignore[arg-type]
    for key, place in places.items():
        run = simulate(cluster, trace, key, place, frag_table=table, span=span, fewest_only=fewest_only(key))
        metrics = summarize(trace, run, cluster.total_gpus)
        if key == "ours" and counts is not None:
            metrics["agreement"] = counts
        records.append({**asdict(case), "cluster": case.cluster_key, "policy": key, "metrics": metrics})
        if case.seed == 0 and case.load == 0.9 and case.mix == "helios" and case.span == "derived":
            hourly = run.samples[::4]
            hourly = hourly[hourly[:, 0] < trace.horizon]
            frag = hourly[:, 2].round(4).tolist()
            series[key] = {"t_hours": (hourly[:, 0] / 3600).round(2).tolist(),
                           "largest_free": hourly[:, 1].tolist(), "fragmentation": frag,
                           "busy": hourly[:, 3].tolist()}
    return {"records": records, "series": {case.cluster_key: series} if series else {}, "jobs": len(trace)}


def run_fill(args: tuple[str, str, str, int]) -> list[dict[str, Any]]:
    cluster_name, scale, mix_name, seed = args
    cluster = make_cluster(cluster_name, scale)
    mix = model.MIXES[mix_name]
    sizes = sample_sizes(np.random.default_rng(1000 + seed), mix, cluster.total_gpus)
    places: dict[str, PlaceFn | None] = {**policy_set(Context(cluster.capacity_map(), mix)), IDEAL: None}
    return [{"cluster": cluster.key, "mix": mix_name, "seed": seed, "policy": key,
             "allocation_rate": fill_until_full(cluster, sizes, place, fewest_only=fewest_only(key))}
            for key, place in places.items()]


def run_all(quick: bool, *, workers: int | None = None, span_end: str = "median",
            progress: Callable[[str], None] = print) -> dict[str, Any]:
    chosen = grid(quick)
    workers = workers or min(2, os.cpu_count() or 1)
    fills = [(c, s, m, seed) for s in chosen.scales for c in ("C1", "C2", "C3") for m in model.MIXES
             for seed in chosen.fill_seeds]
    records: list[dict[str, Any]] = []
    series: dict[str, Any] = {}
    fill_records: list[dict[str, Any]] = []
    jobs = 0
    with _pool(workers) as pool:
        for i, out in enumerate(_map(pool, partial(run_case, span_end=span_end), chosen.cases), 1):
            records.extend(out["records"])
            series.update(out["series"])
            jobs += out["jobs"]
            if i % 10 == 0 or i == len(chosen.cases):
                progress(f"placement: {i}/{len(chosen.cases)} traces simulated")
        for out_fill in _map(pool, run_fill, fills):
            fill_records.extend(out_fill)
    return {"records": records, "series": series, "fill": fill_records, "traces": len(chosen.cases),
            "jobs_simulated": jobs,
            "span_cost": {**model.SPAN_COST_ENDS[span_end].summary(), "end": span_end}}


def _pool(workers: int) -> Any:
    if workers <= 1:
        return _Inline()
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork"))


def _map(pool: Any, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterable[Any]:
    mapped: Iterable[Any] = pool.map(fn, items)
    return mapped


class _Inline:
    """A stand-in for the pool when one worker is asked for: no processes at all."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterable[Any]:
        return map(fn, items)
