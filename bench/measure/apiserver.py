"""Benchmark of the local API server at scale: 1,000 nodes and 10,000 pods on the simulated runtime.

The server runs as its own process (`python -m localcluster serve`, as `localcluster up` starts it),
so its resident memory is measured alone and the client does not share its event loop. Everything goes through
the official `kubernetes` client over HTTPS:
- create throughput: pods created by 8 client threads (each bound with spec.nodeName, so the kubelet's
  admission runs but the scheduler does not: scheduling 10,000 pods one by one is a separate concern);
- list: first the path the manager really takes, `distributetrain.kube.gateway.list_nodes_and_pods` (all
  nodes, then the pods not Succeeded or Failed, raw JSON with `_preload_content=False`, pages of
  k8s.DEFAULT_PAGE_SIZE, each page decoded slim by slimpods.py with the cyclic GC paused); then variants that
  decode every field of every pod: `k8s.Kube.list("pods")` with orjson (pages of 5,000 and of 500, kubectl's
  --chunk-size), the HTTP
  exchange alone (request sent to last byte read: the server's part), one unpaginated raw-JSON list with the
  GC on and paused, pages of 500 with the GC on and paused, and the client's model deserialization;
- watch latency: from just before a PATCH is sent to the watch event arriving on another connection;
- scheduling: 200 (quick: 100) unbound 1-GPU pods created one after another, until the scheduler has
  bound them all (each placement filters the nodes against per-node usage kept current by the controller);
- server RSS (current and peak) read from /proc.

Run: `python -m bench.measure.apiserver [--quick]`; goals (bench/report/goals.py): the manager's lists p50
< 0.5 s, watch p50 < 20 ms, RSS < 1 GiB.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client, config, watch
from localcluster import serve_command, start_daemon

from bench.measure.clienttypes import as_body, raw
from distributetrain.kube.gateway import Kube, list_nodes_and_pods


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 4),
        "p99": round(_percentile(values, 0.99), 4),
        "max": round(max(values), 4),
        "n": len(values),
    }


def _rss_mib(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def _start_server(state: Path, nodes: int) -> subprocess.Popen[bytes]:
    command = serve_command(state, nodes=[8] * nodes, gpu_taint=False)
    server, _ = start_daemon(command, directory=state, log=state.parent / "server.log", timeout=180)
    return server


def _pod(i: int, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:05d}", "labels": {"app": "bench", "shard": str(i % 10)}},
        "spec": {
            "nodeName": f"node-{i % nodes + 1}",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"nvidia.com/gpu": "0"},
                    },
                }
            ],
        },
    }


def _create_pods(api: client.ApiClient, count: int, nodes: int) -> float:
    local = threading.local()

    def create(i: int) -> None:
        if not hasattr(local, "v1"):
            local.v1 = client.CoreV1Api(api)
        response = local.v1.create_namespaced_pod("bench", _pod(i, nodes), _preload_content=False)
        response.release_conn()

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))
    return time.perf_counter() - started


def _wait_running(v1: client.CoreV1Api, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = orjson.loads(raw(v1.list_namespaced_pod("bench", _preload_content=False)).data)["items"]
        if sum(1 for p in items if p["status"].get("phase") == "Running") == count:
            return
        time.sleep(0.5)
    raise RuntimeError("pods did not all become Running")


def _listraw(
    v1: client.CoreV1Api, *, limit: int | None = None, pause_gc: bool = False
) -> tuple[float, float, int]:
    """(seconds until the last byte arrived, seconds decoding, items) for one list of every pod."""
    fetching = decoding = 0.0
    count, token = 0, None
    while True:
        kwargs: dict[str, Any] = {"_preload_content": False}
        if limit:
            kwargs["limit"] = limit
        if token:
            kwargs["_continue"] = token
        t0 = time.perf_counter()
        data = raw(v1.list_pod_for_all_namespaces(**kwargs)).data
        t1 = time.perf_counter()
        if pause_gc:
            # a million fresh objects trigger repeated full collections: pausing them is the client's choice
            gc.disable()
        try:
            body = orjson.loads(data)
        finally:
            gc.enable()
        t2 = time.perf_counter()
        fetching, decoding = fetching + t1 - t0, decoding + t2 - t1
        count += len(body["items"])
        token = body["metadata"].get("continue")
        del body
        if not token:
            return fetching, decoding, count


def _watch_latency(api: client.ApiClient, samples: int) -> list[float]:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_config_map("bench", as_body({"metadata": {"name": "tick"}, "data": {"n": "-1"}}))
    meta = v1.read_namespaced_config_map("tick", "bench").metadata
    if meta is None or meta.resource_version is None:
        raise RuntimeError("the API server answered ConfigMap tick without metadata.resourceVersion")
    rv = meta.resource_version
    sent: dict[str, float] = {}
    latencies: list[float] = []
    ready = threading.Event()
    done = threading.Event()

    def consume() -> None:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            client.CoreV1Api(api).list_namespaced_config_map,
            "bench",
            resource_version=rv,
            timeout_seconds=120,
            _preload_content=False,
        )
        ready.set()
        for event in stream:
            n = (event["raw_object"].get("data") or {}).get("n") if isinstance(event, dict) else None
            if n in sent:
                latencies.append(time.perf_counter() - sent[n])
                if len(latencies) == samples:
                    break
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    ready.wait(10)
    time.sleep(0.3)
    for i in range(samples):
        sent[str(i)] = time.perf_counter()
        v1.patch_namespaced_config_map("tick", "bench", {"data": {"n": str(i)}}, _preload_content=False)
        time.sleep(0.01)
    done.wait(30)
    return latencies


def _schedule(api: client.ApiClient, count: int) -> float:
    """Seconds from the first create until `count` unbound 1-GPU pods are all bound by the scheduler."""
    v1 = client.CoreV1Api(api)
    v1.create_namespace(as_body({"metadata": {"name": "sched"}}))
    time.sleep(0.2)
    started = time.perf_counter()
    for i in range(count):
        pod = {"metadata": {"name": f"s-{i:04d}"},
               "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        raw(v1.create_namespaced_pod("sched", as_body(pod), _preload_content=False)).release_conn()
    while True:
        items = orjson.loads(raw(v1.list_namespaced_pod("sched", _preload_content=False)).data)["items"]
        if sum(1 for p in items if p["spec"].get("nodeName")) == count:
            return time.perf_counter() - started
        time.sleep(0.1)


def main(quick: bool = False) -> dict[str, Any]:
    nodes, pods = (100, 1000) if quick else (1000, 10_000)
    list_runs, model_runs, watch_samples = (5, 1, 50) if quick else (10, 2, 200)
    with tempfile.TemporaryDirectory(prefix="bench-apiserver-") as tmp:
        state = Path(tmp) / "cluster"
        started = time.perf_counter()
        server = _start_server(state, nodes)
        startup = time.perf_counter() - started
        try:
            config_obj = client.Configuration()
            config.load_kube_config(  # type: ignore[no-untyped-call]
                str(state / "kubeconfig"), client_configuration=config_obj)
            config_obj.connection_pool_maxsize = 16
            api = client.ApiClient(config_obj)
            v1 = client.CoreV1Api(api)
            v1.create_namespace(as_body({"metadata": {"name": "bench"}}))
            time.sleep(0.2)  # the namespace's default ServiceAccount
            idle_rss, _ = _rss_mib(server.pid)
            create_seconds = _create_pods(api, pods, nodes)
            _wait_running(v1, pods)
            fetch_times, list_times, paused_times, counts = [], [], [], set()
            for _ in range(list_runs):
                fetch, decode, count = _listraw(v1)
                fetch_times.append(fetch)
                list_times.append(fetch + decode)
                counts.add(count)
                fetch, decode, count = _listraw(v1, pause_gc=True)
                paused_times.append(fetch + decode)
            paged_times, paged_paused_times = [], []
            kube, kube_500 = Kube(api), Kube(api, page_size=500)
            full_times: dict[Kube, list[float]] = {kube: [], kube_500: []}
            manager_times: list[float] = []
            for _ in range(list_runs):
                paged_times.append(sum(_listraw(v1, limit=500)[:2]))
                paged_paused_times.append(sum(_listraw(v1, limit=500, pause_gc=True)[:2]))
                t0 = time.perf_counter()
                listed_nodes, listed_pods = list_nodes_and_pods(kube=kube)  # the manager's own call
                manager_times.append(time.perf_counter() - t0)
                assert (len(listed_nodes), len(listed_pods)) == (nodes, pods)
                del listed_nodes, listed_pods
                for lister, times in full_times.items():
                    t0 = time.perf_counter()
                    items, _ = lister.list("pods")
                    times.append(time.perf_counter() - t0)
                    assert len(items) == pods
                    del items
            model_times = []
            for _ in range(model_runs):
                t0 = time.perf_counter()
                assert len(v1.list_pod_for_all_namespaces().items) == pods
                model_times.append(time.perf_counter() - t0)
            list_bytes = len(raw(v1.list_pod_for_all_namespaces(_preload_content=False)).data)
            latencies = _watch_latency(api, watch_samples)
            scheduled = 100 if quick else 200
            schedule_seconds = _schedule(api, scheduled)
            rss, peak = _rss_mib(server.pid)
            api.close()  # type: ignore[no-untyped-call]
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(server.pid, signal.SIGKILL)
    return {
        "nodes": nodes,
        "pods": pods,
        "startup_seconds": round(startup, 2),
        "create": {
            "seconds": round(create_seconds, 2),
            "pods_per_second": round(pods / create_seconds, 1),
            "client_threads": 8,
        },
        "list_all_pods_http_only": _summary(fetch_times),
        "list_all_pods_raw_json": _summary(list_times),
        "list_all_pods_raw_json_gc_paused": _summary(paused_times),
        "list_items": sorted(counts),
        "list_bytes": list_bytes,
        "list_as_manager": {**_summary(manager_times), "call": "k8s.list_nodes_and_pods",
                            "page_size": kube.page_size},
        "list_all_pods_k8s_py_full_decode": {**_summary(full_times[kube]), "page_size": kube.page_size},
        "list_all_pods_k8s_py_pages_of_500": _summary(full_times[kube_500]),
        "list_all_pods_paged_500_raw_json": _summary(paged_times),
        "list_all_pods_paged_500_raw_json_gc_paused": _summary(paged_paused_times),
        "list_all_pods_client_models": _summary(model_times),
        "watch_latency_seconds": _summary(latencies) if latencies else {},
        "schedule": {"pods": scheduled, "seconds": round(schedule_seconds, 2),
                     "pods_per_second": round(scheduled / schedule_seconds, 1)},
        "server_rss_mib": {"idle": round(idle_rss, 1), "after": round(rss, 1), "peak": round(peak, 1)},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes and 1,000 pods")
    print(json.dumps(main(quick=parser.parse_args().quick), indent=2))
