"""`python -m bench.measure.survival [--part NAME ...] [--outages 10,60,300] [--throttle 60]`: what production
does to a running job and what it costs it (issue 25), on the local cluster with real training.

`make demo`'s kind of cluster (pods as processes: needs root; nodes of 5, 3 and 2 GPUs, or 5, 5 and 2 where a
drained node's worker needs somewhere to go), its 6-GPU job run by the product's own `distributetrain run`,
Train.py with TensorFlow on the CPU. Parts:

- `outages`: one job; mid-training the API server refuses connections for each of OUTAGES seconds in turn,
  then answers 429 (Retry-After: 1) for THROTTLE seconds. Per outage: the epochs the training did meanwhile,
  what the manager printed, and how soon after the API answered again the manager said so; at the end, the
  exit code and whether every epoch was trained exactly once (0 epochs redone).
- `elastic_start`: an elastic job (`--min-gpus 1`) whose worker is deleted DELAYS seconds after the chief's
  launcher starts horovodrun, and once mid-training: each must succeed (the chief relaunches when Horovod
  could not form its first ring).
- `drain`: `kubectl drain` of the worker's node in each mode: the default (the job's PodDisruptionBudget
  refuses the eviction; the training goes on), restart (`--restarts 1 --no-disruption-budget`: the evicted
  worker's ranks get SIGTERM, rank 0 checkpoints the step, the relaunch resumes from it) and elastic
  (`--min-gpus 1 --no-disruption-budget`: shrinks, grows back elsewhere).
- `pulls`: a first image pull of PULL seconds on every node with `--schedule-timeout` a third of it (no
  re-plan; seconds to the first step), and an image no registry has (seconds to exit 78).

Times come from the manager's output lines as they arrive (bench/measure/recovery.py's Output). `main(quick)`
is what bench/run.py calls (section `survival`); quick mode and non-root skip it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.measure import recovery
from bench.measure.recovery import BIN, IMAGE, ROOT, Output, kubectl, worker

OUTAGES = (10.0, 60.0, 300.0)
THROTTLE = 60.0
DELAYS = (2.0, 10.0, 30.0)
PULL = 180.0
JOB = "survival"
PARTS = ("outages", "elastic_start", "drain", "pulls")
_EPOCH_LINE = r"(?:^|:)epoch=(\d+) "


@contextmanager
def cluster(nodes: Sequence[int] = recovery.NODES, **options: Any) -> Iterator[Any]:
    """recovery.py's cluster, its default namespace labelled as the demo's."""
    with recovery.cluster(nodes, **options) as started:
        namespace = ROOT / "scripts" / "demo-namespace.yaml"
        kubectl(started.kubeconfig, "apply", "--server-side", "-f", str(namespace))
        yield started


def run(kubeconfig: Path, epochs: int, *flags: str, image: str = IMAGE) -> Output:
    return Output([str(BIN / "distributetrain"), "run", "--kubeconfig", str(kubeconfig), "--gpus", "6",
                   "--image", image, "--job-name", JOB, "--network-interface", "eth0", "--ssh-timeout", "60s",
                   *flags, "--command", f"python3 /opt/distributetrain/Train.py --epochs {epochs}"])


def _epochs(out: Output) -> list[int]:
    return [epoch for _, epoch in out.epochs(float("inf"))]


def _last_epoch(out: Output) -> int:
    return max(_epochs(out), default=0)


def _finish(out: Output, what: str) -> dict[str, Any]:
    code = out.finish(timeout=1800)
    accuracy = out.first(r"final_accuracy=([0-9.]+)")
    if code != 0:
        raise RuntimeError(f"{what}: the job exited with {code}; its output is in {out.save()}, which ends:\n"
                           + out.text[-3000:])
    return {"exit_code": code, "final_accuracy": float(accuracy[1][1]) if accuracy else None}


def outages(durations: Sequence[float] = OUTAGES, throttle: float = THROTTLE,
            progress: Callable[[str], None] = print) -> dict[str, Any]:
    """One long job, the API down (refused) for each duration in turn, then a 429 storm."""
    faults = [("refuse", d) for d in durations] + ([("429", throttle)] if throttle else [])
    # ~0.5 s an epoch for 6 ranks on 2 cores: enough epochs to outlast every fault, with room
    epochs = int(2.5 * (sum(d for _, d in faults) + 15 * len(faults)) + 60)
    rows = []
    with cluster() as local:
        out = run(local.kubeconfig, epochs)
        try:
            out.wait_for(_EPOCH_LINE)
            for mode, seconds in faults:
                before = _last_epoch(out)
                started = time.monotonic()
                local.api_outage(mode, seconds=seconds, retry_after=1 if mode == "429" else None)
                time.sleep(seconds)
                ended = time.monotonic()
                # the epochs trained meanwhile reach the manager's log once it follows the chief again
                resumed = out.wait_for(_EPOCH_LINE, ended, timeout=seconds + 120)[0]
                out.wait_for(rf"(?:^|:)epoch={before + 2} ", started, timeout=seconds + 120)
                time.sleep(3)
                said = [line for t, line in out.lines if started <= t <= ended + 3 and "API server" in line]
                rows.append({"fault": f"API {mode} {seconds:g} s", "epochs_before": before,
                             "epochs_by_3s_after": _last_epoch(out), "manager_lines": len(said),
                             "first_line": said[0][:160] if said else "",
                             "log_copied_again_after_s": round(resumed - ended, 1)})
                progress("survival: outages: " + json.dumps(rows[-1]))
                if out.proc.poll() is not None:
                    break
        finally:
            ended_job = _finish(out, "outages")
    trained = _epochs(out)
    return {"epochs": epochs, "runs": rows, **ended_job,
            "every_epoch_once": trained == list(range(1, epochs + 1)),
            "epochs_redone": len(trained) - len(set(trained))}


def elastic_start(delays: Sequence[float] = DELAYS,
                  progress: Callable[[str], None] = print) -> dict[str, Any]:
    """An elastic job per delay (and one mid-training): its worker deleted that long after horovodrun
    starts."""
    rows = []
    for delay in [*delays, None]:
        with cluster() as local:
            out = run(local.kubeconfig, 80, "--min-gpus", "1")
            try:
                launched = out.wait_for(r"INFO starting: .*horovodrun")[0]
                if delay is None:
                    launched = out.wait_for(r"(?:^|:)epoch=3 ", launched)[0]
                    wait = 0.0
                else:
                    wait = max(0.0, launched + delay - time.monotonic())
                time.sleep(wait)
                lost = worker(local.kubeconfig)
                at = time.monotonic()
                kubectl(local.kubeconfig, "delete", "pod", lost, "--grace-period=0", "--force",
                        "--wait=false")
                full = out.wait_for(r"training runs on 6 of 6 GPU|runs on 6 of 6", at, timeout=600)[0]
            finally:
                ended = _finish(out, f"elastic, worker lost {delay} s after the start")
            relaunches = len([1 for _, line in out.lines if "relaunching the training" in line])
            when = "mid-training (epoch 3)" if delay is None else f"{delay:g} s after horovodrun"
            rows.append({"lost": when, **ended, "relaunches": relaunches, "back_to_6_s": round(full - at, 1)})
            progress("survival: elastic_start: " + json.dumps(rows[-1]))
    return {"runs": rows}


def _drain(kubeconfig: Path, node: str, timeout: str) -> tuple[int, str]:
    done = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "drain", node,
                           "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                           f"--timeout={timeout}"],
                          capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stderr


def _node_of(kubeconfig: Path, pod: str) -> str:
    return kubectl(kubeconfig, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").strip()


def drain(progress: Callable[[str], None] = print) -> dict[str, Any]:
    modes: list[tuple[str, tuple[str, ...]]] = [
        ("default", ()), ("restart", ("--restarts", "1", "--no-disruption-budget")),
        ("elastic", ("--min-gpus", "1", "--no-disruption-budget"))]
    rows = []
    for mode, flags in modes:
        with cluster(nodes=(5, 5, 2)) as local:
            out = run(local.kubeconfig, 60, *flags)
            try:
                out.wait_for(r"(?:^|:)epoch=3 ")
                lost = worker(local.kubeconfig)
                node = _node_of(local.kubeconfig, lost)
                at = time.monotonic()
                code, said = _drain(local.kubeconfig, node, "20s" if mode == "default" else "120s")
                row: dict[str, Any] = {"mode": mode, "drain_exit": code,
                                       "drain_refused": "violate the pod's disruption budget" in said}
                if mode == "restart":
                    saved = out.wait_for(r"checkpoint_on_notice epoch=(\d+) step=(\d+)", at)
                    resumed = out.wait_for(r"resumed_from_step=(\d+)", at, timeout=600)
                    again = out.wait_for(r"first_step_unix=", resumed[0])[0]
                    row |= {"checkpoint_epoch": int(saved[1][1]), "checkpoint_step": int(saved[1][2]),
                            "resumed_from_step": int(resumed[1][1]),
                            "steps_lost": int(saved[1][2]) - int(resumed[1][1]),
                            "training_again_s": round(again - at, 1)}
                elif mode == "elastic":
                    full = out.wait_for(r"training runs on 6 of 6 GPU|runs on 6 of 6", at, timeout=600)[0]
                    row |= {"back_to_6_s": round(full - at, 1)}
                if mode != "default":
                    kubectl(local.kubeconfig, "uncordon", node)
            finally:
                ended = _finish(out, f"drain ({mode})")
            rows.append({**row, **ended})
            progress("survival: drain: " + json.dumps(rows[-1]))
    return {"runs": rows}


def pulls(pull: float = PULL, progress: Callable[[str], None] = print) -> dict[str, Any]:
    from localcluster import PullTime

    rows = []
    with cluster(pull_times=(PullTime(IMAGE.split(":")[0], pull),)) as local:
        started = time.monotonic()
        out = run(local.kubeconfig, 5, "--schedule-timeout", f"{pull / 3:g}s")
        stepped = out.wait_for(r"first_step_unix=", timeout=pull + 600)[0]
        ended = _finish(out, "slow pull")
        plans = len([1 for _, line in out.lines if re.search(r"plan \(attempt \d+\)", line)])
        rows.append({"case": f"first pull {pull:g} s, --schedule-timeout {pull / 3:g}s", **ended,
                     "plans": plans, "first_step_s": round(stepped - started, 1)})
        progress("survival: pulls: " + json.dumps(rows[-1]))
    with cluster() as local:
        started = time.monotonic()
        out = run(local.kubeconfig, 5, image="registry.example.com/team/trainr:1.0")
        code = out.finish(timeout=600)
        said = out.first(r"could not be pulled.*")
        rows.append({"case": "an image no registry has", "exit_code": code,
                     "failed_after_s": round(time.monotonic() - started, 1),
                     "message": said[1][0][:200] if said else ""})
        progress("survival: pulls: " + json.dumps(rows[-1]))
    return {"runs": rows}


def measure(parts: Sequence[str] = PARTS, progress: Callable[[str], None] = print,
            options: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any] = {}
    runners: dict[str, Callable[..., dict[str, Any]]] = {"outages": outages, "elastic_start": elastic_start,
                                                         "drain": drain, "pulls": pulls}
    for part in parts:
        measured = runners[part](progress=progress, **(options or {}).get(part, {}))
        # lists of records become tables in docs/benchmarks.md, the rest a measure/value table
        progress(f"survival: {part}: " + json.dumps(measured))
        result[part] = measured.pop("runs")
        if measured:
            result[f"{part}_job"] = measured
    result["took_s"] = round(time.monotonic() - started, 1)
    return result


def main(quick: bool) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.run --only survival` measures it (root, ~25 min)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces)"}
    return measure()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.survival", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", action="append", choices=PARTS, help="measure only these parts")
    parser.add_argument("--outages", default=",".join(f"{d:g}" for d in OUTAGES),
                        help="seconds of refused connections, one outage each, comma-separated")
    parser.add_argument("--throttle", type=float, default=THROTTLE, help="seconds of 429s (0: none)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    options = {"outages": {"durations": [float(d) for d in args.outages.split(",") if d],
                           "throttle": args.throttle}}
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    measured = measure(args.part or PARTS, options=options)
    text = json.dumps(measured, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    sys.exit(0)
