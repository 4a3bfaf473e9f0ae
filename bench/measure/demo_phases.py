"""`python -m bench.measure.demo_phases [--quick] [--runs N]`: the demo's start-up, phase by phase, beside
bare horovodrun of the same training.

The real flow of `make demo` (scripts/demo.sh) with a short training: a local cluster of 5, 3 and 2 GPUs
with pods as processes (network namespaces: needs root), `kubectl apply` of rbac/ and the manager manifest
(6 GPUs), the manager's log followed to its end. Each phase's end is read from a line of that log:

  the manager's own lines (UTC, milliseconds)   inventory, plan, workers created / Running and Ready, chief
  the chief's launcher (local time, ms)         every worker's sshd accepts the job key; horovodrun started
  Train.py on rank 0                            first_step_unix=T when the first training batch ended

and timed against the moment just before `kubectl apply` of the manager. Interleaved with each demo run (so
both see the same load on a shared machine), the floor: bare `horovodrun -np 6 -H localhost:6 --gloo` of the
same Train.py on this machine, no cluster, timed from its start to the same first_step_unix= line. The
result gives both as median and range over the runs, and their ratio. `main(quick)` is what bench/run.py
calls; quick mode skips it (a cluster of real processes and TensorFlow take a minute per run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EPOCHS = 2
RUNS = 10  # start-up rows with 10 runs each, as the recovery ones (issue 29)
MANAGER = "distributetrain-manager"
TIMEOUT = 900.0

_MANAGER_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z distributetrain: (.*)$")
_LAUNCHER_LINE = re.compile(r"^launcher (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (.*)$")
_FIRST_STEP = re.compile(r"first_step_unix=(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Phase:
    """A phase ends at the first (or last) line of `source` whose message matches `pattern`."""

    name: str
    source: str  # "manager", "launcher" or "train"
    pattern: str
    last: bool = False


# in the order they happen; "last" where a retry or several workers repeat the line
PHASES = (
    Phase("manager pod started (Manager.sh's first line)", "manager", r"^manager started$"),
    Phase("manager up, cluster listed (inventory)", "manager", r"^inventory: "),
    Phase("plan", "manager", r"^plan \(attempt", last=True),
    Phase("workers created", "manager", r"^worker \S+ created", last=True),
    Phase("workers Running and Ready", "manager", r"Running and Ready", last=True),
    Phase("hostfile written, chief created", "manager", r"^chief \S+ created", last=True),
    Phase("chief running", "manager", r"^chief \S+ is (Running|Succeeded|Failed)", last=True),
    Phase("ssh ready (every worker accepts the job key)", "launcher", r"accepts the job key", last=True),
    Phase("horovodrun started", "launcher", r"^starting: .*horovodrun"),
    Phase("first training step ended", "train", ""),
    Phase("training ended", "launcher", r"^training finished"),
    Phase("workers deleted, manager done", "manager", r"^deleted \d+ object", last=True),
)


def events(log: str) -> list[tuple[str, float, str]]:
    """(source, Unix time, message) for every timed line of the manager's log."""
    found = []
    for line in log.splitlines():
        if m := _MANAGER_LINE.match(line):
            at = datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
            found.append(("manager", at, m[2]))
        elif m := _LAUNCHER_LINE.match(line):
            # the launcher's asctime is the pod's local time; its processes run on this machine
            found.append(("launcher", datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp(), m[2]))
        elif m := _FIRST_STEP.search(line):
            found.append(("train", float(m[1]), line))
    return found


def phase_table(log: str, *, applied: float) -> list[dict[str, Any]]:
    """Each phase: when it ended (seconds since `kubectl apply`) and how long it took (since the phase before
    it). A phase whose line is missing has None, and the next one is timed from the last one found."""
    timed = events(log)
    rows: list[dict[str, Any]] = []
    previous = 0.0
    for phase in PHASES:
        hits = [at for source, at, message in timed
                if source == phase.source and (not phase.pattern or re.search(phase.pattern, message))]
        at = (hits[-1] if phase.last else hits[0]) - applied if hits else None
        rows.append({"phase": phase.name, "since_apply_s": at,
                     "phase_s": None if at is None else at - previous})
        previous = previous if at is None else at
    return rows


def manager_manifest(epochs: int, *, extra_env: Sequence[dict[str, str]] = ()) -> str:
    """manifests/DistributeTrain_Manager.yaml as the demo applies it, with a short training (DT_COMMAND) and
    `extra_env` added to the manager's environment."""
    job: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "DistributeTrain_Manager.yaml").read_text())
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = {"name": "DT_COMMAND", "value": f"python3 /opt/distributetrain/Train.py --epochs {epochs}"}
    container["env"] = [*container.get("env", []), command, *extra_env]
    return yaml.safe_dump(job)


def _run(argv: Sequence[str], *, env: dict[str, str], input: str | None = None,
         timeout: float = 120.0) -> str:
    done = subprocess.run(list(argv), input=input, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def run_manager(manifest: str, *, prefix: str, pod_security: bool) -> tuple[str, str, float]:
    """The shipped manager on a fresh local cluster of processes (nodes 5, 3, 2): cluster up, the RBAC and
    the template applied (and first, with `pod_security`, the demo namespace's levels, as scripts/demo.sh),
    `manifest` applied, the manager followed to its end, cluster down. Its phase, its log and when it was
    applied (unix time)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}"}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        kubectl = [str(BIN / "kubectl"), "--kubeconfig", f"{tmp}/kubeconfig", "--cache-dir", f"{tmp}/cache"]
        local = [str(BIN / "localcluster")]
        _run([*local, "up", "--nodes", "5,3,2", "--runtime", "process", "--dir", tmp, "--images",
              str(ROOT / "scripts" / "local-cluster-images.yaml")], env=env)
        try:
            if pod_security:
                namespace = ROOT / "scripts" / "demo-namespace.yaml"
                _run([*kubectl, "apply", "--server-side", "-f", str(namespace)], env=env)
            _run([*kubectl, "apply", "-f", str(ROOT / "rbac"), "-f",
                  str(ROOT / "manifests" / "DistributeTrain_PodTemplate.yaml"), "-f",
                  str(ROOT / "manifests" / "DistributeTrain_PriorityClass.yaml")], env=env)
            applied = time.time()
            _run([*kubectl, "apply", "-f", "-"], env=env, input=manifest)
            phase = ""
            while phase not in ("Succeeded", "Failed"):
                if time.time() - applied > TIMEOUT:
                    raise RuntimeError(f"the manager did not end within {TIMEOUT:g}s")
                time.sleep(1.0)
                phase = _run([*kubectl, "get", "pod", "-l", f"batch.kubernetes.io/job-name={MANAGER}", "-o",
                              "jsonpath={.items[-1:].status.phase}"], env=env)
            log = _run([*kubectl, "logs", f"job/{MANAGER}"], env=env)
        finally:
            _run([*local, "down", "--dir", tmp], env=env)
    return phase, log, applied


def run_once(*, epochs: int) -> dict[str, Any]:
    """One demo: cluster up, apply, the manager to its end, cluster down. Its log, phases and wall time."""
    started = time.time()
    phase, log, applied = run_manager(manager_manifest(epochs), prefix="distributetrain-phases-",
                                      pod_security=True)
    wall = time.time() - started
    if phase != "Succeeded":
        raise RuntimeError(f"the manager pod ended {phase}; its log ends:\n{log[-3000:]}")
    return {"phases": phase_table(log, applied=applied), "wall_s": wall, "log": log}


def run_bare(*, epochs: int, processes: int = 6) -> float:
    """The floor: bare horovodrun of the same Train.py and ranks on this machine, no cluster, no ssh; seconds
    from its start to rank 0's first step."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
           "TF_CPP_MIN_LOG_LEVEL": "1"}  # as the chief's launcher sets it
    argv = [str(BIN / "horovodrun"), "-np", str(processes), "-H", f"localhost:{processes}", "--gloo",
            str(BIN / "python"), str(ROOT / "base-image" / "Train.py"), "--epochs", str(epochs)]
    with tempfile.TemporaryDirectory(prefix="distributetrain-bare-") as tmp:
        started = time.time()
        done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT,
                              check=False)
    found = _FIRST_STEP.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"bare horovodrun exited with {done.returncode}; its output ends:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return float(found[1]) - started


@dataclass(frozen=True)
class Spread:
    """A sample's median and range: what a headline number needs beside it."""

    median: float
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        return Spread(statistics.median(values), min(values), max(values))

    def text(self) -> str:
        return f"{self.median:.2f} s (range {self.low:.2f}-{self.high:.2f})"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(best: list[dict[str, Any]], runs: list[dict[str, Any]], *, epochs: int,
             bare: Sequence[float] = ()) -> str:
    firsts = [_first_step(r["phases"]) for r in runs]
    lines = [f"`make demo`'s flow with `Train.py --epochs {epochs}` on nodes of 5, 3 and 2 GPUs (pods as "
             f"processes), {len(runs)} run(s); the median run by time to the first training step:", "",
             "| phase | ends, s after `kubectl apply` | phase, s |", "|---|---|---|"]
    lines += [f"| {row['phase']} | {_seconds(row['since_apply_s'])} | {_seconds(row['phase_s'])} |"
              for row in best]
    lines += ["", "First training step, each run: " + ", ".join(_seconds(f) for f in firsts)
              + " s after apply. Whole flow (cluster up to cluster down), each run: "
              + ", ".join(f"{r['wall_s']:.1f}" for r in runs) + " s."]
    timed = [f for f in firsts if f is not None]
    if bare and timed:
        ours, floor = Spread.of(timed), Spread.of(bare)
        lines += ["", f"Apply -> first step: median {ours.text()}, n={len(timed)}. Bare `horovodrun -np 6 "
                  "-H localhost:6 --gloo` of the same Train.py on this machine, interleaved with those runs: "
                  f"median {floor.text()}, n={len(bare)}: each run " + ", ".join(f"{b:.2f}" for b in bare)
                  + f" s. Ratio of the medians {ours.median / floor.median:.2f}x (goal: at most 1.25x and "
                  "under 15 s)."]
        if len(timed) == len(firsts) == len(bare):  # every run timed: pair each with its own bare run
            lines[-1] += (" Run by run, against the bare run right after it: "
                          + ", ".join(f"{f / b:.2f}x" for f, b in zip(timed, bare, strict=True))
                          + "; ours minus bare "
                          + ", ".join(f"{f - b:.1f}" for f, b in zip(timed, bare, strict=True)) + " s.")
    return "\n".join(lines)


def _first_step(rows: list[dict[str, Any]]) -> float | None:
    found = next(r["since_apply_s"] for r in rows if r["phase"].startswith("first training step"))
    return None if found is None else float(found)


def main(quick: bool, *, runs: int = RUNS, epochs: int = EPOCHS, logs: Path | None = None) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.measure.demo_phases` runs the demo's flow "
                           "(needs root)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces)"}
    done: list[dict[str, Any]] = []
    bare: list[float] = []
    for _ in range(runs):  # interleaved: a burst of load on the shared machine hits both alike
        done.append(run_once(epochs=epochs))
        bare.append(run_bare(epochs=epochs))
        if logs is not None:  # the whole manager log of each run, to read a phase line by line
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"run-{len(done)}.log").write_text(done[-1]["log"])
    ordered = sorted(done, key=lambda r: _first_step(r["phases"]) or float("inf"))
    best = ordered[len(ordered) // 2]["phases"]
    return {"epochs": epochs, "runs": runs, "phases": best,
            "first_step_s": [_first_step(r["phases"]) for r in done], "bare_first_step_s": bare,
            "wall_s": [r["wall_s"] for r in done], "every_run": [r["phases"] for r in done],
            "markdown": markdown(best, done, epochs=epochs, bare=bare)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.demo_phases", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON, not Markdown")
    parser.add_argument("--logs", type=Path, metavar="DIR", help="write each run's manager log there")
    args = parser.parse_args()
    result = main(args.quick, runs=args.runs, epochs=args.epochs, logs=args.logs)
    print(json.dumps(result, indent=1) if args.json or "markdown" not in result else result["markdown"])
