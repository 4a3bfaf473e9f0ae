"""`python -m bench.measure.preflight [--quick] [--runs N]`: what the pre-flight all-reduce check costs, and
the bandwidth it measures, on the local cluster.

`make demo`'s flow (nodes of 5, 3 and 2 GPUs, pods as processes: needs root) with the manager manifest's
request plus `DT_PREFLIGHT=true` and a one-epoch training: the chief's launcher runs the check (its default
form, tcpcheck.py's TCP ring all-reduces, on all 6 ranks over ssh) before Train.py, and logs per size the
time, algorithm and bus bandwidth, each pod's link to the chief, where the time went (its phases) and what
the whole check took; this bench reads those lines from the manager's log. That time informs the default of
`--preflight` (docs/manager.md, "The pre-flight").
`main(quick)` is what bench/run.py calls; quick mode skips it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

from bench.measure import demo_phases

ROOT = Path(__file__).resolve().parents[2]
RUNS = 2
FEW_SECONDS = 5.0  # the "on by default if it costs under a few seconds"

_SIZE = re.compile(r"INFO pre-flight (\d+ [KMG]iB) over (\d+) ranks \((\w+)\): ([0-9.]+) ms, "
                   r"algbw ([0-9.e+-]+) GB/s, busbw ([0-9.e+-]+) GB/s$")
_PAIRS = re.compile(r"INFO pre-flight pods to the chief at (\d+ [KMG]iB): (.*); slowest (\S+)$")
_TOOK = re.compile(r"INFO pre-flight took ([0-9.]+)s$")
_PHASES = re.compile(r"INFO pre-flight phases: (.*)$")
_PHASE = re.compile(r"(?:^|, )(.+?) \+([0-9.]+)s(?=, |$)")
_FIRST_STEP = re.compile(r"first_step_unix=(\d+(?:\.\d+)?)")


def read_log(log: str) -> dict[str, Any]:
    """The check's lines in the manager's log (the chief's, copied): sizes, pod links, its duration."""
    sizes, pairs, took, phases = [], [], None, {}
    for line in log.splitlines():
        if m := _SIZE.search(line):
            sizes.append({"size": m[1], "ranks": int(m[2]), "backend": m[3], "ms": float(m[4]),
                          "algbw_gbps": float(m[5]), "busbw_gbps": float(m[6])})
        elif m := _PAIRS.search(line):
            for item in m[2].split(", "):
                host, value, _unit = item.split()
                pairs.append({"pod": host, "size": m[1], "busbw_gbps": float(value)})
        elif m := _TOOK.search(line):
            took = float(m[1])
        elif m := _PHASES.search(line):
            phases = {p[1]: float(p[2]) for p in _PHASE.finditer(m[1])}
    return {"sizes": sizes, "pairs": pairs, "took_s": took, "phases_s": phases}


def run_once(*, epochs: int = 1) -> dict[str, Any]:
    """One job with the check: cluster up, apply, the manager to its end, cluster down."""
    manifest = demo_phases.manager_manifest(epochs, extra_env=[{"name": "DT_PREFLIGHT", "value": "true"}])
    phase, log, applied = demo_phases.run_manager(manifest, prefix="distributetrain-preflight-",
                                                  pod_security=False)
    if phase != "Succeeded":
        raise RuntimeError(f"the manager pod ended {phase}; its log ends:\n{log[-3000:]}")
    first = _FIRST_STEP.search(log)
    found = read_log(log)
    if found["took_s"] is None:
        raise RuntimeError(f"no pre-flight in the manager's log; it ends:\n{log[-3000:]}")
    return {**found, "first_step_s": None if first is None else float(first[1]) - applied}


def markdown(runs: list[dict[str, Any]]) -> str:
    took = [r["took_s"] for r in runs]
    median = statistics.median(took)
    first = [r["first_step_s"] for r in runs if r["first_step_s"] is not None]
    best = min(runs, key=lambda r: abs(r["took_s"] - median))
    lines = [f"The pre-flight all-reduce check of a 6-GPU job on the local cluster (nodes of 5, 3 and 2 "
             f"GPUs, pods as processes, ranks on the CPU), {len(runs)} run(s). It took "
             + ", ".join(f"{t:.1f}" for t in took) + " s (from the launcher starting it to its verdict); the "
             "job's first training step came " + ", ".join(f"{f:.1f}" for f in first) + " s after `kubectl "
             "apply`, the check included.", "",
             "| size | ranks | backend | time per all-reduce, ms | algbw, GB/s | busbw, GB/s |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {s['size']} | {s['ranks']} | {s['backend']} | {s['ms']:.1f} | {s['algbw_gbps']:.3g} | "
              f"{s['busbw_gbps']:.3g} |" for s in best["sizes"]]
    if best["pairs"]:
        lines += ["", f"Each pod's link to the chief (two ranks, {best['pairs'][0]['size']}): "
                  + ", ".join(f"{p['pod']} {p['busbw_gbps']:.3g} GB/s" for p in best["pairs"]) + "."]
    sweep = sum(s["ms"] for s in best["sizes"]) / 1000
    verdict = ("under: this measurement would allow it on" if median < FEW_SECONDS
               else "over: off by default is right")
    phases = ", ".join(f"{name} +{seconds:.1f} s" for name, seconds in best["phases_s"].items())
    lines += ["", f"Median {median:.1f} s, against the {FEW_SECONDS:g} s a check on by default may cost: "
              f"{verdict}. Where the run closest to it spent its time, each milestone when the last rank "
              f"reached it: {phases or 'not said (an older launcher)'}; one all-reduce of each size adds up "
              f"to {sweep:.2f} s of it."]
    return "\n".join(lines)


def main(quick: bool, *, runs: int = RUNS) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.measure.preflight` runs a job with the check "
                           "(needs root)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces)"}
    done = [run_once() for _ in range(runs)]
    return {"runs": done, "took_s": [r["took_s"] for r in done], "markdown": markdown(done)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.preflight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON, not Markdown")
    args = parser.parse_args()
    result = main(args.quick, runs=args.runs)
    print(json.dumps(result, indent=1) if args.json or "markdown" not in result else result["markdown"])
