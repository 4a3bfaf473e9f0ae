"""`python -m bench.measure.stragglers [--healthy N] [--cpu C]`: how soon the watchdog names a slow rank, how
often it names a healthy one, and what timing the ranks' compute costs the step.

- Overhead: Train.py's model and data in one process (Horovod of size 1), `model.fit` with Keras's own train
  step and with Train.py's timed one (`time_compute`: two `tf.timestamp()` ops, one more log value, the
  Heartbeat callback summing it), alternated ROUNDS times; the mean step time of each (an epoch's wall time
  over its steps, the first epoch - tracing - left out), the best of the rounds.
- A straggler: the local cluster (two nodes of one GPU, pods as processes: needs root) and a 2-GPU job run by
  the product's own `distributetrain run` (rank 0 in the chief, rank 1 in the worker, Train.py with
  TensorFlow on the CPU, Gloo). After HEALTHY_BEATS heartbeats of each rank, the worker's training is held to
  `cpu` CPUs (the cluster's cgroup CPU quota, `localcluster fault throttle`); measured: the heartbeats, steps
  and seconds from the throttle until the manager's `straggler:` line, and how much slower rank 1 computed.
- Healthy runs: the same job N times, untouched, each for HEALTHY_BEATS heartbeats of each rank (every beat
  judged); the straggler lines they printed (false reports) and the largest pace ratio any beat showed.

`main(quick)` is bench/run.py's shape (quick mode and non-root skip the cluster parts).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.measure.recovery import ROOT, Output, cluster, kubectl
from distributetrain.manager.watchdog import RankSeen, StragglerRule, pace
from distributetrain.observe import heartbeat

BIN = Path(sys.executable).parent
IMAGE = "distributetrain/base:0.1.0"
JOB = "straggle"
HEALTHY_BEATS = 6   # heartbeats of each rank a healthy run is watched for (10 s apart)
HEALTHY_RUNS = 20   # the ask
# the worker's training held to this many CPUs: a quarter, as tests/reliability/test_hangs.py does. Half a CPU
# did not slow it (measured: compute 0.4-1.2 ms a step before and after, 5 minutes unreported): the demo's
# tiny model leaves a rank waiting in the all-reduce most of a step, using less than half a CPU anyway
CPU = 0.25
ROUNDS = 5
EPOCHS = 40
WAIT = 300.0

OVERHEAD = """
import importlib.util, json, os, statistics, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
hvd, tf = train.hvd, train.tf
hvd.init()
x, y = train.load_data(None)
rounds, epochs = int(sys.argv[2]), int(sys.argv[3])

class EpochTimes(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        times.append(time.perf_counter() - self.began)

def per_step(timed):
    global times
    times = []
    tf.keras.utils.set_random_seed(1)
    model = train.build_model(x.shape[1], 10)
    callbacks = [EpochTimes(), train.Heartbeat(0, every=3600)]
    if timed:
        model = train.time_compute(model)
    model.compile(loss=train.LOSS, optimizer=train.distributed_optimizer(0.001, 1), metrics=train.METRICS)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=callbacks)
    callbacks[1].stop(done=False)
    steps = -(-len(x) // 32)
    return statistics.mean(times[1:]) / steps

seen = {"plain": [], "timed": []}
for _ in range(rounds):
    for kind in ("plain", "timed"):
        seen[kind].append(per_step(kind == "timed"))
print(json.dumps(seen))
"""


def overhead(rounds: int = ROUNDS, epochs: int = EPOCHS) -> dict[str, Any]:
    """The timed train step's cost on Train.py's step (module docstring), one process, no cluster."""
    done = subprocess.run([sys.executable, "-c", OVERHEAD, str(ROOT / "base-image" / "Train.py"), str(rounds),
                           str(epochs)], capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the overhead probe exited with {done.returncode}: {done.stderr[-3000:]}")
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    plain, timed = min(seen["plain"]), min(seen["timed"])
    return {"rounds": rounds, "epochs": epochs, "plain_step_us": plain * 1e6, "timed_step_us": timed * 1e6,
            "overhead_pct": (timed - plain) / plain * 100,
            "all_us": {k: [round(v * 1e6, 1) for v in vs] for k, vs in seen.items()}}


def beats(out: Output, after: float = 0.0) -> list[tuple[float, heartbeat.Beat]]:
    """The ranks' heartbeats in the manager's output (arrival time, beat), those with a compute time."""
    found = []
    for stamp, line in list(out.lines):
        beat = heartbeat.parse(line) if stamp >= after and "dt-progress rank=" in line else None
        if beat is not None and beat.compute_seconds is not None and not beat.done:
            found.append((stamp, beat))
    return found


def wait_beats(out: Output, count: int, after: float = 0.0) -> None:
    deadline = time.monotonic() + WAIT
    while min(sum(1 for _, b in beats(out, after) if b.rank == r) for r in (0, 1)) < count:
        if time.monotonic() > deadline or out.proc.poll() is not None:
            raise RuntimeError(f"fewer than {count} heartbeats of each rank; the output ends:\n"
                               + out.text[-4000:])
        time.sleep(1)


def ratios(seen: list[tuple[float, heartbeat.Beat]]) -> list[float]:
    """Each beat's pace ratio as the watchdog judged it (against the other rank's latest beat)."""
    latest: dict[int, RankSeen] = {}
    found = []
    for _, beat in seen:
        latest[beat.rank] = RankSeen(beat.rank, beat.step, 0.0, 0.0, beat.step_seconds,
                                     compute_seconds=beat.compute_seconds)
        judged = pace(beat.rank, latest)
        if judged is not None:
            found.append(judged.ratio)
    return found


def start(kubeconfig: Path) -> Output:
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(ROOT / "scripts" / "demo-namespace.yaml"))
    return Output([str(BIN / "distributetrain"), "run", "--kubeconfig", str(kubeconfig), "--gpus", "2",
                   "--image", IMAGE, "--job-name", JOB, "--network-interface", "eth0", "--schedule-timeout",
                   "120s", "--ssh-timeout", "60s", "--command",
                   "python3 /opt/distributetrain/Train.py --epochs 100000"])


def stop(out: Output) -> None:
    out.proc.send_signal(signal.SIGTERM)  # our own child: the manager cleans up and exits 143
    out.finish()


def straggler(local: Any, cpu: float) -> dict[str, Any]:
    """One job, its worker throttled once both ranks beat HEALTHY_BEATS times (module docstring)."""
    out = start(local.kubeconfig)
    try:
        wait_beats(out, HEALTHY_BEATS)
        before = [b.compute_seconds or 0.0 for _, b in beats(out) if b.rank == 1]
        throttled_at = time.monotonic()
        local.throttle(f"{JOB}-worker-0", cpu, match="Train.py")
        step_at = max(b.step for _, b in beats(out) if b.rank == 1)
        reported = out.wait_for(r"straggler: rank (\d+) on (.*?) (?:computes|takes)", throttled_at)
        slow = [(t, b) for t, b in beats(out, throttled_at) if b.rank == 1 and t <= reported[0]]
        after = [b.compute_seconds or 0.0 for _, b in slow]
        line = next(text for t, text in out.lines if t == reported[0] and "straggler:" in text)
        return {"cpu": cpu, "named_rank": int(reported[1][1]), "named": reported[1][2],
                "seconds_to_report": round(reported[0] - throttled_at, 1), "beats_to_report": len(slow),
                "steps_to_report": (slow[-1][1].step - step_at) if slow else None,
                "compute_s_before": statistics.median(before),
                "compute_s_throttled": statistics.median(after),
                "slowdown": statistics.median(after) / statistics.median(before), "line": line,
                "false_reports_before": sum(1 for t, text in out.lines if "straggler:" in text
                                            and t < throttled_at)}
    finally:
        stop(out)


def healthy(local: Any) -> dict[str, Any]:
    """One untouched job for HEALTHY_BEATS heartbeats of each rank."""
    out = start(local.kubeconfig)
    try:
        wait_beats(out, HEALTHY_BEATS)
        seen = beats(out)
        return {"false_reports": sum(1 for _, text in out.lines if "straggler:" in text),
                "beats": len(seen), "max_ratio": max(ratios(seen), default=None)}
    finally:
        stop(out)


def measure(healthy_runs: int = HEALTHY_RUNS, cpu: float = CPU) -> dict[str, Any]:
    result: dict[str, Any] = {"rule": {"factor": StragglerRule().factor, "reports": StragglerRule().reports},
                              "overhead": overhead()}
    with cluster((1, 1)) as local:
        result["straggler"] = straggler(local, cpu)
        runs = [healthy(local) for _ in range(healthy_runs)]
    result["healthy"] = {"runs": len(runs), "false_reports": sum(r["false_reports"] for r in runs),
                         "beats_judged": sum(r["beats"] for r in runs),
                         "max_ratio": max((r["max_ratio"] for r in runs if r["max_ratio"]), default=None),
                         "each": runs}
    return result


def main(quick: bool) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.measure.stragglers` measures it (root)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces)"}
    return measure()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.stragglers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--healthy", type=int, default=HEALTHY_RUNS, help="healthy runs")
    parser.add_argument("--cpu", type=float, default=CPU, help="CPUs the straggler's training is held to")
    parser.add_argument("--overhead-only", action="store_true", help="only the timed step's cost, no cluster")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    measured = overhead() if args.overhead_only else measure(args.healthy, args.cpu)
    text = json.dumps(measured, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
