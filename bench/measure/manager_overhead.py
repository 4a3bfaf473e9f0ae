"""Manager overhead on a big cluster: from the manager's start to all workers created and to the chief created
(pod start-up excluded), and the API requests it made, by verb.

A local cluster (its own process, simulated kubelets) with 1,000 nodes of 8 GPUs and 10,000 pods already
bound, some holding GPUs so that free counts vary from 0 to 8 per node; the manager plans a 64-GPU job
(7 workers of 8 and a chief of 8) and launches it through the real HTTPS API. Repeated, median reported;
`--quick`: 100 nodes and 1,000 pods. Both sizes run in full mode, to show what grows with the cluster.

    python -m bench.measure.manager_overhead [--quick]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from localcluster import serve_command, start_daemon

from bench.measure.clienttypes import as_body, raw
from distributetrain.kube.gateway import Kube, gc_paused, list_nodes_and_pods
from distributetrain.manager.cleanup import delete_job
from distributetrain.manager.orchestrator import Orchestrator
from distributetrain.manager.pretraining import PreTraining
from distributetrain.observe.joblog import Reporter
from distributetrain.placement import inventory, planner
from distributetrain.request.jobspec import JobSpec

GPUS_PER_NODE = 8
JOB_GPUS = 64
IMAGE = "distributetrain/base:0.1.0"


def start_server(state: Path, nodes: int) -> subprocess.Popen[bytes]:
    command = serve_command(state, nodes=[GPUS_PER_NODE] * nodes)
    server, _ = start_daemon(command, directory=state, log=state.parent / "server.log", timeout=180)
    return server


def background_pod(i: int, nodes: int) -> dict[str, Any]:
    """Pod i on node i % nodes; node n's first n % 9 pods hold one GPU each, so its free count is 8 - n % 9
    (capped by its pods), from 8 down to 0."""
    node = i % nodes + 1
    holds = (i // nodes) < min(node % 9, GPUS_PER_NODE)
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if holds:
        resources["limits"] = {"nvidia.com/gpu": "1"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"bg-{i:05d}", "namespace": "bench", "labels": {"app": "background"}},
            "spec": {"nodeName": f"node-{node}", "restartPolicy": "Never",
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}]}}


def seed(kube: Kube, nodes: int, pods: int,
         pod: Callable[[int, int], dict[str, Any]] = background_pod) -> float:
    """Create `pods` pods (pod(i, nodes) each) in namespace bench, 8 client threads; wait until none is
    Pending. Returns the seconds it took."""
    started = time.perf_counter()
    namespace = as_body({"metadata": {"name": "bench"}})
    raw(kube.core.create_namespace(namespace, _preload_content=False)).release_conn()
    time.sleep(0.3)  # the namespace's default ServiceAccount
    local = threading.local()

    def create(i: int) -> None:
        if not hasattr(local, "kube"):
            local.kube = Kube(kube.api_client)
        local.kube.create(pod(i, nodes))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(pods)))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # let the simulated kubelets settle, so the server is idle
        pending, _ = kube.list("pods", "bench", field_selector="status.phase=Pending", page_size=5000)
        if not pending:
            break
        time.sleep(1.0)
    return time.perf_counter() - started


def _launch_once(kubeconfig: Path, job: str, page_size: int) -> dict[str, Any]:
    started, cpu_started = time.perf_counter(), time.process_time()
    kube = Kube.connect(kubeconfig=str(kubeconfig), page_size=page_size)
    spec = JobSpec.from_sources({"gpus": str(JOB_GPUS), "image": IMAGE, "job_name": job}, {})
    orchestrator = Orchestrator(PreTraining(kube, spec, reporter=Reporter(io.StringIO(), io.StringIO())))
    offset = time.perf_counter() - started  # connecting and validating, before the orchestrator's clock
    launched = orchestrator.pretraining.run()
    cpu = time.process_time() - cpu_started  # the manager's own CPU: what machine load does not inflate
    timings = launched.timings
    startup = timings["workers_ready"] - timings["workers_created"]
    result = {
        "workers_created_s": offset + timings["workers_created"],
        "chief_created_s": offset + timings["chief_created"] - startup,
        "gang_startup_s": startup,
        "manager_cpu_s": cpu,
        "workers": len(launched.workers),
        "requests": dict(sorted(kube.requests.items())),
    }
    delete_job(kube, job=job, namespace="default", keep_chief=False)
    kube.api_client.close()  # type: ignore[no-untyped-call]
    return result


def time_inventory_and_plan(kube: Kube, repeats: int, gpus: int
                            ) -> tuple[list[tuple[float, float, float]], planner.Plan]:
    """What the manager does before its first create, `repeats` times: per run the seconds of the two
    inventory lists, of the GPU accounting and of the plan; and the last plan."""
    timings = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        nodes, pods = list_nodes_and_pods(kube=kube)
        t1 = time.perf_counter()
        with gc_paused():
            rows = inventory.inventory(nodes, pods)
        t2 = time.perf_counter()
        plan = planner.plan(inventory.free_gpus(rows), gpus)
        t3 = time.perf_counter()
        timings.append((t1 - t0, t2 - t1, t3 - t2))
        del nodes, pods, rows  # a repeat's peak memory is one listing, not two
    return timings, plan


def _components(kubeconfig: Path, repeats: int) -> dict[str, float]:
    """Where the time before the first create goes: the two inventory lists, the accounting, the plan."""
    kube = Kube.connect(kubeconfig=str(kubeconfig))
    timings, _ = time_inventory_and_plan(kube, repeats, JOB_GPUS)
    kube.api_client.close()  # type: ignore[no-untyped-call]
    lists, accounting, planning = zip(*timings, strict=True)
    return {"list_nodes_and_pods_s": round(statistics.median(lists), 3),
            "inventory_s": round(statistics.median(accounting), 3),
            "plan_s": round(statistics.median(planning), 4)}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(float(statistics.median(r[key] for r in runs)), 3)


def measure(nodes: int, pods: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-manager-") as tmp:
        state = Path(tmp) / "cluster"
        server = start_server(state, nodes)
        try:
            admin = Kube.connect(kubeconfig=str(state / "kubeconfig"))
            seed_seconds = seed(admin, nodes, pods)
            by_page: dict[str, Any] = {}
            for page_size in (500, 5000):
                runs = [_launch_once(state / "kubeconfig", f"bench-{page_size}-{i}", page_size)
                        for i in range(repeats)]
                by_page[f"page_size_{page_size}"] = {
                    "workers_created_s": _median(runs, "workers_created_s"),
                    "chief_created_s": _median(runs, "chief_created_s"),
                    "gang_startup_s_excluded": _median(runs, "gang_startup_s"),
                    "manager_cpu_s": _median(runs, "manager_cpu_s"),
                    "workers": runs[0]["workers"],
                    "requests_by_verb": runs[0]["requests"],
                    "requests_total": sum(runs[0]["requests"].values()),
                }
            by_page["components"] = _components(state / "kubeconfig", repeats)
            admin.api_client.close()  # type: ignore[no-untyped-call]
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(server.pid, signal.SIGKILL)
    return {"nodes": nodes, "pods": pods, "job_gpus": JOB_GPUS, "repeats": repeats,
            "load_average_1m": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(),
            "seed_seconds": round(seed_seconds, 1), **by_page}


def main(quick: bool = False) -> dict[str, Any]:
    sizes = [(100, 1000)] if quick else [(100, 1000), (1000, 10_000)]
    repeats = 2 if quick else 5
    return {"clusters": [measure(nodes, pods, repeats) for nodes, pods in sizes]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes and 1,000 pods only")
    print(json.dumps(main(quick=parser.parse_args().quick), indent=2))
