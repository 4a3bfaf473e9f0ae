"""Scale: the manager's inventory + plan on a 7,500-node cluster with 150,000 pods (the size seed 001 cites).

The local cluster runs as its own process with the simulated runtime; the pods are bound to their nodes at
creation (a third of them holding a GPU). Two shapes of pod, each on its own cluster:
- minimal: one container, requests and a GPU limit (about 2 KB as the server stores it);
- realistic: what a Deployment's pod looks like on a real cluster - labels, annotations, an ownerReference,
  managedFields (the controller's and the kubelet's), three containers with env, probes and volume mounts, a
  projected service-account volume, the default tolerations; the simulated kubelet writes a full status
  (conditions, one containerStatus per container, IPs, start time): about 12 KB of JSON each. A tenth of the
  pods only (SIZES): the local API server holds ~170 KB per such pod, too much at 150,000 for this machine.
The manager's side runs in a fresh process (scale_manager.py), so its peak memory is the manager's own and its
first plan is cold, as a real manager's only one is: the manager's imports, connecting, its request and pod
demands, and `PreTraining.plan` - the product's own path (scale_path.py): the namespace's policies, the
nodes and the not-terminated pods (the manager's field selector, decoded slim), the accounting with the
demands, the plan. Then the same again, warm; the report gives the cold run, the warm median and the slowest,
each step on three clocks: wall, the manager process's CPU and the local API server's CPU (it answers on the
same cores). Where a list's time goes is taken apart on the same cluster: the transfer alone of the same
requests, orjson decoding of the same bytes, and the official client's model deserialization of one page
(what the manager avoids), scaled to all pods.

    python -m bench.measure.scale [--quick] [--shape minimal|realistic] [--nodes N --pods N]
    # goals (bench/report/goals.py): the cold run under 5 s, the process under 1 GiB
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.measure import scale_path
from bench.measure.manager_overhead import GPUS_PER_NODE, background_pod, seed, start_server
from distributetrain.kube.gateway import Kube

NODES, PODS = 7500, 150_000
QUICK_NODES, QUICK_PODS = 750, 15_000
#: (nodes, pods) per shape. The local API server holds about 170 KB per realistic pod (2.5 GiB measured at
#: 15,000), so 150,000 of them would not fit this 23.5 GiB machine: that row has a tenth of the pods.
SIZES = {"minimal": (NODES, PODS), "realistic": (NODES, PODS // 10)}
QUICK_SIZES = {"minimal": (QUICK_NODES, QUICK_PODS), "realistic": (QUICK_NODES, QUICK_PODS // 10)}
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


def measure(nodes: int, pods: int, shape: str = "minimal") -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = Path(tmp) / "cluster"
        server = start_server(state, nodes)
        try:
            admin = Kube.connect(kubeconfig=str(state / "kubeconfig"))
            seed_seconds = seed(admin, nodes, pods, POD_SHAPES[shape])
            admin.api_client.close()  # type: ignore[no-untyped-call]
            command = [sys.executable, "-m", "bench.measure.scale_manager", str(state / "kubeconfig"),
                       str(server.pid)]
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
            "job_gpus": scale_path.JOB_GPUS, "seed_seconds": round(seed_seconds, 1), **result}


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
    args = parser.parse_args()
    from bench.report.speed_section import scale as render

    rows = []
    for shape in (args.shape,) if args.shape else SHAPES:
        nodes, pods = (QUICK_SIZES if args.quick else SIZES)[shape]
        rows.append(measure(args.nodes or nodes, args.pods or pods, shape))
    out = {"quick": args.quick, "rows": rows}
    print(json.dumps(out, indent=1) if args.json else render(out))
