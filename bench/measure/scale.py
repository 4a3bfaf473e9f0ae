"""Scale: the manager's inventory + plan on a 7,500-node cluster with 150,000 pods (the size seed 001 cites).

The local cluster runs as its own process with the simulated runtime; the pods are bound to their nodes at
creation (a third of them holding a GPU). Two shapes of pod, each on its own cluster:
- minimal: one container, requests and a GPU limit (about 2 KB as the server stores it);
- realistic: what a Deployment's pod looks like on a real cluster - labels, annotations, an ownerReference,
  managedFields (the controller's and the kubelet's), three containers with env, probes and volume mounts, a
  projected service-account volume, the default tolerations; the simulated kubelet writes a full status
  (conditions, one containerStatus per container, IPs, start time): about 12 KB of JSON each. A tenth of the
  pods only (SIZES): the local API server holds ~170 KB per such pod, too much at 150,000 for this machine.
The measuring side runs in a fresh subprocess, so its peak memory is the manager's own, and its first
inventory + plan is cold, as a real manager's only one is: connecting, `k8s.list_nodes_and_pods` (paged
raw JSON, pods decoded slim by slimpods.py), `inventory` and `plan`. Then the same again, warm; the report
gives the cold run, the warm median and the slowest. Where the time goes is taken apart on the same
cluster: the transfer alone, orjson decoding of the same bytes, and the official client's model
deserialization of one page (what the manager avoids), scaled to all pods.

    python -m bench.measure.scale [--quick] [--shape minimal|realistic] [--nodes N --pods N]
    # goals (bench/report/goals.py): the cold run under 5 s, the process under 1 GiB
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.measure.clienttypes import raw
from bench.measure.manager_overhead import (
    GPUS_PER_NODE,
    background_pod,
    seed,
    start_server,
    time_inventory_and_plan,
)
from distributetrain.kube.gateway import Kube, gc_paused

_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"]+)"')
NODES, PODS = 7500, 150_000
QUICK_NODES, QUICK_PODS = 750, 15_000
#: (nodes, pods) per shape. The local API server holds about 170 KB per realistic pod (2.5 GiB measured at
#: 15,000), so 150,000 of them would not fit this 23.5 GiB machine: that row has a tenth of the pods.
SIZES = {"minimal": (NODES, PODS), "realistic": (NODES, PODS // 10)}
QUICK_SIZES = {"minimal": (QUICK_NODES, QUICK_PODS), "realistic": (QUICK_NODES, QUICK_PODS // 10)}
JOB_GPUS = 64
WARM_REPEATS = 3
PAGE = 5000  # kube/gateway.py's page size
SHAPES = ("minimal", "realistic")


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _fields_v1(value: Any) -> Any:
    """A managedFields `fieldsV1` tree for `value`, as the API server writes it: `f:` per field, lists of
    named items keyed `k:{"name":...}`, other lists `.`-only."""
    if isinstance(value, dict):
        return {".": {}, **{f"f:{k}": _fields_v1(v) for k, v in value.items()}} if value else {}
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return {f'k:{{"name":"{v["name"]}"}}': _fields_v1(v) for v in value}
    return {}


_STATUS_FIELDS: dict[str, Any] = {
    "f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {},
                                              "f:status": {}, "f:type": {}}
                     for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")},
    "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {},
    "f:podIPs": {".": {}, 'k:{"ip":"10.0.0.1"}': {".": {}, "f:ip": {}}}, "f:startTime": {},
}


def realistic_pod(i: int, nodes: int) -> dict[str, Any]:
    """background_pod(i, nodes) (same node, same GPU) dressed as a Deployment's pod on a real cluster."""
    base = background_pod(i, nodes)
    team = f"team-{i % 37:02d}"
    app = f"{team}-trainer"
    rs_hash = _hex(f"{app}-{i % 5}", 10)
    env = [{"name": n, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": p}}}
           for n, p in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
                        ("NODE_NAME", "spec.nodeName"), ("POD_IP", "status.podIP"))]
    env += [{"name": n, "value": v} for n, v in (("LOG_LEVEL", "info"), ("DATA_DIR", "/data"),
                                                 ("NCCL_DEBUG", "WARN"), ("OMP_NUM_THREADS", "8"))]
    token = f"kube-api-access-{_hex(str(i), 5)}"
    token_mount = {"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                   "readOnly": True}
    probe: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                             "initialDelaySeconds": 30, "timeoutSeconds": 1, "periodSeconds": 10,
                             "successThreshold": 1, "failureThreshold": 3}
    common = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
              "imagePullPolicy": "IfNotPresent",
              "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
    main = {"name": "main", "image": "registry.example.com/ml/trainer:2.15.1-cuda12.2",
            "command": ["python3", "-m", "trainer"],
            "args": ["--config", "/etc/app/config.yaml", "--data", "/data", "--checkpoint-every", "600"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                      {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
            "env": env, "resources": base["spec"]["containers"][0]["resources"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"},
                             {"name": "config", "mountPath": "/etc/app", "readOnly": True}, token_mount],
            "livenessProbe": probe,
            "readinessProbe": {**probe, "httpGet": {**probe["httpGet"], "path": "/ready"},
                               "initialDelaySeconds": 5},
            **common}
    logs = {"name": "log-shipper", "image": "registry.example.com/infra/fluent-bit:3.0.4",
            "args": ["--config", "/fluent-bit/etc/fluent-bit.conf"],
            "env": [*env[:2], {"name": "FLUENT_HOST", "value": "logs.infra.svc.cluster.local"}],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}, token_mount], **common}
    metrics = {"name": "metrics-exporter", "image": "registry.example.com/infra/dcgm-exporter:3.3.5",
               "ports": [{"name": "dcgm", "containerPort": 9400, "protocol": "TCP"}],
               "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
               "volumeMounts": [token_mount], **common}
    spec = {
        "nodeName": base["spec"]["nodeName"], "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
        "securityContext": {"runAsNonRoot": True, "fsGroup": 1000}, "schedulerName": "default-scheduler",
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        "containers": [main, logs, metrics],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
            {"name": token, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
        "tolerations": [base["spec"]["tolerations"][0],
                        *[{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute",
                           "tolerationSeconds": 300} for k in ("not-ready", "unreachable")]],
    }
    metadata = {
        "name": base["metadata"]["name"], "namespace": base["metadata"]["namespace"],
        "generateName": f"{app}-{rs_hash}-",
        "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": f"{app}-{i % 5}",
                   "app.kubernetes.io/component": "worker", "app.kubernetes.io/part-of": "ml-platform",
                   "pod-template-hash": rs_hash, "team": team},
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                        "kubectl.kubernetes.io/default-container": "main",
                        "checksum/config": _hex(app, 64)},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{rs_hash}",
                             "uid": f"{_hex(app, 8)}-{_hex(rs_hash, 4)}-4{_hex(team, 3)}-"
                                    f"8{_hex(str(i % 5), 3)}-{_hex(app + rs_hash, 12)}",
                             "controller": True, "blockOwnerDeletion": True}],
    }
    kept = ("generateName", "labels", "annotations", "ownerReferences")
    written = {"metadata": {k: metadata[k] for k in kept},
               "spec": {k: v for k, v in spec.items() if k != "nodeName"}}
    metadata["managedFields"] = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-11-21T08:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(written)},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-21T08:00:05Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": _STATUS_FIELDS}, "subresource": "status"},
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


POD_SHAPES = {"minimal": background_pod, "realistic": realistic_pod}


def _raw_pages(kube: Kube, kind: str) -> list[bytes]:
    """Every page of a cluster-wide list as the bytes the server sent (no decoding)."""
    pages: list[bytes] = []
    token: str | None = None
    lister = kube.core.list_node if kind == "nodes" else kube.core.list_pod_for_all_namespaces
    while True:
        response = lister(limit=PAGE, _continue=token, _preload_content=False)
        body = raw(response).data
        pages.append(body)
        # the continue token sits in the list's metadata, at the head of the body: no need to decode it all
        found = _CONTINUE.search(body, 0, 4096)
        token = found.group(1).decode() if found else None
        if token is None:
            return pages


def _peak_rss_mib() -> float:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux carries it across fork and exec, so a
    child started by a big parent reports the parent's RSS; VmHWM belongs to this process's memory alone."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024


def client_side(kubeconfig: str) -> dict[str, Any]:
    """Runs in its own fresh process: what the manager does before its first create - once cold, as a real
    manager does it, then warm - timed and taken apart."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    kube = Kube.connect(kubeconfig=kubeconfig)
    connect = time.perf_counter() - t0
    cold, plan = time_inventory_and_plan(kube, 1, JOB_GPUS)
    warm, _ = time_inventory_and_plan(kube, WARM_REPEATS, JOB_GPUS)
    peak_mib = _peak_rss_mib()
    cold_total = connect + sum(cold[0])
    warm_totals = [sum(run) for run in warm]
    lists, accounting, planning = zip(*warm, strict=True)

    t0 = time.perf_counter()
    pod_pages = _raw_pages(kube, "pods")
    pages = [*_raw_pages(kube, "nodes"), *pod_pages]
    transfer = time.perf_counter() - t0
    size = sum(len(page) for page in pages)
    t0 = time.perf_counter()
    with gc_paused():
        decoded = [orjson.loads(page) for page in pages]
    decode = time.perf_counter() - t0
    pod_count = sum(len(d["items"]) for d in decoded if d.get("kind") == "PodList")
    pod_bytes = sum(len(orjson.dumps(p)) for d in decoded[-1:] for p in d["items"])
    pod_sample = len(decoded[-1]["items"])
    del decoded

    sample = pod_pages[0]  # a full page, if there are several
    sample_items = len(orjson.loads(sample)["items"])
    t0 = time.perf_counter()
    kube.api_client.deserialize(sample.decode(), "V1PodList", "application/json")  # as the client does
    models_sample = time.perf_counter() - t0
    kube.api_client.close()  # type: ignore[no-untyped-call]
    return {
        "inventory_plus_plan_s": {"cold": round(cold_total, 3),
                                  "warm_p50": round(statistics.median(warm_totals), 3),
                                  "max": round(max([cold_total, *warm_totals]), 3),
                                  "warm": [round(t, 3) for t in warm_totals]},
        "cold_parts_s": {"connect": round(connect, 3), "lists": round(cold[0][0], 3),
                         "inventory": round(cold[0][1], 3), "plan": round(cold[0][2], 4)},
        "list_nodes_and_pods_s": round(statistics.median(lists), 3),
        "inventory_s": round(statistics.median(accounting), 3),
        "plan_s": round(statistics.median(planning), 4),
        "peak_rss_mib": round(peak_mib, 1),
        "load_average_1m": round(load, 1),
        "plan": [(entry.node, entry.gpus) for entry in plan.allocation],
        "transfer_only_s": round(transfer, 3),
        "bytes": size,
        "pod_json_bytes_mean": round(pod_bytes / max(pod_sample, 1)),
        "orjson_decode_s": round(decode, 3),
        "client_models_s_estimated": round(models_sample * pod_count / max(sample_items, 1), 1),
        "client_models_sample": {"pods": sample_items, "seconds": round(models_sample, 3)},
    }


def measure(nodes: int, pods: int, shape: str = "minimal") -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = Path(tmp) / "cluster"
        server = start_server(state, nodes)
        try:
            admin = Kube.connect(kubeconfig=str(state / "kubeconfig"))
            seed_seconds = seed(admin, nodes, pods, POD_SHAPES[shape])
            admin.api_client.close()  # type: ignore[no-untyped-call]
            command = [sys.executable, "-m", "bench.measure.scale", "--client", str(state / "kubeconfig")]
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                raise RuntimeError(f"the measuring process failed ({done.returncode}):\n"
                                   f"{done.stderr[-3000:]}")
            result: dict[str, Any] = json.loads(done.stdout)
            server_rss = Path(f"/proc/{server.pid}/status").read_text()
            result["server_rss_mib"] = round(int(next(line.split()[1] for line in server_rss.splitlines()
                                                      if line.startswith("VmHWM"))) / 1024, 1)
        finally:
            server.terminate()
            server.wait(timeout=120)
    return {"shape": shape, "nodes": nodes, "pods": pods, "gpus_per_node": GPUS_PER_NODE,
            "job_gpus": JOB_GPUS, "seed_seconds": round(seed_seconds, 1), **result}


def main(quick: bool) -> dict[str, Any]:
    sizes = QUICK_SIZES if quick else SIZES
    return {"quick": quick, "rows": [measure(*sizes[shape], shape) for shape in SHAPES]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.measure.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes and {QUICK_PODS} pods")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--pods", type=int)
    parser.add_argument("--shape", choices=SHAPES, help="one shape of pod only (default: both)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--client", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(client_side(args.client)))
    else:
        from bench.report.speed_section import scale as render

        rows = []
        for shape in (args.shape,) if args.shape else SHAPES:
            nodes, pods = (QUICK_SIZES if args.quick else SIZES)[shape]
            rows.append(measure(args.nodes or nodes, args.pods or pods, shape))
        out = {"quick": args.quick, "rows": rows}
        print(json.dumps(out, indent=1) if args.json else render(out))
