"""`python -m bench.measure.recovery [--faults N]`: what a lost worker costs a job that survives it, on the
local cluster.

`make demo`'s cluster (nodes of 5, 3 and 2 GPUs, pods as processes: needs root) and its 6-GPU job (a worker
of 5 GPUs on node-1, the chief's 1 on node-3), run by the product's own `distributetrain run`, Train.py with
TensorFlow on the CPU. ConfigMap volumes are refreshed as a real kubelet refreshes them (VOLUME_REFRESH: its
60 s sync period plus up to half of it as jitter, and at once when the pod is updated): the chief sees a new
hostfile because the manager annotates its pod after each write (src/distributetrain/manager/hostfilepush.py),
not because the cluster refreshes faster than a real one. In each job the worker's pod is deleted without
grace FAULTS times (10 by default), each time once the job is whole and training again:

- elastic (`--min-gpus 1`): from the loss to the manager noticing it (detect), to Horovod training again on
  the chief's rank (resumed; on all 6 when the replacement was Ready before Horovod's reset formed its ring,
  which `resumed_ranks` records), to the replacement worker created and then Ready, and to Horovod back at 6
  ranks (full size);
- restart (`--restarts FAULTS`): the worker is deleted a quarter, a half, three quarters of the way through an
  epoch (timed from the arrival of the previous epoch's line); from the loss to detect, to the replacement
  created, to the relaunch (every lost worker replaced: Ready), to the first training step of the relaunched
  training, and the training work lost: the epochs the stopped training finished minus the epoch the relaunch
  resumed from (0 when rank 0 checkpointed every epoch), plus the part of the epoch under way, times the
  epoch's length.

Each fault also records how often the manager found no room for the replacement (`waiting for room` lines:
its doubling back-off) and where the time to Ready went (the manager's creating vs the pod's start).

Times are read from the manager's output (its lines and the chief's, copied) as they arrive. `main(quick)` is
what bench/run.py calls (section `recovery`); quick mode and non-root skip it;
bench/report/recovery_section.py renders it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = "distributetrain/base:0.1.0"
NODES = (5, 3, 2)
FAULTS = 10
VOLUME_REFRESH = 60.0  # the kubelet's syncFrequency default; volumesync.py adds its jitter
# more than the faults need: one rank alone trains ~10 epochs a second here, so the job is stopped after them
ELASTIC_EPOCHS = 5000
FRACTIONS = (0.25, 0.5, 0.75)  # how far through an epoch a restart job's worker is lost, in turn
WAIT = 300.0
JOB = "recovery"

_EPOCH = re.compile(r"(?:^|:)epoch=(\d+) ")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z distributetrain: ")


class Output:
    """A command's output lines, each with the monotonic time it arrived, read in a thread."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=ROOT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append((time.monotonic(), _STAMP.sub("", line.rstrip("\n"))))
                self._cond.notify_all()

    def first(self, pattern: str, after: float = 0.0) -> tuple[float, re.Match[str]] | None:
        regex = re.compile(pattern)
        with self._cond:
            for stamp, line in self.lines:
                if stamp >= after and (found := regex.search(line)):
                    return stamp, found
        return None

    def wait_for(self, pattern: str, after: float = 0.0,
                 timeout: float = WAIT) -> tuple[float, re.Match[str]]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.first(pattern, after)
            if found is not None:
                return found
            ended = self.proc.poll() is not None
            if time.monotonic() > deadline or (ended and self.first(pattern, after) is None):
                raise RuntimeError(f"no line matching {pattern!r} (the manager "
                                   f"{'ended' if ended else 'runs on'}); its whole output is in "
                                   f"{self.save()}, which ends:\n" + self.text[-4000:])
            with self._cond:
                self._cond.wait(0.5)

    def epochs(self, before: float) -> list[tuple[float, int]]:
        with self._cond:
            return [(t, int(m[1])) for t, line in self.lines if t < before and (m := _EPOCH.search(line))]

    def finish(self, timeout: float = WAIT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, 9)  # our own child's session, by its PID
                self.proc.wait(10)
            self._reader.join(10)

    def save(self) -> str:
        """The whole output in a file of its own, for a failure's message."""
        with tempfile.NamedTemporaryFile("w", prefix="bench-recovery-", suffix=".log", delete=False) as file:
            file.write(self.text)
        return file.name

    @property
    def text(self) -> str:
        with self._cond:
            return "\n".join(line for _, line in self.lines)


@contextmanager
def cluster(nodes: Sequence[int] = NODES, **options: Any) -> Iterator[Any]:
    """A local cluster of pods as processes on `nodes`, its kubelets refreshing ConfigMap volumes as real
    ones do; `options`: other ClusterSpec fields."""
    from localcluster import ClusterSpec, ImageMap, LocalCluster

    spec = ClusterSpec(nodes=tuple(nodes), runtime="process",
                       runtime_options={"volume_refresh": VOLUME_REFRESH},
                       images=ImageMap.load(ROOT / "scripts" / "local-cluster-images.yaml"), **options)
    started = LocalCluster(spec).start()
    try:
        yield started
    finally:
        started.stop()


def kubectl(kubeconfig: Path, *args: str, timeout: float = 120) -> str:
    cache = tempfile.mkdtemp(prefix="kubectl-cache-")
    try:
        done = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "--cache-dir", cache,
                               *args], capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} exited with {done.returncode}: {done.stderr[-2000:]}")
    return str(done.stdout)


def worker(kubeconfig: Path) -> str:
    """The job's one running worker pod."""
    pods = json.loads(kubectl(kubeconfig, "get", "pods", "-l", "distributetrain.io/role=worker", "-o",
                              "json"))["items"]
    live = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"]
    if len(live) != 1:
        raise RuntimeError(f"expected one running worker, found {live}")
    return str(live[0])


def lose(kubeconfig: Path, name: str) -> float:
    """Delete the worker's pod without grace (its sshd and ranks die at once); when."""
    at = time.monotonic()
    kubectl(kubeconfig, "delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
    return at


def start_job(kubeconfig: Path, epochs: int, *flags: str) -> Output:
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(ROOT / "scripts" / "demo-namespace.yaml"))
    return Output([str(BIN / "distributetrain"), "run", "--kubeconfig", str(kubeconfig), "--gpus", "6",
                   "--image", IMAGE, "--job-name", JOB, "--network-interface", "eth0", "--schedule-timeout",
                   "120s", "--ssh-timeout", "60s", *flags, "--command",
                   f"python3 /opt/distributetrain/Train.py --epochs {epochs}"])


def replacing(out: Output, at: float) -> dict[str, Any]:
    """From the loss to the replacement's creation, and how often the manager found no room meanwhile (its
    back-off doubles from 2 s: manager/keeper.py)."""
    created, found = out.wait_for(r"worker (\S+) created on ", at)
    looks = len([t for t, line in out.lines if at <= t <= created and "waiting for room to replace" in line])
    return {"replacement": found[1], "created_s": created - at, "no_room_looks": looks}


def _ended(out: Output, what: str) -> dict[str, Any]:
    code = out.finish()
    accuracy = out.first(r"final_accuracy=([0-9.]+)")
    if code != 0:
        raise RuntimeError(f"the {what} job exited with {code}:\n{out.text[-4000:]}")
    return {"exit_code": code, "final_accuracy": float(accuracy[1][1]) if accuracy else None}


def elastic(faults: int = FAULTS, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """One elastic job, its worker lost `faults` times."""
    with cluster() as local:
        out = start_job(local.kubeconfig, ELASTIC_EPOCHS, "--min-gpus", "1")
        runs = []
        try:
            whole = out.wait_for(r"training runs on 6 of 6 GPU")[0]
            for _ in range(faults):
                first = out.wait_for(r"(?:^|:)epoch=\d+ ", whole)[0]
                out.wait_for(r"(?:^|:)epoch=\d+ ", first + 0.001)
                lost = worker(local.kubeconfig)
                at = lose(local.kubeconfig, lost)
                detect = out.wait_for(rf"worker {lost} on \S+ \(.*\) lost", at)[0]
                # Horovod's reset usually forms a ring of the chief's rank alone; when the replacement is
                # Ready before that reset's ring forms, the ring is all 6 ranks at once
                resumed, ring = out.wait_for(r"training runs on (\d+) of 6 GPU", at)
                made = replacing(out, at)
                ready = out.wait_for(r"Ready on .*added to the hostfile; the job holds 6 of 6", at)[0]
                whole = out.wait_for(r"training runs on 6 of 6 GPU", ready)[0]
                runs.append({"detect_s": detect - at, "resumed_s": resumed - at,
                             "resumed_ranks": int(ring[1]),
                             "replacement_created_s": made["created_s"],
                             "no_room_looks": made["no_room_looks"],
                             "replacement_ready_s": ready - at, "full_size_s": whole - at})
                progress("recovery: elastic: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()))
            # the times are measured: stop the job as a user would (the manager deletes it, exit 143)
            out.proc.send_signal(signal.SIGTERM)
            code = out.finish()
            if code != 128 + signal.SIGTERM or not out.first(r"deleted \d+ object\(s\) of job"):
                raise RuntimeError(f"the elastic job, stopped, exited with {code}:\n{out.text[-4000:]}")
        finally:
            if out.proc.poll() is None:
                out.proc.send_signal(signal.SIGTERM)
            out.finish(timeout=120)
    return {"runs": runs, "exit_code": code, "stopped": "SIGTERM to the manager after the last fault"}


def restart(faults: int = FAULTS, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """One restart job (--restarts faults), its worker lost `faults` times at FRACTIONS of an epoch."""
    with cluster() as local:
        # at least two epochs a launch before its fault, and some after the last one
        out = start_job(local.kubeconfig, 3 * faults + 6, "--restarts", str(faults))
        runs = []
        try:
            since, resumed_from = 0.0, 0
            for i in range(faults):
                # two epochs into this launch, so the epoch's length is known; then part of the next one
                second = out.wait_for(rf"(?:^|:)epoch={resumed_from + 2} ", since)[0]
                stamps = [t for t, _ in out.epochs(second + 0.001)][-2:]
                epoch_s = stamps[-1] - stamps[0]
                time.sleep(FRACTIONS[i % len(FRACTIONS)] * epoch_s)
                lost = worker(local.kubeconfig)
                at = lose(local.kubeconfig, lost)
                detect = out.wait_for(rf"worker {lost} on \S+ \(.*\) lost", at)[0]
                made = replacing(out, at)
                relaunched = out.wait_for(r"every lost worker replaced", at)[0]
                resumed_t, found = out.wait_for(r"resumed_from_epoch=(\d+)", at)
                resumed_from = int(found[1])
                stepped = out.wait_for(r"first_step_unix=", resumed_t)[0]
                # the last epoch the stopped training finished: its line may arrive after the loss (the log
                # is copied with some delay), never after the relaunch
                done = out.epochs(resumed_t)[-1][1]
                fraction = FRACTIONS[i % len(FRACTIONS)]
                runs.append({"detect_s": detect - at, "replacement_created_s": made["created_s"],
                             "no_room_looks": made["no_room_looks"], "relaunched_s": relaunched - at,
                             "training_again_s": stepped - at, "epoch_s": epoch_s,
                             "epochs_done": done, "resumed_from": resumed_from,
                             "epochs_redone": done - resumed_from, "fraction": fraction,
                             "work_lost_s": (done - resumed_from + fraction) * epoch_s})
                progress("recovery: restart: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()))
                since = resumed_t
        finally:
            ended = _ended(out, "restart")
    return {"runs": runs, **ended}


def measure(faults: int = FAULTS, progress: Callable[[str], None] = print) -> dict[str, Any]:
    started = time.monotonic()
    result = {"nodes": list(NODES), "faults": faults, "volume_refresh_s": VOLUME_REFRESH,
              "elastic": elastic(faults, progress), "restart": restart(faults, progress)}
    result["took_s"] = round(time.monotonic() - started, 1)
    return result


def main(quick: bool) -> dict[str, Any]:
    if quick:
        return {"skipped": "quick mode; `python -m bench.run --only recovery` measures it (root, ~20 min)"}
    if os.geteuid() != 0:
        return {"skipped": "needs root (the process runtime's network namespaces)"}
    return measure()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=FAULTS,
                        help="workers lost per job (default %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    measured = measure(args.faults)
    text = json.dumps(measured, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
