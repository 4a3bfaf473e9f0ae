"""`inventory` and `plan` against the local cluster (real HTTPS API server, official client, real kubectl)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from kubernetes import client

from apiclient import as_body
from distributetrain.cli import main
from podsecurity import restricted


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def gpu_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return restricted({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox:1.36",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})


def test_live_inventory_and_plan_follow_the_pods(local_cluster: Any) -> None:
    kubeconfig = str(local_cluster.kubeconfig)
    rows = cli_json("inventory", "--kubeconfig", kubeconfig)
    assert [(r["node"], r["free"], r["eligible"]) for r in rows] == [
        ("node-1", 5, True), ("node-2", 3, True), ("node-3", 2, True)]
    # the design's own example: 6 GPUs over 5, 3, 2 keeps the 3-GPU node whole
    plan = cli_json("plan", "--gpus", "6", "--kubeconfig", kubeconfig)
    assert [(e["node"], e["gpus"], e["role"]) for e in plan["allocation"]] == [
        ("node-1", 5, "worker"), ("node-3", 1, "chief")]

    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_pod("default", as_body(gpu_pod("holder", "node-1", 2)))
    rows = cli_json("inventory", "--kubeconfig", kubeconfig)
    assert [(r["node"], r["requested"], r["free"]) for r in rows] == [
        ("node-1", 2, 3), ("node-2", 0, 3), ("node-3", 0, 2)]
    plan = cli_json("plan", "--gpus", "6", "--kubeconfig", kubeconfig)
    assert [(e["node"], e["gpus"]) for e in plan["allocation"]] == [("node-1", 3), ("node-2", 3)]

    result = CliRunner().invoke(main, ["plan", "--gpus", "9", "--kubeconfig", kubeconfig])
    assert result.exit_code == 3
    assert "only 8 out of 9" in result.stderr


def test_a_kubectl_dump_reads_like_the_live_cluster(local_cluster: Any, tmp_path: Path) -> None:
    v1 = client.CoreV1Api(local_cluster.api_client())
    v1.create_namespaced_pod("default", as_body(gpu_pod("holder", "node-2", 1)))
    done = local_cluster.kubectl("get", "nodes,pods", "-A", "-o", "json")
    assert done.returncode == 0, done.stderr
    dump = tmp_path / "cluster.json"
    dump.write_text(done.stdout)
    from_file = cli_json("inventory", "--cluster", str(dump))
    assert from_file == cli_json("inventory", "--kubeconfig", str(local_cluster.kubeconfig))
    assert [r["free"] for r in from_file] == [5, 2, 2]


def test_inventory_and_plan_see_cpu_nodes_as_holding_no_gpus(local_cluster_factory: Any) -> None:
    """A local cluster's CPU nodes (`cpu_nodes=`, `localcluster up --cpu-nodes`) are nodes without any
    nvidia.com/gpu, as a real cluster's: shown, never eligible, never planned on."""
    cluster = local_cluster_factory(nodes=[5, 3, 2], cpu_nodes=1)
    kubeconfig = str(cluster.kubeconfig)
    result = CliRunner().invoke(main, ["inventory", "--kubeconfig", kubeconfig, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["node"]: r for r in json.loads(result.stdout)}
    assert (rows["cpu-1"]["allocatable"], rows["cpu-1"]["free"], rows["cpu-1"]["eligible"]) == (0, 0, False)
    assert rows["cpu-1"]["reason"] == "no nvidia.com/gpu allocatable"
    assert [(n, rows[n]["free"]) for n in ("node-1", "node-2", "node-3")] == [
        ("node-1", 5), ("node-2", 3), ("node-3", 2)]
    text = CliRunner().invoke(main, ["inventory", "--kubeconfig", kubeconfig])
    assert text.exit_code == 0, text.output
    cpu_line = next(line for line in text.stdout.splitlines() if line.startswith("cpu-1"))
    assert "no nvidia.com/gpu allocatable" in cpu_line
    result = CliRunner().invoke(main, ["plan", "--gpus", "6", "--kubeconfig", kubeconfig, "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert [(e["node"], e["gpus"], e["role"]) for e in plan["allocation"]] == [
        ("node-1", 5, "worker"), ("node-3", 1, "chief")]
