"""Markdown for each speed bench's result, rendered from the JSON at report time (so `--render-only` picks up
a change of wording without measuring again): the "Speed and overhead" section of docs/benchmarks.md, and the
blocks docblocks.py keeps in docs/planner.md and docs/manager.md. Light imports only: no cluster, no
kubernetes client."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.report.markdown import provenance, table

Result = Mapping[str, Any]


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 0.1 else f"{1000 * seconds:.1f} ms"


def scale(result: Result) -> str:
    if "rows" not in result:  # written before the cold/warm split: as it was rendered then
        return str(result.get("markdown", ""))
    rows: Sequence[Result] = result["rows"]
    head = rows[0]
    warm = len(rows[0]["inventory_plus_plan_s"]["warm"])
    lines = [f"Nodes of {head['gpus_per_node']} GPUs with pods bound to them, a {head['job_gpus']}-GPU "
             "request. One cluster per shape of pod (bench/measure/scale.py says what each holds; the "
             "realistic one has a tenth of the pods, as the local API server needs ~170 KB per such pod); "
             "the manager's side runs in a fresh process: its first inventory + plan is cold, as a real "
             f"manager's only one is, then {warm} warm runs. The machine is shared: see the load average.",
             ""]

    def cell(row: Result, key: str) -> str:
        t = row["inventory_plus_plan_s"]
        cold = row["cold_parts_s"]
        value: dict[str, Callable[[], str]] = {
            "size": lambda: f"{row['nodes']:,} / {row['pods']:,}",
            "load": lambda: str(row.get("load_average_1m", "n/a")),
            "pod": lambda: f"{row['pod_json_bytes_mean']:,} bytes",
            "seed": lambda: f"{row['seed_seconds']:.0f} s",
            "cold": lambda: f"**{t['cold']:.2f} s**",
            "cold_parts": lambda: (f"client set-up {_s(cold['connect'])}, lists {_s(cold['lists'])}, "
                                   f"accounting {_s(cold['inventory'])}, plan {_s(cold['plan'])}"),
            "warm": lambda: f"{t['warm_p50']:.2f} s",
            "max": lambda: f"{t['max']:.2f} s",
            "memory": lambda: f"{row['peak_rss_mib']:.0f} MiB",
            "lists": lambda: _s(row["list_nodes_and_pods_s"]),
            "inventory": lambda: _s(row["inventory_s"]),
            "plan": lambda: _s(row["plan_s"]),
            "transfer": lambda: f"{_s(row['transfer_only_s'])} for {row['bytes'] / 2**20:,.0f} MiB",
            "orjson": lambda: _s(row["orjson_decode_s"]),
            "models": lambda: f"{row['client_models_s_estimated']:.1f} s",
            "server": lambda: f"{row['server_rss_mib']:,.0f} MiB",
        }
        return value[key]()

    measures = [
        ("nodes / pods", "size"), ("load average (1 min) when the manager's side started", "load"),
        ("pod JSON as listed (mean)", "pod"), ("seeding the cluster", "seed"),
        ("**the manager's inventory + plan, cold** (fresh process, first run; goal under 5 s)", "cold"),
        ("of which (cold)", "cold_parts"),
        ("the same, warm: median", "warm"), ("the same, slowest of all runs", "max"),
        ("the manager process's peak memory (goal under 1 GiB)", "memory"),
        ("warm, of which: both lists (k8s.list_nodes_and_pods; pods decoded slim by slimpods.py)", "lists"),
        ("warm, of which: GPU accounting (inventory.py)", "inventory"), ("warm, of which: plan", "plan"),
        ("transfer alone (every pod, not decoded; no field selector, unlike the manager's list)", "transfer"),
        ("decoding every field instead (orjson, the same bytes; avoided)", "orjson"),
        ("the client's model objects instead (V1PodList, estimated from one page; avoided)", "models"),
        ("API server's peak memory", "server"),
    ]
    lines.append(table(["measure", *[f"{row['shape']} pods" for row in rows]],
                       [[what, *[cell(row, key) for row in rows]] for what, key in measures]))
    lines += ["", SCALE_NOT_MEASURED]
    return "\n".join(lines)


#: what the scale bench's numbers are not (issue 29's audit; its figures are the audit's, not re-measured)
SCALE_NOT_MEASURED = (
    "**What these numbers are not.** Not the manager's exact path: the accounting runs without the cpu and "
    "memory demands the manager always passes (`manifests.pod_demands`; the audit in issue 29 measured "
    "about +25% accounting CPU with them), and \"transfer alone\" lists every pod without the manager's "
    "field selector (the audit found the test server serves the manager's selected list about 3.1x more "
    "cheaply), so it is no lower bound of the manager's lists. Nor the manager's own cost: the local API "
    "server answers on the same 2 cores and its time is inside every figure (the audit puts the product's "
    "own CPU at about 2.1 s of the 7.26 s cold run). Measuring the exact path, with the server's time "
    "apart, is still to do.")


def apiserver(result: Result) -> str:
    def summary(key: str, scale_: float = 1.0, unit: str = "s") -> list[str]:
        s = result.get(key) or {}
        if not s:
            return ["not measured", ""]
        digits = 1 if unit == "ms" else 3
        return [f"{s['p50'] * scale_:.{digits}f} {unit}", f"{s['p99'] * scale_:.{digits}f} {unit}"]

    rows = [
        ["**the manager's inventory lists**: `k8s.list_nodes_and_pods` (all nodes, then pods paged by 5,000 "
         "and decoded slim by slimpods.py, as the manager does)", *summary("list_as_manager"), "< 0.5 s"],
        ["every pod with every field: `k8s.Kube.list(\"pods\")` (orjson, pages of 5,000; not what the "
         "manager does)", *summary("list_all_pods_k8s_py_full_decode"), ""],
        ["the same with pages of 500 (kubectl's chunk size)", *summary("list_all_pods_k8s_py_pages_of_500"),
         ""],
        ["HTTP exchange only (request sent to last byte read: the server's part)",
         *summary("list_all_pods_http_only"), ""],
        ["one unpaginated list, raw JSON + orjson, GC paused during the decode",
         *summary("list_all_pods_raw_json_gc_paused"), ""],
        ["one unpaginated list, raw JSON + orjson, default GC", *summary("list_all_pods_raw_json"), ""],
        ["pages of 500, raw JSON + orjson, each page dropped, GC paused",
         *summary("list_all_pods_paged_500_raw_json_gc_paused"), ""],
        ["the client's model objects (`V1PodList`)", *summary("list_all_pods_client_models"), ""],
        ["watch event latency (PATCH sent -> event received on another connection)",
         *summary("watch_latency_seconds", 1000, "ms"), "< 20 ms"],
    ]
    create, sched, rss = result["create"], result["schedule"], result["server_rss_mib"]
    rows += [
        ["create throughput (8 client threads, pods bound by spec.nodeName)",
         f"{create['pods_per_second']:,.0f} pods/s", "", ""],
        [f"scheduling: {sched['pods']} unbound 1-GPU pods created one by one, until all bound",
         f"{sched['pods_per_second']:,.0f} pods/s", "", ""],
        ["server RSS idle / after / peak", f"{rss['idle']:.0f} / {rss['after']:.0f} / {rss['peak']:.0f} MiB",
         "", "< 1 GiB"],
    ]
    head = (f"{result['nodes']:,} nodes, {result['pods']:,} pods (minimal pods: a "
            f"{result['list_bytes'] / 1e6:.1f} MB list), the server in its own process, the official client "
            "over HTTPS on the same machine; "
            f"server start-up {result['startup_seconds']:.2f} s.")
    return head + "\n\n" + table(["measure", "p50", "p99", "goal"], rows)


def planner_speed(result: Result) -> str:
    body = [[f"{r['nodes']:,}", r["mix"], r["policy"], r["topology"], f"{r['p50_ms']:.3f}",
             f"{r['p99_ms']:.2f}", f"{r['cpu_p50_ms']:.3f}", f"{r['cpu_p99_ms']:.2f}"]
            for r in result["rows"]]
    inventories = "; ".join(f"{r['nodes']:,} nodes and {r['pods']:,} pods in {r['cpu_s']:.2f} s CPU"
                            for r in result.get("inventory", []))
    return (f"{result['rows'][0]['decisions']} decisions per row; load average (1 min) at the end "
            f"{result.get('load_average_1m', 'n/a')} on {result.get('cpus', 'n/a')} CPUs, so wall times "
            "include waiting for a CPU; the CPU columns are the deciding thread's own time (goal: CPU p99 "
            "under 10 ms at 10,000 nodes without a topology).\n\n"
            + table(["nodes", "mix", "policy", "topology", "p50 ms", "p99 ms", "CPU p50 ms", "CPU p99 ms"],
                    body)
            + (f"\n\n`inventory()` itself: {inventories}." if inventories else ""))


def manager_overhead(result: Result) -> str:
    body, parts = [], []
    for c in result["clusters"]:
        for page in (5000, 500):
            r = c.get(f"page_size_{page}")
            if not r:
                continue
            verbs = ", ".join(f"{verb} {n}" for verb, n in sorted(r["requests_by_verb"].items()))
            size = f"{page:,}" + (" (default)" if page == 5000 else "")
            body.append([f"{c['nodes']:,} nodes, {c['pods']:,} pods", size,
                         _s(r["workers_created_s"]), _s(r["chief_created_s"]), _s(r["manager_cpu_s"]),
                         f"{r['requests_total']}: {verbs}", f"{c['load_average_1m']}"])
        comp, gang = c.get("components"), c.get("page_size_5000", {}).get("gang_startup_s_excluded")
        if comp:
            parts.append(f"at {c['nodes']:,} nodes / {c['pods']:,} pods the two inventory lists took "
                         f"{_s(comp['list_nodes_and_pods_s'])}, the GPU accounting "
                         f"{_s(comp['inventory_s'])}, the plan {_s(comp['plan_s'])}"
                         + (f" (gang start-up, excluded above: {_s(gang)})" if gang is not None else ""))
    repeats = result["clusters"][0]["repeats"] if result["clusters"] else 0
    return (f"Medians of {repeats} runs.\n\n"
            + table(["cluster", "page size", "start -> all workers created", "-> chief created (start-up "
                     "excluded)", "manager CPU", "requests", "load average (1 min)"], body)
            + ("\n\nBefore the first create, medians: " + "; ".join(parts) + "." if parts else ""))


RENDERERS: dict[str, Callable[[Result], str]] = {
    "scale": scale, "apiserver": apiserver, "planner_speed": planner_speed,
    "manager_overhead": manager_overhead,
}


def render(name: str, result: Result) -> str | None:
    """The bench's Markdown: its renderer, else a "markdown" string it stored; None: show it as a table."""
    if name in RENDERERS:
        try:
            return RENDERERS[name](result)
        except (KeyError, TypeError, IndexError):  # written by an older version of the bench
            pass
    text = result.get("markdown")
    return text if isinstance(text, str) else None


def section(speed: Mapping[str, Any], runs: Mapping[str, Any] | None = None) -> str:
    """Each speed bench under its own heading, with when it was measured: its renderer's Markdown
    (RENDERERS), else the "markdown" string it stored, else lists of records as tables and the rest as a
    measure/value table."""
    parts = []
    for name, result in speed.items():
        parts.append(f"### {name}\n")
        if isinstance(result, Mapping) and "skipped" in result:
            parts.append(f"Not run: {result['skipped']}\n")
            continue
        if isinstance(result, Mapping) and "failed" in result:
            parts.append(f"**Failed:**\n\n```\n{result['failed']}\n```\n")
            continue
        if runs is not None:
            parts.append(provenance(runs.get(name)) + "\n")
        text = render(name, result) if isinstance(result, Mapping) else None
        if text is not None:
            parts.append(text + "\n")
            continue
        scalars: dict[str, Any] = {}
        for key, value in (result.items() if isinstance(result, Mapping) else [("result", result)]):
            if _is_records(value):
                columns = list(dict.fromkeys(k for record in value for k in record))
                parts.append(f"{key}:\n\n" + table(columns, [[_cell(record.get(c)) for c in columns]
                                                             for record in value]) + "\n")
            else:
                scalars[key] = value
        if scalars:
            parts.append(table(["measure", "value"], [[k, v] for k, v in _flatten(scalars)]) + "\n")
    return "\n".join(parts)


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, list | tuple | dict) else str(value)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        out = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    text = _cell(value)
    return [(prefix, text if len(text) < 200 else text[:200] + "...")]
