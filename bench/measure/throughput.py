"""`python -m bench.measure.throughput [--smoke]`: training throughput per placement, over the node links the
local cluster emulates (`localcluster up --node-link`).

For each link setting - unshaped, and node links carrying 1/5 and 1/20 of the TCP bandwidth measured between
two pods of one node - and each split a 4-GPU job can get ([4], [3,1], [2,2], [2,1,1], [1,1,1,1]), a local
cluster with pods as processes whose nodes hold exactly those GPUs runs a 4-GPU job through the product's
own `distributetrain run`: the planner's split (checked against the one wanted), sshd workers and a chief
running horovodrun, in the demo's namespace (Pod Security restricted, the job's NetworkPolicy). Every rank
runs bench/measure/throughput_rank.py: a fixed compute step plus `hvd.allreduce` of a 25 MB and a 100 MB
gradient, pinned to core `rank % cores`. A 1-GPU job on one node is the one-process baseline.

This machine has few cores: with 4 ranks on 2, two ranks share each core in every split alike (rank r on core
r % 2), so the splits differ only in the network between the ranks. Scaling efficiency is reported against
one process, and the compute part of each step shows what the shared cores cost.

`main(quick)` is what bench/run.py calls (section `throughput`); quick mode and non-root skip it. Results are
rendered by bench/report/throughput_section.py and plotted by bench/report/plots.py;
bench/sim/span_calibration.py turns them into the placement simulator's span cost (bench/sim/model.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RANK_SCRIPT = Path(__file__).resolve().with_name("throughput_rank.py")
IMAGE = "distributetrain/base:0.1.0"
SPLITS: tuple[tuple[int, ...], ...] = ((4,), (3, 1), (2, 2), (2, 1, 1), (1, 1, 1, 1))
BASELINE = (1,)
#: None: no node link; N: the node link carries 1/N of the TCP bandwidth between two pods of one node
RATIOS: tuple[int | None, ...] = (None, 5, 20)
GRADIENT_MB = (25, 100)
SECONDS_PER_SIZE = 12.0
REPEATS = 2
JOB_TIMEOUT = 1200.0

SINK = """
import socket, threading
def drain(conn):
    buf = bytearray(1 << 20)
    with conn:
        while conn.recv_into(buf):
            pass
server = socket.create_server(("0.0.0.0", 5001), backlog=16)
while True:
    threading.Thread(target=drain, args=(server.accept()[0],), daemon=True).start()
"""
SEND = """
import socket, sys, time
conn = socket.create_connection((sys.argv[1], 5001), timeout=60)
chunk, began = b"x" * (1 << 20), time.monotonic()
for _ in range(int(sys.argv[2])):
    conn.sendall(chunk)
conn.shutdown(socket.SHUT_WR)
conn.recv(1)
print(int(sys.argv[2]) * (1 << 20) / (time.monotonic() - began), flush=True)
"""
_PLAN = re.compile(r"plan \(attempt \d+\): \d+ GPU\(s\) as (.*?); chief")
_RESULT = re.compile(r"throughput_result=(\{.*\})")
_PINNED = re.compile(r"rank=(\d+) size=\d+ core=(\d+) host=(\S+)")


def ratio_name(ratio: int | None) -> str:
    return "unshaped" if ratio is None else f"1:{ratio}"


def link_for(intra_bytes_per_s: float, ratio: int) -> str:
    """A node link (tc rate on the wire) whose TCP payload is `1/ratio` of the intra-node bandwidth."""
    from localcluster import TCP_PAYLOAD_SHARE

    return f"{max(1, round(intra_bytes_per_s * 8 / ratio / TCP_PAYLOAD_SHARE / 1e6))}mbit"


def planned_split(log: str) -> tuple[int, ...]:
    """The GPUs per node of the job's (last) plan, largest first, from the manager's log."""
    found = _PLAN.findall(log)
    if not found:
        raise RuntimeError(f"no plan line in the job's log:\n{log[-3000:]}")
    return tuple(sorted((int(n) for n in re.findall(r"(\d+) on \S+", found[-1])), reverse=True))


@contextmanager
def cluster(nodes: Sequence[int], node_link: str = "") -> Iterator[Any]:
    """A local cluster of real processes with these GPU nodes (and this node link), in its own thread."""
    from localcluster import ClusterSpec, ImageMap, LocalCluster

    spec = ClusterSpec(nodes=tuple(nodes), runtime="process", node_link=node_link,
                       images=ImageMap.load(ROOT / "scripts" / "local-cluster-images.yaml"))
    started = LocalCluster(spec).start()
    try:
        yield started
    finally:
        started.stop()


def kubectl(kubeconfig: Path, *args: str, input: str | None = None, timeout: float = 120) -> str:
    cache = tempfile.mkdtemp(prefix="kubectl-cache-")
    try:
        done = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "--cache-dir", cache,
                               *args], input=input, capture_output=True, text=True, timeout=timeout,
                              check=False)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def intra_node_bandwidth(*, repeats: int = 5, mebibytes: int = 600) -> dict[str, Any]:
    """TCP between two pods of one node (Python sockets, as the node-link tests measure): bytes per second,
    the best of `repeats` transfers (other work on the machine only ever slows one down)."""
    def pod(name: str, command: list[str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "main", "image": "python:3.11-slim", "command": command}]}}

    with cluster((1,)) as local:
        docs = [pod("sink", [sys.executable, "-c", SINK]), pod("sender", ["sleep", "infinity"])]
        kubectl(local.kubeconfig, "apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
        kubectl(local.kubeconfig, "wait", "--for=condition=Ready", "pod/sink", "pod/sender", "--timeout=120s")
        sink = kubectl(local.kubeconfig, "get", "pod", "sink", "-o", "jsonpath={.status.podIP}")
        time.sleep(1)  # the sink listens
        rates = [float(kubectl(local.kubeconfig, "exec", "sender", "--", sys.executable, "-c", SEND, sink,
                               str(mebibytes))) for _ in range(repeats)]
    return {"bytes_per_s": max(rates), "each": rates}


def run_job(split: Sequence[int], *, node_link: str, sizes: Sequence[float],
            seconds: float) -> dict[str, Any]:
    """One job of sum(split) GPUs on nodes holding exactly `split`; the ranks' measurements and how it ran."""
    gpus = sum(split)
    # no --network-interface: the chief's launcher passes the pod's own (eth0) where a rank runs on a
    # worker, and none for a job planned onto one pod (horovodrun refuses any interface but the loopback's
    # there: "No interface is found for address 127.0.0.1"), as the demo
    command = (f"python3 {RANK_SCRIPT} --gradient-mb {','.join(f'{s:g}' for s in sizes)} "
               f"--seconds {seconds:g}")
    with cluster(split, node_link) as local:
        kubectl(local.kubeconfig, "apply", "--server-side", "-f",
                str(ROOT / "scripts" / "demo-namespace.yaml"))
        began = time.monotonic()
        done = subprocess.run(
            [str(BIN / "distributetrain"), "run", "--kubeconfig", str(local.kubeconfig), "--gpus", str(gpus),
             "--image", IMAGE, "--job-name", "throughput", "--command", command],
            capture_output=True, text=True, timeout=JOB_TIMEOUT, check=False, cwd=ROOT)
        wall = time.monotonic() - began
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"the {gpus}-GPU job on {list(split)} exited with {done.returncode}:\n"
                           f"{log[-4000:]}")
    placed = planned_split(log)
    if placed != tuple(sorted(split, reverse=True)):
        raise RuntimeError(f"asked for the split {list(split)}, the planner made {list(placed)}:\n"
                           f"{log[-3000:]}")
    found = _RESULT.findall(log)
    if not found:
        raise RuntimeError(f"no throughput_result line in the job's log:\n{log[-4000:]}")
    result: dict[str, Any] = json.loads(found[-1])
    result["pinning"] = {int(rank): {"core": int(core), "pod": pod}
                         for rank, core, pod in _PINNED.findall(log)}
    result.update(split=list(split), node_link=node_link, job_wall_s=round(wall, 1))
    return result


def best(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of several runs of one job, per gradient size the one with the shortest median step: other work on
    this shared machine only ever makes a step longer."""
    chosen = dict(runs[0])
    chosen["sizes"] = {mb: min((r["sizes"][mb] for r in runs), key=lambda size: size["step_s_median"])
                       for mb in runs[0]["sizes"]}
    chosen["load_average_1m"] = min(r.get("load_average_1m", 0.0) for r in runs)
    return chosen


def measure(*, splits: Sequence[tuple[int, ...]] = SPLITS, ratios: Sequence[int | None] = RATIOS,
            sizes: Sequence[float] = GRADIENT_MB, seconds: float = SECONDS_PER_SIZE, repeats: int = REPEATS,
            progress: Any = print) -> dict[str, Any]:
    """Every split at every link setting, `repeats` times (the second pass in the opposite order, so a busy
    spell of the machine does not fall on the same runs); `runs` keeps the best of each (see `best`),
    `every_run` all of them."""
    started = time.monotonic()
    intra = intra_node_bandwidth()
    progress(f"throughput: between two pods of one node {intra['bytes_per_s'] / 1e6:,.0f} MB/s")
    links = [{"name": ratio_name(r), "ratio": r, "node_link": "" if r is None else link_for(
        intra["bytes_per_s"], r)} for r in ratios]
    every: dict[tuple[str, tuple[int, ...]], list[dict[str, Any]]] = {}
    for repeat in range(repeats):
        order = [(None, BASELINE)] + [(link, split) for link in links for split in splits]
        for link, split in order if repeat % 2 == 0 else reversed(order):
            load = round(os.getloadavg()[0], 1)
            run = run_job(split, node_link=str(link["node_link"]) if link else "", sizes=sizes,
                          seconds=seconds)
            name = str(link["name"]) if link else "baseline"
            run.update(link=name, load_average_1m=load, repeat=repeat)
            every.setdefault((name, split), []).append(run)
            steps = ", ".join(f"{mb} MB {r['steps_per_s']:.2f} steps/s" for mb, r in run["sizes"].items())
            progress(f"throughput: {name} {list(split)}: {steps} (load {load}, pass {repeat + 1})")
    runs = [best(every[(str(link["name"]), split)]) for link in links for split in splits]
    return {"cores": len(os.sched_getaffinity(0)), "intra_node": intra, "links": links,
            "baseline": best(every[("baseline", BASELINE)]), "runs": runs, "repeats": repeats,
            "every_run": [run for found in every.values() for run in found], "gradient_mb": list(sizes),
            "seconds_per_size": seconds, "took_s": round(time.monotonic() - started, 1)}


def main(quick: bool) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.measure.throughput` measures it "
                           "(needs root, ~30 min)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces and tc)"}
    return measure()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="a few minutes: [4] and [2,2], a 1:20 link only, the 25 MB gradient, 3 s each")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    result = (measure(splits=((4,), (2, 2)), ratios=(20,), sizes=(25,), seconds=3.0, repeats=1)
              if args.smoke else main(False))
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
