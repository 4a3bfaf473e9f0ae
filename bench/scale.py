"""Scale: the manager's inventory + plan on a 7,500-node cluster with 150,000 pods (the size seed 001 cites).

The local cluster runs as its own process with the simulated runtime; the pods are bound to their nodes at
creation (a third of them holding a GPU). The measuring side runs in a fresh subprocess, so its peak memory
is the manager's own: `k8s.list_nodes_and_pods` (paged raw JSON, orjson, GC paused) + `inventory` + `plan`.
Where the time goes is taken apart on the same cluster: the transfer alone, orjson decoding of the same bytes,
and the official client's model deserialization of one page (what the manager avoids), scaled to all pods.

    python -m bench.scale [--nodes 7500 --pods 150000]       # goals: under 5 s and under 1 GiB
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.manager_overhead import GPUS_PER_NODE, seed, start_server, time_inventory_and_plan
from distributetrain.k8s import Kube, gc_paused

_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"]+)"')
NODES, PODS = 7500, 150_000
QUICK_NODES, QUICK_PODS = 750, 15_000
JOB_GPUS = 64
REPEATS = 3
PAGE = 5000  # k8s.py's page size


def _raw_pages(kube: Kube, kind: str) -> list[bytes]:
    """Every page of a cluster-wide list as the bytes the server sent (no decoding)."""
    pages: list[bytes] = []
    token: str | None = None
    lister = kube.core.list_node if kind == "nodes" else kube.core.list_pod_for_all_namespaces
    while True:
        response = lister(limit=PAGE, _continue=token, _preload_content=False)
        body = response.data
        pages.append(body)
        # the continue token sits in the list's metadata, at the head of the body: no need to decode it all
        found = _CONTINUE.search(body, 0, 4096)
        token = found.group(1).decode() if found else None
        if token is None:
            return pages


def client_side(kubeconfig: str) -> dict[str, Any]:
    """Runs in its own process: what the manager does before its first create, timed and taken apart."""
    kube = Kube.connect(kubeconfig=kubeconfig)
    timings, plan = time_inventory_and_plan(kube, REPEATS, JOB_GPUS)
    totals = [sum(run) for run in timings]
    lists, accounting, planning = zip(*timings, strict=True)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    t0 = time.perf_counter()
    pages = _raw_pages(kube, "nodes") + _raw_pages(kube, "pods")
    transfer = time.perf_counter() - t0
    size = sum(len(page) for page in pages)
    t0 = time.perf_counter()
    with gc_paused():
        decoded = [orjson.loads(page) for page in pages]
    decode = time.perf_counter() - t0
    pod_count = sum(len(d["items"]) for d in decoded if d.get("kind") == "PodList")
    del decoded

    sample = pages[-2] if len(pages) > 1 else pages[-1]
    sample_items = len(orjson.loads(sample)["items"])
    t0 = time.perf_counter()
    kube.api_client.deserialize(sample, "V1PodList", "application/json")
    models_sample = time.perf_counter() - t0
    kube.api_client.close()
    return {
        "inventory_plus_plan_s": {"p50": round(statistics.median(totals), 3), "max": round(max(totals), 3)},
        "list_nodes_and_pods_s": round(statistics.median(lists), 3),
        "inventory_s": round(statistics.median(accounting), 3),
        "plan_s": round(statistics.median(planning), 4),
        "peak_rss_mib": round(peak_mib, 1),
        "plan": [(entry.node, entry.gpus) for entry in plan.allocation],
        "transfer_only_s": round(transfer, 3),
        "bytes": size,
        "orjson_decode_s": round(decode, 3),
        "client_models_s_estimated": round(models_sample * pod_count / max(sample_items, 1), 1),
        "client_models_sample": {"pods": sample_items, "seconds": round(models_sample, 3)},
    }


def measure(nodes: int, pods: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = Path(tmp) / "cluster"
        server = start_server(state, nodes)
        try:
            admin = Kube.connect(kubeconfig=str(state / "kubeconfig"))
            seed_seconds = seed(admin, nodes, pods)
            admin.api_client.close()
            command = [sys.executable, "-m", "bench.scale", "--client", str(state / "kubeconfig")]
            done = subprocess.run(command, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"the measuring process failed ({done.returncode}):\n"
                                   f"{done.stderr[-3000:]}")
            result: dict[str, Any] = json.loads(done.stdout)
            server_rss = Path(f"/proc/{server.pid}/status").read_text()
            result["server_rss_mib"] = round(int(next(line.split()[1] for line in server_rss.splitlines()
                                                      if line.startswith("VmHWM"))) / 1024, 1)
        finally:
            server.terminate()
            server.wait(timeout=60)
    return {"nodes": nodes, "pods": pods, "gpus_per_node": GPUS_PER_NODE, "job_gpus": JOB_GPUS,
            "seed_seconds": round(seed_seconds, 1), **result}


def markdown(result: dict[str, Any]) -> str:
    total = result["inventory_plus_plan_s"]["p50"]
    rows = [
        ("the manager's inventory + plan (p50 of 3)", f"{total} s", "under 5 s: " + ("met" if total < 5 else
                                                                                   "**not met**")),
        ("its peak memory (the whole process)", f"{result['peak_rss_mib']} MiB",
         "under 1 GiB: " + ("met" if result["peak_rss_mib"] < 1024 else "**not met**")),
        ("of which: both lists (k8s.py: paged; pods decoded slim by msgspec)",
         f"{result['list_nodes_and_pods_s']} s", ""),
        ("of which: GPU accounting (inventory.py)", f"{result['inventory_s']} s", ""),
        ("of which: plan", f"{result['plan_s'] * 1000:.1f} ms", ""),
        ("transfer alone (the same pages, not decoded)",
         f"{result['transfer_only_s']} s for {result['bytes'] / 2**20:.0f} MiB", ""),
        ("decoding every field instead (orjson, the same bytes; avoided)",
         f"{result['orjson_decode_s']} s", ""),
        ("the client's model objects instead (V1PodList, estimated from one page)",
         f"{result['client_models_s_estimated']} s", "avoided"),
        ("API server's peak memory", f"{result['server_rss_mib']} MiB", ""),
    ]
    lines = [f"{result['nodes']:,} nodes of {result['gpus_per_node']} GPUs, {result['pods']:,} pods "
             f"(seeded in {result['seed_seconds']} s), a {result['job_gpus']}-GPU request:", "",
             "| measure | value | goal |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {goal} |" for what, value, goal in rows]
    return "\n".join(lines)


def main(quick: bool) -> dict[str, Any]:
    result = measure(QUICK_NODES, QUICK_PODS) if quick else measure(NODES, PODS)
    return {**result, "markdown": markdown(result)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--pods", type=int)
    parser.add_argument("--client", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(client_side(args.client)))
    elif args.nodes or args.pods:
        out = measure(args.nodes or NODES, args.pods or PODS)
        print(markdown(out))
    else:
        print(main(args.quick)["markdown"])
