"""`python -m bench.measure.throughput [--smoke]`: training throughput per placement, over the node links the
local cluster emulates (`localcluster up --node-link`).

Cells: each split a 4-GPU job can get ([4], [3,1], [2,2], [2,1,1], [1,1,1,1]) and each an 8-GPU job can get
in powers of two ([8], [4,4], [2,2,2,2], [1]*8: 1, 2, 4 and 8 nodes; the 3-node case is the 4-rank job's),
at each link setting - no node link, and node links carrying 1/5 and 1/20 of the in-node all-reduce's bus
bandwidth - plus a 1-GPU job on one node, the one-process baseline. A run is a local cluster with pods as
processes whose nodes hold exactly the split's GPUs, and a job through the product's own `distributetrain
run`: the planner's split (checked against the one wanted), sshd workers and a chief running horovodrun, in
the demo's namespace (Pod Security restricted, the job's NetworkPolicy). Every rank runs
bench/measure/throughput_rank.py, pinned to core `rank % cores`: a fixed compute step (WORK matrix products)
plus `hvd.allreduce` of a GRADIENT_MB gradient.

The workload is sized as a GPU job is, not as a CPU one: what sets the cost of spanning nodes is the share of
a step the all-reduce takes inside one node, times how much slower the node link is. A GPU's in-node
all-reduce (NVLink) costs a few percent of its step: ResNet-50's 100 MB fp32 gradient at ~130 GB/s of bus
bandwidth is ~1.4 ms of a ~0.2 s step, a 1.3 GB BERT-large gradient ~18 ms of ~0.5 s. This bench's first
workload (25 and 100 MB per ~0.2 s of compute) spent 35-87% of a step in the in-node all-reduce, so its span
cost measured the CPU's slow all-reduce, not the network (a 2-node job at 1:20 spent 10.7x its compute
communicating). WORK and GRADIENT_MB put the in-node all-reduce at ~3-5% of a step (2026-11-26, bare
horovodrun on this machine: 4 ranks 0.43 s of compute, 19 ms of all-reduce; 8 ranks 0.89 s and 26 ms), the
floor here being the ~12 ms two ranks sharing a core take to meet whatever the size. The links are set from a
gradient where bandwidth, not that floor, sets the all-reduce's time (CALIBRATION_MB).

The order, and what is kept:
1. The one-node 4- and 8-rank jobs without a node link run first (CALIBRATION_REPEATS each, a
   CALIBRATION_MB gradient): the slowest median bus bandwidth of their all-reduce sets the node links (1:5
   and 1:20 of it), so every shaped link is slower than the in-node path and a shaped column measures the
   network (raw TCP between two pods, which this bench used before, is several times faster than the 4
   ranks' all-reduce on 2 cores: its 1:5 link was not the bottleneck).
2. Every cell then runs REPEATS times, round robin (bench/sim/span_calibration.schedule: pass by pass, every
   cell once per pass, alternate passes backwards), so a busy spell of this shared machine falls on every
   cell alike. Every run is kept; the report gives each cell's median, interquartile range and n, and fits
   the simulator's span cost with a bootstrap interval (bench/sim/span_calibration.fit).

This machine has few cores: with 4 or 8 ranks on 2, ranks share each core in every split of a job alike
(rank r on core r % 2), so the splits of one job differ only in the network between the ranks.

`main(quick)` is what bench/run.py calls (section `throughput`); quick mode and non-root skip it. The whole
run takes about an hour (58 min on 2026-11-26; the estimate in docs/benchmarks.md comes from the runs' own
durations); `--smoke` a few minutes. Results are rendered by bench/report/throughput_section.py and
plotted by bench/report/plots.py.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bench.sim import model, span_calibration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RANK_SCRIPT = Path(__file__).resolve().with_name("throughput_rank.py")
IMAGE = "distributetrain/base:0.1.0"
#: per rank count, the splits run; 8 ranks in powers of two only, as a cluster of 8-GPU nodes would give them
SPLITS: Mapping[int, tuple[tuple[int, ...], ...]] = MappingProxyType({
    4: ((4,), (3, 1), (2, 2), (2, 1, 1), (1, 1, 1, 1)),
    8: ((8,), (4, 4), (2, 2, 2, 2), (1,) * 8),
})
BASELINE = (1,)
#: None: no node link; N: the node link carries 1/N of the in-node all-reduce's bus bandwidth
RATIOS: tuple[int | None, ...] = (None, 5, 20)
GRADIENT_MB: tuple[float, ...] = (2,)
CALIBRATION_MB: tuple[float, ...] = (25,)
WORK = 600
SECONDS_PER_SIZE = 6.0
REPEATS = 5
CALIBRATION_REPEATS = 3
JOB_TIMEOUT = 1200.0

_PLAN = re.compile(r"plan \(attempt \d+\): \d+ GPU\(s\) as (.*?); chief")
_RESULT = re.compile(r"throughput_result=(\{.*\})")
_PINNED = re.compile(r"rank=(\d+) size=\d+ core=(\d+) host=(\S+)")


def link_for(payload_bytes_per_s: float) -> str:
    """A node link (tc rate on the wire) whose TCP payload is `payload_bytes_per_s`."""
    from localcluster import TCP_PAYLOAD_SHARE

    return f"{max(1, round(payload_bytes_per_s * 8 / TCP_PAYLOAD_SHARE / 1e6))}mbit"


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


def run_job(split: Sequence[int], *, node_link: str, sizes: Sequence[float], seconds: float,
            work: int = WORK) -> dict[str, Any]:
    """One job of sum(split) GPUs on nodes holding exactly `split`; the ranks' measurements and how it ran."""
    gpus = sum(split)
    # no --network-interface: the chief's launcher passes the pod's own (eth0) where a rank runs on a
    # worker, and none for a job planned onto one pod (horovodrun refuses any interface but the loopback's
    # there: "No interface is found for address 127.0.0.1"), as the demo
    command = (f"python3 {RANK_SCRIPT} --gradient-mb {','.join(f'{s:g}' for s in sizes)} "
               f"--seconds {seconds:g} --work {work}")
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


def measure(*, splits: Mapping[int, Sequence[tuple[int, ...]]] = SPLITS,
            ratios: Sequence[int | None] = RATIOS, sizes: Sequence[float] = GRADIENT_MB,
            seconds: float = SECONDS_PER_SIZE, repeats: int = REPEATS, work: int = WORK,
            calibration_sizes: Sequence[float] = CALIBRATION_MB,
            calibration_repeats: int = CALIBRATION_REPEATS, baseline: bool = True,
            progress: Callable[[str], None] = print, run: Callable[..., dict[str, Any]] | None = None,
            ) -> dict[str, Any]:
    """The in-node calibration, then every cell `repeats` times, interleaved (see the module's docstring);
    every run kept in `every_run`, the calibration's in `in_node["runs"]`. `run` makes one job (default
    `run_job`; the tests pass a model of it to check the order and the links)."""
    run_one = run or run_job
    started = time.monotonic()

    def job(split: tuple[int, ...], link: Mapping[str, Any] | None, repeat: int, name: str,
            gradients: Sequence[float] = sizes) -> dict[str, Any]:
        load = round(os.getloadavg()[0], 1)
        made = run_one(split, node_link=str(link["node_link"]) if link else "", sizes=gradients,
                       seconds=seconds, work=work)
        made.update(link=name, load_average_1m=load, repeat=repeat,
                    started_s=round(time.monotonic() - started - made["job_wall_s"], 1))
        steps = ", ".join(f"{mb} MB {r['steps_per_s']:.2f} steps/s" for mb, r in made["sizes"].items())
        progress(f"throughput: {name} {list(split)}: {steps} (load {load}, repetition {repeat + 1}, "
                 f"{made['job_wall_s']:.0f} s)")
        return made

    one_node = [(ranks,) for ranks in splits]
    calibration = [job(split, None, repeat, "in-node", calibration_sizes) for repeat, split in
                   span_calibration.schedule(one_node, calibration_repeats)]
    in_node = span_calibration.in_node_bus_bandwidth(calibration)
    slowest = float(in_node["slowest_bytes_per_s"])
    shaped = ", ".join(f"1/{r}" for r in ratios if r is not None)
    progress(f"throughput: in-node all-reduce bus bandwidth {slowest / 1e6:,.0f} MB/s (the slowest median of "
             f"{', '.join(f'{r} ranks' for r in splits)}); node links at {shaped} of it")
    links = [{**link, "node_link": "" if link["ratio"] is None else link_for(link["payload_bytes_per_s"])}
             for link in span_calibration.link_rates(slowest, ratios)]
    cells: list[tuple[Mapping[str, Any] | None, tuple[int, ...]]] = [(None, BASELINE)] if baseline else []
    cells += [(link, split) for link in links for ranks in splits for split in splits[ranks]]
    order = span_calibration.schedule(list(range(len(cells))), repeats)
    every: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for done, (repeat, index) in enumerate(order):
        link, split = cells[index]
        name = str(link["name"]) if link else span_calibration.BASELINE
        try:
            every.append(job(split, link, repeat, name))
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            # one job lost (a cluster that did not start, a timeout) costs its cell one repetition, not the
            # hours of runs before it; the report shows each cell's n and lists what failed
            said = str(error)
            failed.append({"link": name, "split": list(split), "repeat": repeat, "error": said[-2000:]})
            progress(f"throughput: {name} {list(split)} failed (repetition {repeat + 1}): {said[-300:]}")
        left = (time.monotonic() - started) / (done + 1 + len(calibration)) * (len(order) - done - 1)
        progress(f"throughput: {done + 1}/{len(order)} runs, about {left / 60:.0f} min left")
    return {"format": 2, "cores": len(os.sched_getaffinity(0)), "ranks": list(splits),
            "in_node": {**in_node, "runs": calibration, "repeats": calibration_repeats,
                        "gradient_mb": list(calibration_sizes)},
            "links": links, "repeats": repeats, "every_run": every, "failed_runs": failed,
            "gradient_mb": list(sizes), "work": work,
            "seconds_per_size": seconds, "fit_link": span_calibration.link_name(model.FIT_LINK_RATIO),
            "took_s": round(time.monotonic() - started, 1)}


def main(quick: bool) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.run --only throughput` measures it "
                           "(needs root, about an hour)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces and tc)"}
    return measure()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="a few minutes: [4] and [2,2] at a 1:20 link, 2 repetitions, one calibration "
                             "run, no baseline, 3 s each")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    result = (measure(splits={4: ((4,), (2, 2))}, ratios=(20,), seconds=3.0, repeats=2,
                      calibration_repeats=1, baseline=False)
              if args.smoke else main(False))
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
