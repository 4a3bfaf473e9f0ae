"""`python -m bench.measure.capacity [--only scale_from_zero|queue]`: capacity the manager does not place
itself (docs/real-cluster.md, "Autoscaled GPU pools" and "Kueue"), on the local cluster's models of
cluster-autoscaler and Kueue (docs/local-cluster.md, "Models of other systems").

- scale_from_zero (pods as processes: root): a GPU pool at zero nodes that registers a node POOL_DELAY (30) s
  after a scale-up decision, Ready POOL_READY (5) s later; the product's own `distributetrain run` asks for 2
  GPUs (1 per node) and Train.py trains one epoch. From the command's start to the first training step
  (rank 0's `first_step_unix`), and its parts, read from the manager's output as it arrives: the gang
  created, every pod bound (the pool's nodes Ready), the gang running, the hostfile written, the chief's
  launcher reading it, the first step. `ours` is the whole less the pool's delays (POOL_DELAY + POOL_READY)
  and the autoscaler's scan (at most AUTOSCALER_SCAN) - the goal is under 15 s. ConfigMap volumes are
  refreshed every VOLUME_REFRESH s here, where a real kubelet takes up to a minute or so: that is part of
  what a gang made at once pays on a real cluster.
- queue (simulated kubelets): a ClusterQueue with room for one 4-GPU job on two 4-GPU nodes, and two such
  jobs submitted a second apart through one LocalQueue, each training HOLD s. Sampled every SAMPLE s: the
  second job's pods are gated (holding no GPU) while the first runs, it runs once the first is done, and the
  GPUs bound never exceed the nodes' (nor the quota).

`main(quick)` is what bench/run.py calls (section `capacity`); quick mode skips scale_from_zero.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.measure.recovery import BIN, IMAGE, ROOT, Output, kubectl

POOL_DELAY = 30.0
POOL_READY = 5.0
AUTOSCALER_SCAN = 1.0
VOLUME_REFRESH = 1.0
HOLD = 6.0
SAMPLE = 0.2
JOB = "from-zero"


def scale_from_zero() -> dict[str, Any]:
    from localcluster import ClusterSpec, ImageMap, LocalCluster, NodePool

    spec = ClusterSpec(nodes=(), cpu_nodes=1, runtime="process",
                       runtime_options={"volume_refresh": VOLUME_REFRESH},
                       images=ImageMap.load(ROOT / "scripts" / "local-cluster-images.yaml"),
                       node_pools=(NodePool("gpu", 1, 2),), autoscaler_scan_interval=AUTOSCALER_SCAN,
                       autoscaler_provision_delay=POOL_DELAY, autoscaler_ready_delay=POOL_READY,
                       autoscaler_unneeded_time=30.0)
    cluster = LocalCluster(spec).start()
    try:
        kubeconfig = cluster.kubeconfig
        kubectl(kubeconfig, "apply", "--server-side", "-f", str(ROOT / "scripts" / "demo-namespace.yaml"))
        started = time.monotonic()
        wall = time.time()
        out = Output([str(BIN / "distributetrain"), "run", "--kubeconfig", str(kubeconfig), "--gpus", "2",
                      "--gpus-per-node", "1", "--image", IMAGE, "--job-name", JOB, "--network-interface",
                      "eth0", "--schedule-timeout", "300s", "--command",
                      "python3 /opt/distributetrain/Train.py --epochs 1"])
        marks = {name: out.wait_for(pattern)[0] - started for name, pattern in (
            ("gang_created", r"^created \d+ worker\(s\) and chief"),
            ("gang_running", r"^the gang runs"),
            ("hostfile_written", r"^hostfile ConfigMap \S+ written"),
            ("chief_read_hostfile", r"the hostfile lists \d+ worker"),
        )}
        first = out.wait_for(r"first_step_unix=([0-9.]+)")[1]
        marks["first_step"] = float(first[1]) - wall
        code = out.finish()
        if code != 0:
            raise RuntimeError(f"the job exited with {code}:\n{out.text[-4000:]}")
        pool = POOL_DELAY + POOL_READY
        return {"pool_delay_s": POOL_DELAY, "pool_ready_s": POOL_READY, "autoscaler_scan_s": AUTOSCALER_SCAN,
                "volume_refresh_s": VOLUME_REFRESH, "marks_s": {k: round(v, 2) for k, v in marks.items()},
                "to_first_step_s": round(marks["first_step"], 2),
                "ours_s": round(marks["first_step"] - pool - AUTOSCALER_SCAN, 2),
                "training_start_s": round(marks["first_step"] - marks["chief_read_hostfile"], 2),
                "goal_ours_s": 15.0}
    finally:
        cluster.stop()


def queue() -> dict[str, Any]:
    from localcluster import Behavior, kueue_queue_manifests, start_cluster

    from distributetrain.kube.gateway import Kube
    from distributetrain.manager.orchestrator import Orchestrator
    from distributetrain.manager.pretraining import PreTraining
    from distributetrain.observe.joblog import Reporter
    from distributetrain.request.jobspec import JobSpec

    chief = Behavior(log="epoch 1\n", exit_code=0, exit_after=HOLD)
    cluster = start_cluster(nodes=[4, 4], cpu_nodes=1, kueue=True,
                            behaviors=[(lambda pod: pod["metadata"]["name"].endswith("-chief"), chief)])
    try:
        applied = cluster.kubectl("apply", "-f", "-", input=kueue_queue_manifests(gpus=4))
        if applied.returncode != 0:
            raise RuntimeError(applied.stderr)
        kube = Kube.connect(kubeconfig=str(cluster.kubeconfig))
        samples: list[dict[str, Any]] = []
        done = threading.Event()
        ended: dict[str, float] = {}
        t0 = time.monotonic()

        def sample() -> None:
            while not done.is_set():
                pods, _ = kube.list("pods", "default")
                held: dict[str, int] = {}
                gated: dict[str, bool] = {}
                for pod in pods:
                    job = (pod["metadata"].get("labels") or {}).get("distributetrain.io/job")
                    if not job or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                        continue
                    gpus = sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
                               for c in pod["spec"]["containers"])
                    if pod["spec"].get("nodeName"):
                        held[job] = held.get(job, 0) + gpus
                    gated[job] = gated.get(job, False) or bool(pod["spec"].get("schedulingGates"))
                samples.append({"t": time.monotonic() - t0, "held": held, "gated": gated})
                time.sleep(SAMPLE)

        def run(job: str, delay: float) -> None:
            time.sleep(delay)
            spec = JobSpec.from_sources({"gpus": "4", "image": IMAGE, "job_name": job, "queue": "team-queue",
                                         "schedule_timeout": "120s", "keep_chief": "false"}, {})
            code = Orchestrator(PreTraining(Kube.connect(kubeconfig=str(cluster.kubeconfig)), spec,
                                            reporter=Reporter(io.StringIO(), io.StringIO()))).run()
            ended[job] = time.monotonic() - t0 if code == 0 else -1.0

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        jobs = [threading.Thread(target=run, args=("first", 0.0)), threading.Thread(target=run,
                                                                                   args=("second", 1.0))]
        for thread in jobs:
            thread.start()
        for thread in jobs:
            thread.join(300)
        done.set()
        sampler.join(10)
    finally:
        cluster.close()
    held_total = max((sum(s["held"].values()) for s in samples), default=0)
    second_waiting = [s for s in samples if s["gated"].get("second")]
    second_started = next((s["t"] for s in samples if s["held"].get("second")), None)
    return {"jobs_ended_s": {k: round(v, 2) for k, v in ended.items()}, "samples": len(samples),
            "max_gpus_bound": held_total, "gpus_in_cluster": 8, "quota_gpus": 4,
            "second_held_gpus_while_queued": max((s["held"].get("second", 0) for s in second_waiting),
                                                 default=0),
            "second_queued_s": round(second_waiting[-1]["t"] - second_waiting[0]["t"], 2)
            if second_waiting else 0.0,
            "second_started_after_first_ended": (second_started is not None and "first" in ended
                                                 and second_started >= ended["first"] - 1.0)}


def markdown(result: dict[str, Any]) -> str:
    lines = ["| measure | value |", "|---|---|"]
    zero = result.get("scale_from_zero") or {}
    if "to_first_step_s" in zero:
        pool = f"{zero['pool_delay_s']:g} s to register a node + {zero['pool_ready_s']:g} s to Ready"
        lines += [f"| scale from zero: command to first training step | {zero['to_first_step_s']} s "
                  f"(the pool: {pool}) |",
                  f"| scale from zero: ours (all but the pool's delays and scan) | {zero['ours_s']} s "
                  f"(goal < {zero['goal_ours_s']:g} s; of it the training's own start "
                  f"{zero['training_start_s']} s) |"]
    elif zero:
        lines.append(f"| scale from zero | {zero.get('skipped', zero)} |")
    two = result.get("queue") or {}
    if two:
        lines += [f"| queue: GPUs bound at most | {two['max_gpus_bound']} of {two['gpus_in_cluster']} "
                  f"(quota {two['quota_gpus']}) |",
                  "| queue: GPUs the second job held while queued | "
                  f"{two['second_held_gpus_while_queued']} |",
                  f"| queue: the second job queued for | {two['second_queued_s']} s, then ran after the "
                  f"first: {two['second_started_after_first_ended']} |"]
    return "\n".join(lines)


def measure(only: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if only in (None, "scale_from_zero"):
        result["scale_from_zero"] = scale_from_zero() if os.geteuid() == 0 else {
            "skipped": "needs root (the process runtime's network namespaces)"}
    if only in (None, "queue"):
        result["queue"] = queue()
    result["markdown"] = markdown(result)
    return result


def main(quick: bool) -> dict[str, Any]:
    return measure("queue" if quick else None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("scale_from_zero", "queue"))
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    measured = measure(args.only)
    text = json.dumps({k: v for k, v in measured.items() if k != "markdown"}, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    print(measured["markdown"], file=sys.stderr)
