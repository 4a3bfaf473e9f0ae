"""The words around the numbers: composes docs/benchmarks.md."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report import recovery_section, speed_section, throughput_section
from bench.report.goals import checks_table, goals, placement_checks, speed_checks
from bench.report.headline import headline
from bench.report.markdown import provenance, table
from bench.report.placement_section import (
    agreement_table,
    fill_table,
    jct_table,
    load_table,
    simple_table,
    wait_table,
)
from bench.report.plots import ordered
from bench.sim import model
from bench.sim.experiment import COMPARED
from bench.sim.policies import label
from bench.sim.workload import CLUSTER_SHAPES, CLUSTER_TITLES, make_cluster
from bench.store import PLACEMENT, RECOVERY, THROUGHPUT


def _took(seconds: float | None) -> str:
    return "" if seconds is None or math.isnan(seconds) else f"{seconds / 60:.1f} min"


def _provenance(runs: Mapping[str, Any], placement: Mapping[str, Any] | None,
                speed: Mapping[str, Any]) -> str:
    present = ([PLACEMENT] if placement is not None else []) + list(speed)  # throughput is one of speed
    body = []
    for name in present:
        run = runs.get(name) or {}
        body.append([name, run.get("date", "not recorded"), f"`{run.get('commit', '?')}`",
                     f"`{run.get('command', '?')}`", _took(run.get("seconds")),
                     str(run.get("load_average_1m", ""))])
    return table(["section", "measured", "commit", "command", "took", "load average (1 min) after"],
                 body) if body else "Nothing measured yet."


def _rel(path: Path, doc: Path) -> str:
    return os.path.relpath(path, doc.parent)


def render(*, doc: Path, rendered: Mapping[str, Any], placement: Mapping[str, Any] | None,
           rows: Sequence[Any], images: Sequence[Path], speed: Mapping[str, Any], runs: Mapping[str, Any],
           quick: bool, span_ends: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The report and the goals' verdicts. `runs` (runs.json) says when each section was measured; the
    sections may come from different runs."""
    parts: list[str] = ["# Benchmarks\n"]
    if quick:
        parts.append("> **Smoke run (`--quick`)**: small clusters, one seed, two days of jobs. The numbers "
                     "below only show that the pipeline works; `make bench` writes the real report.\n")
    parts.append(
        f"Rendered {rendered['date']} from the JSON results by `python -m bench.run`; each section "
        "was measured by its own run (below: when, on which commit, by which command). Machine: "
        f"{rendered['cpu']}, {rendered['cores']} cores usable, {rendered['memory_gib']:.1f} GiB memory; "
        f"Python {rendered['python']}.\n")
    verdicts: dict[str, Any] = {}
    clusters: list[str] = []
    placement_table = ""
    if placement is not None:
        clusters = sorted({r["cluster"] for r in rows}, key=lambda c: (c.split("-")[1] != "small", c))
        placement_table, verdicts = goals(rows, clusters, placement["records"])
    checks = (placement_checks(verdicts["derived"]) if verdicts.get("derived", {}).get("runs") else []) \
        + speed_checks(speed)
    verdicts["checks"] = checks
    parts += ["## In short\n",
              "The numbers that matter, each against its goal (placement: under the simulator's span cost, "
              "Helios mix; the sections below give every cell). A goal with nothing measured or nothing to "
              "compare is not met.\n",
              checks_table(checks) if checks else "Nothing measured yet.", "",
              "## Where the numbers come from\n", _provenance(runs, placement, speed), ""]
    if placement is not None:
        policies = ordered(sorted({r["policy"] for r in rows}))
        images_by_name = {p.name: _rel(p, doc) for p in images}
        parts += [
            "## Placement quality: the goals\n",
            f"Goals from issue 8, judged under the simulator's span cost ({_span_used(placement)}) and, as "
            "a check, under the issue's own rough model. Where we fall short it says so. The share of big "
            "jobs on the fewest nodes their size needs is a figure, not a goal; the last row is a sanity "
            "check a correct planner passes by construction, not a goal.\n", placement_table, "",
            _at_the_ends(placement, checks, span_ends or {}),
            headline(rows, placement["fill"], clusters, placement["records"]),
            f"![JCT of 8+ GPU jobs relative to the ideal bound]({images_by_name['jct_at_0.9.png']})\n",
            _setup(placement, clusters),
            "## Job completion time relative to the ideal bound\n",
            "Each cell: mean JCT of the policy divided by the ideal bound's on the same trace, averaged "
            "over seeds [lowest-highest seed]. The ideal column gives its mean JCT in hours. 1.000 is the "
            "limit.\n",
            "### Jobs of 8 or more GPUs (Helios mix)\n",
            jct_table(rows, clusters, policies, "jct_mean_8plus"), "",
            f"![JCT vs load]({images_by_name['jct_vs_load.png']})\n",
            "### What placement alone costs: run time of 8+ GPU jobs over their nominal duration\n",
            "The JCT above includes queueing, and near saturation a few percent of extra run time turns into "
            "much longer queues (the offered load swings to 1.2x at the daily peak at load 0.9). This is the "
            "placement cost before that feedback: mean of (end - start) / duration, jobs of 8+ GPUs.\n",
            load_table(rows, clusters, [p for p in policies if p != "ideal"],
                              lambda r: f"{r['slowdown_mean_8plus']:.3f}"), "",
            "### All jobs (Helios mix)\n",
            jct_table(rows, clusters, policies, "jct_mean"), "",
            "### Stress mix (10% of jobs of 3, 5, 6 or 12 GPUs), load 0.9, jobs of 8+ GPUs\n",
            jct_table(rows, clusters, policies, "jct_mean_8plus", mix="stress", loads=(0.9,)), "",
        ]
        if any(r["span"] == "rough" for r in rows):
            parts += [
                f"### Sensitivity: the issue's rough {int(100 * 0.30)}% per extra node instead of "
                "the simulator's span cost, load 0.9, jobs of 8+ GPUs (seeds 0-2)\n",
                jct_table(rows, clusters, policies, "jct_mean_8plus", loads=(0.9,), span="rough"), ""]
        parts += [
            "## Nodes spanned\n",
            "At load 0.9: the share of 8+ GPU jobs placed on the fewest nodes their size needs on an empty "
            "cluster / the mean number of nodes per job beyond that (what the span cost charges) / jobs (all "
            "runs) on more nodes than the fewest possible at that moment (the sanity check):\n",
            simple_table(rows, clusters, policies, "beyond_empty_mean",
                                lambda r: f"{100 * (1 - r['beyond_empty_share_8plus']):.1f}% / "
                                          f"{r['beyond_empty_mean']:.3f} / {r['beyond_fewest_jobs']}"), "",
            "## Same state, different choice?\n",
            "End to end, good policies differ by less than the noise between seeds. Decision by decision "
            "(seed 0, load 0.9): whenever ours placed a job, the others were asked too, on the "
            "same free GPUs; the share of decisions where they would have left different free counts "
            "behind, for jobs ours put on one node / on several:\n",
            agreement_table(placement["records"], clusters, COMPARED), "",
            "## GPU allocation rate at saturation (FGD's measure)\n",
            "Jobs drawn from the size mix arrive and never leave until the GPUs they ask for add up to "
            "the cluster's; a job is admitted only on as few nodes as its size needs on an empty cluster "
            "(a 4-GPU job on one node, a 16-GPU job on two 8-GPU nodes), as FGD's tasks must fit one node. "
            "Share of GPUs allocated at the end, mean over seeds:\n",
            fill_table(placement["fill"], clusters, policies), "",
            f"![allocation rate]({images_by_name['allocation_at_saturation.png']})\n",
            "## Fragmentation over time\n",
            "Time averages at load 0.9 (Helios mix): largest free block (GPUs free on the emptiest "
            "node) / stranded free GPUs (free GPUs the next job, drawn from the size mix, could not use on "
            "their node - FGD's expected fragmentation - as a share of all the cluster's GPUs).\n",
            simple_table(
                rows, clusters, [p for p in policies if p != "ideal"], "largest_free_mean",
                lambda r: f"{r['largest_free_mean']:.2f} / {100 * r['fragmentation_mean']:.1f}%"),
            "",
        ]
        if "state_over_time.png" in images_by_name:
            parts.append(f"![state over time]({images_by_name['state_over_time.png']})\n")
        showcase = next((c for c in ("C2-large", "C2-small") if c in clusters), clusters[0])
        parts += [
            f"## Queueing delay by job size ({showcase}, load 0.9)\n",
            wait_table(rows, showcase, policies), "",
            f"![queueing delay]({images_by_name['wait_by_size.png']})\n",
            _method(),
        ]
    images_by_name = {p.name: _rel(p, doc) for p in images}
    parts += [f"## {throughput_section.TITLE}\n",
              throughput_section.section(speed.get(THROUGHPUT), provenance(runs.get(THROUGHPUT)),
                                        images_by_name.get("throughput_slowdown.png"))]
    parts += [f"## {recovery_section.TITLE}\n",
              recovery_section.section(speed.get(RECOVERY), provenance(runs.get(RECOVERY)))]
    others = {name: result for name, result in speed.items() if name not in (THROUGHPUT, RECOVERY)}
    parts += ["## Speed and overhead\n", speed_section.section(others, runs) if others else "Not run.\n"]
    parts += [
        "## Reproduce\n",
        "`make bench` (the same as `python -m bench.run`) measures every section and rewrites this file, the "
        "plots in docs/img/benchmarks/, the JSON in bench/results/ (placement_runs.json.gz has every run's "
        "metrics, placement_summary.json the averages over seeds, speed.json the speed benches, the "
        "throughput runs and the recovery runs, runs.json when each section was measured) and the measured "
        "blocks in docs/planner.md and docs/manager.md. `--only SECTION[,SECTION...]` measures only those "
        "sections (placement, planner_speed, apiserver, manager_overhead, scale, demo_phases, preflight, "
        "throughput, recovery, capacity, or `speed` for the six speed benches) and keeps the others' "
        "results; `--render-only` measures nothing and re-renders everything from the JSON. A new "
        f"throughput run (`{throughput_section.COMMAND}`, "
        f"about {throughput_section.estimate_s() / 60:.0f} minutes, root, under the heavy-test lock) whose "
        "fit "
        "differs asks for its FITTED_COMM in bench/sim/model.py (its section says so); then `--only "
        "placement` re-runs the comparison with them, and `--only placement --span-cost low` and "
        "`--span-cost high` re-judge the goals at the ends of its interval "
        "(about 5 min each on a quiet machine). `python -m bench.run --quick` is the "
        "smoke run the test suite makes (small clusters, one seed, no throughput or recovery jobs; it writes "
        "to bench/results/quick/ "
        "and never touches docs/).\n"]
    return "\n".join(parts) + "\n", verdicts


def _setup(placement: Mapping[str, Any], clusters: Sequence[str]) -> str:
    rows = []
    for key in clusters:
        name, scale = key.split("-")
        cluster = make_cluster(name, scale)
        shape = ", ".join(f"{n} x {c}" for c, n in sorted(CLUSTER_SHAPES[name][scale].items(), reverse=True))
        rows.append([key, CLUSTER_TITLES[name], shape, str(len(cluster.names)), str(cluster.total_gpus)])
    seeds = sorted({r["seed"] for r in placement["records"]})
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    lengths = sorted({(r["scale"], r["days"], r["warmup_days"]) for r in placement["records"]}, reverse=True)
    length_text = "; ".join(f"{scale} clusters {days:g} days of arrivals, the first {24 * warm:g} h left out "
                            "of the metrics as warm-up" for scale, days, warm in lengths)
    return "\n".join([
        "## Set-up\n",
        table(["cluster", "kind", "nodes (count x GPUs)", "nodes", "GPUs"], rows), "",
        f"{placement['traces']} traces ({seed_text}), {placement['jobs_simulated']:,} jobs in all, each "
        f"trace replayed under every policy; {length_text}. Job sizes: Helios mix (1: 67%, 2: 3%, 4: 7%, "
        f"8: 16%, 16: 4%, 32: 2%, 64: 1%), and a stress mix moving 10% of jobs to 3, 5, 6 and 12 GPUs. "
        f"Durations log-normal, median {model.DURATION_MEDIAN_S:.0f} s, 90th percentile "
        f"{model.DURATION_P90_S:,.0f} s "
        f"(sigma {model.DURATION_SIGMA:.2f}), clipped to one day: mean {model.mean_duration_s():,.0f} s "
        "(Helios: 6,652 s). Arrivals Poisson with a 2:1 day/night swing; the offered load counts GPU-seconds "
        "at no slowdown, so a policy that spans nodes raises the real load above it.\n",
        "Policies: " + "; ".join(f"**{label(p)}**" for p in ordered(sorted({r['policy'] for r in
                                                                          placement['records']}))) + ".\n",
    ])


def _at_the_ends(placement: Mapping[str, Any], checks: Sequence[Mapping[str, Any]],
                 ends: Mapping[str, Any]) -> str:
    """The placement goals re-judged at the low and high ends of the span cost's 95% interval, beside the
    median's (the table above): does any verdict move?"""
    used = (placement.get("span_cost") or {}).get("one_node_job_on", {})
    shown = [e for e in ("low", "high") if e in ends
             and (ends[e].get("span_cost") or {}).get("one_node_job_on") == model.SPAN_COST_ENDS[e].summary()[
                 "one_node_job_on"]]
    stale = [e for e in ("low", "high") if e in ends and e not in shown]
    command = "`python -m bench.run --only placement --span-cost low` (and `high`)"
    if not shown:
        note = f" (stored runs at {', '.join(stale)} were simulated under another span cost)" if stale else ""
        return (f"**At the ends of the span cost's interval**: not run yet{note}: {command}, "
                "about 5 min each on a quiet machine.\n")
    what = [c for c in checks if c["what"] in {x["what"] for e in shown for x in ends[e]["checks"]}]

    def cell(check: Mapping[str, Any]) -> str:
        plain = {True: "**met**", False: "**not met**", None: "figure"}[check["met"]]
        verdict = check.get("verdict") or plain
        return f"{check['value']}: {verdict}"

    header = ["", f"median ({used.get('2', 0):.3f}x on 2 nodes; the table above)",
              *[f"{e} end ({ends[e]['span_cost']['one_node_job_on']['2']:.3f}x on 2 nodes; "
                f"{ends[e]['run'].get('date', '?')})" for e in shown]]
    body = [[c["what"], cell(c), *[next((cell(x) for x in ends[e]["checks"] if x["what"] == c["what"]), "")
                                   for e in shown]] for c in what]
    moved = [c["what"] for c in what if any(
        next((x["met"] for x in ends[e]["checks"] if x["what"] == c["what"]), c["met"]) != c["met"]
        for e in shown)]
    said = ("No verdict changes across the interval." if not moved else
            "Verdicts that change within the interval: " + "; ".join(moved) + ".")
    return (f"**At the ends of the span cost's interval** ({command}; the span cost's fit is in section "
            f"\"{throughput_section.TITLE}\"): {said}\n\n" + table(header, body) + "\n")


def _span_used(placement: Mapping[str, Any]) -> str:
    """Which span cost the stored placement run was simulated under, and whether it is the one
    bench/sim/model.py charges now."""
    recorded = placement.get("span_cost") or {}
    used = recorded.get("one_node_job_on")
    now = model.SPAN_COST.summary()["one_node_job_on"]
    if used is None:
        return ("simulated before runs recorded their span cost: the 2017-derived model, a one-node job on 2 "
                f"nodes {model.DERIVED_2017_SPAN_COST.slowdown(2, 1):.3f}x; bench/sim/model.py now charges "
                f"{now['2']:.3f}x: re-run `python -m bench.run --only placement`")
    said = f"a one-node job on 2, 3, 4 nodes {used['2']:.3f}x, {used['3']:.3f}x, {used['4']:.3f}x"
    if used != now:
        return (f"simulated under {said}; bench/sim/model.py now charges {now['2']:.3f}x, {now['3']:.3f}x, "
                f"{now['4']:.3f}x: re-run `python -m bench.run --only placement`")
    low, high = (model.SPAN_COST_ENDS[end].slowdown(2, 1) for end in ("low", "high"))
    return (f"{said}, fitted from the throughput runs below, 95% interval {low:.3f}x-{high:.3f}x on 2 "
            "nodes; it replaces the Horovod paper's borrowed figure, 1.19x")


def _steps(cost: model.SpanCost) -> str:
    """The slowdown of a one-node job on 2, 3, 4 nodes, and of a two-node job on 3 and 4."""
    one = ", ".join(f"{k} nodes {cost.slowdown(k, 1):.3f}x" for k in (2, 3, 4))
    two = ", ".join(f"{k} nodes {cost.slowdown(k, 2):.3f}x" for k in (3, 4))
    return f"a one-node job on {one}; a two-node job on {two}"


def _method() -> str:
    cost, old = model.SPAN_COST, model.DERIVED_2017_SPAN_COST
    low, high = model.SPAN_COST_ENDS["low"], model.SPAN_COST_ENDS["high"]
    return f"""## How the simulator works, and what it leaves out

- **Queue**: strict first-come-first-served. Only the head of the queue may start; while it waits, everyone
  behind it waits (head-of-line blocking). Backfilling would help every policy alike and hide fragmentation
  behind reordering. A job starts as soon as enough GPUs are free in total: every policy here may split a job
  over any number of nodes, so fragmentation never blocks a start - it costs run time instead.
- **Span cost** (`bench/sim/model.py`, `SpanCost`): a data-parallel step is compute plus exposed all-reduce,
  comm(k) as a share of compute on k nodes; a job on k nodes whose size needs k0 on an empty cluster runs
  (1 + comm(k)) / (1 + comm(k0)) times as long. comm(k) is fitted from the throughput runs (section
  "{throughput_section.TITLE}"): at node links of 1/{model.FIT_LINK_RATIO}, comm(1) =
  {cost.comm_in:.3f}, comm(2) = {cost.comm_cross:.3f}, comm(3) = {cost.comm(3):.3f}, comm(4) =
  {cost.comm(4):.3f}, comm(8 or more) = {cost.comm(8):.3f} (interpolated between the node counts measured,
  held past the last: a ring crosses each node's link once per direction however many nodes it spans; a
  dip is held at the value before it). Per extra node: {_steps(cost)}; a
  64-GPU job spread over 16
  nodes instead of 8 loses {100 * (cost.slowdown(16, 8) - 1):.1f}%. The 95% interval of the fit runs from
  {_steps(low)} to {_steps(high)}; section "Placement quality: the goals" gives the verdicts at both ends.
  The magnitude is that of a workload sized as a GPU job is (its in-node all-reduce
  {100 * cost.comm_in:.0f}% of its compute, as NVLink's is a few percent of a GPU's step) over node links at
  1/{model.FIT_LINK_RATIO} of the in-node bus bandwidth; read the placement numbers as what placement is worth
  when spanning nodes costs this much. This bench's first workload (25-100 MB per ~0.2 s of CPU compute,
  whose all-reduce cost most of a step even inside one node) fitted
  {throughput_section.FIRST_WORKLOAD_SLOWDOWN} on 2 nodes: it measured the CPU's all-reduce. Before the fit
  the simulator borrowed the magnitude: comm(2) = {model.horovod_comm_cross():.3f}, the mean of 1/0.9-1 and
  1/0.68-1 from the Horovod paper's (Sergeev and Del Balso, 2017) 90% and 68% scaling efficiency on 512
  GPUs - many nodes, not two, a 2017 network, other models - spread over node counts by the first measured
  shape: {_steps(model.BORROWED_SPAN_COST)}. Before any measurement, in-node communication came from A100
  bus bandwidths (~230 GB/s in a node, 57-91 GB/s across two: {old.comm_in:.3f}) and a hierarchical
  all-reduce's growth 2(k-1)/k: {_steps(old)}. The issue's rough model (a flat 30% per extra node) is run
  as a sensitivity check.
- **Ideal bound**: the same trace with all GPUs pooled and no cost for spanning. Under strict FCFS it starts
  and finishes every job no later than any policy (checked job by job in tests/benchmarks/test_simulator.py).
- **Policies** (`bench/sim/policies.py`): *ours* is
  `distributetrain.placement.planner.plan(policy="optimal")`.
  *Original rule*: the planner's "largest-first" counts become pods without a node, bound largest first by the
  default scheduler's NodeResourcesFit LeastAllocated score (spreading) - GPUs stand in for the cpu and memory
  the real score uses, assuming workers ask for them in proportion. *MostAllocated per pod*: the same pods,
  bin-packed.
  *Kueue TAS BestFit*: nodes from most free down, the last the tightest that covers the remainder.
  *Kueue LeastFreeCapacity*: the least-free node that holds the whole job, else nodes from least free up (it
  spans many nodes by design; Kueue's default for pod sets without a topology request since v0.15).
  *FGD*: single-node jobs go where the expected fragmentation grows least, with whole GPUs only (a node's
  fragment is all its free GPUs when a task does not fit), tasks drawn from the size mix cut at the largest
  node; jobs too big for one node take the largest nodes whole, then the rest by the same rule (FGD itself
  only places single-node tasks).
- **Speed trick**: nodes with the same capacity and free count are interchangeable for every policy above,
  so a policy is shown at most `gpus` nodes of each such class (a job never uses more); decisions are the
  same up to renaming equal nodes.
- **Left out**: CPU and memory, topology above the node, preemption, failures, the time to create pods,
  waiting for a better placement (the issue notes such tweaks gained nothing), and correlation between a
  job's size and its duration.
"""
