"""`distributetrain inventory` and `distributetrain plan`, through click and through the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from distributetrain.cli import main

CLUSTER = str(Path(__file__).resolve().parent.parent / "data" / "cluster.json")
SCRIPT = Path(sys.executable).parent / "distributetrain"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---- inventory -----------------------------------------------------------------------------------


def test_inventory_json_of_a_kubectl_list() -> None:
    rows = run_json("inventory", "--cluster", CLUSTER)
    assert rows == [
        {
            "node": "cpu-1",
            "allocatable": 0,
            "requested": 0,
            "free": 0,
            "eligible": False,
            "reason": "no nvidia.com/gpu allocatable",
        },
        {"node": "node-1", "allocatable": 8, "requested": 3, "free": 5, "eligible": True, "reason": None},
        # the Succeeded pod on node-2 holds nothing; the bound Pending pod on node-3 holds its init peak of 2
        {"node": "node-2", "allocatable": 4, "requested": 1, "free": 3, "eligible": True, "reason": None},
        {"node": "node-3", "allocatable": 4, "requested": 2, "free": 2, "eligible": True, "reason": None},
        {
            "node": "node-4",
            "allocatable": 8,
            "requested": 0,
            "free": 8,
            "eligible": False,
            "reason": "cordoned (spec.unschedulable); "
            "untolerated taint node.kubernetes.io/unschedulable:NoSchedule",
        },
        {
            "node": "node-5",
            "allocatable": 8,
            "requested": 0,
            "free": 8,
            "eligible": False,
            "reason": "not Ready (Ready=Unknown); "
            "untolerated taint node.kubernetes.io/unreachable:NoSchedule",
        },
        {
            "node": "node-6",
            "allocatable": 8,
            "requested": 0,
            "free": 8,
            "eligible": False,
            "reason": "untolerated taint dedicated=web:NoSchedule",
        },
    ]


def test_inventory_table_for_people() -> None:
    result = run("inventory", "--cluster", CLUSTER)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NODE", "ALLOCATABLE", "REQUESTED", "FREE", "ELIGIBLE", "REASON"]
    assert lines[2].split() == ["node-1", "8", "3", "5", "yes"]
    assert (
        "node-6  8            0          8     no        untolerated taint dedicated=web:NoSchedule" in lines
    )
    assert lines[-1] == "3 of 7 node(s) eligible; 10 nvidia.com/gpu free on them (largest: node-1 with 5)."


def test_inventory_toleration_and_node_selector() -> None:
    rows = run_json(
        "inventory",
        "--cluster",
        CLUSTER,
        "--toleration",
        "dedicated=web:NoSchedule",
        "--node-selector",
        "gpu-type=a100",
    )
    eligible = {row["node"] for row in rows if row["eligible"]}
    assert eligible == {"node-1", "node-3", "node-6"}
    node_2 = next(row for row in rows if row["node"] == "node-2")
    assert node_2["reason"] == "node selector gpu-type=a100 does not match (gpu-type=v100)"


def test_inventory_of_another_resource() -> None:
    rows = run_json("inventory", "--cluster", CLUSTER, "--resource", "amd.com/gpu")
    assert not any(row["eligible"] for row in rows)
    assert all(row["reason"].startswith("no amd.com/gpu allocatable") for row in rows)


def test_inventory_reads_several_files(tmp_path: Path) -> None:
    items = json.loads(Path(CLUSTER).read_text())["items"]
    (tmp_path / "nodes.json").write_text(
        json.dumps(
            {"kind": "NodeList", "apiVersion": "v1", "items": [i for i in items if i["kind"] == "Node"]}
        )
    )
    (tmp_path / "pods.json").write_text(
        json.dumps({"kind": "PodList", "apiVersion": "v1", "items": [i for i in items if i["kind"] == "Pod"]})
    )
    split = run_json(
        "inventory", "--cluster", str(tmp_path / "nodes.json"), "--cluster", str(tmp_path / "pods.json")
    )
    assert split == run_json("inventory", "--cluster", CLUSTER)


# ---- plan ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "allocation"),
    [
        (["--gpus", "6", "--free", "a=5,b=3,c=2"], [("a", 5, "worker"), ("c", 1, "chief")]),
        (["--gpus", "8", "--free", "a=7,b=4,c=4,d=4"], [("b", 4, "worker"), ("c", 4, "chief")]),
        (
            ["--gpus", "8", "--free", "a=7", "--free", "b=4,c=4,d=4", "--policy", "largest-first"],
            [("a", 7, "worker"), ("b", 1, "chief")],
        ),
        (["--gpus", "6", "--cluster", CLUSTER], [("node-1", 5, "worker"), ("node-3", 1, "chief")]),
        # tolerating node-6's taint makes one node enough
        (
            ["--gpus", "6", "--cluster", CLUSTER, "--toleration", "dedicated:NoSchedule"],
            [("node-6", 6, "chief")],
        ),
        (["--gpus", "3", "--cluster", CLUSTER, "--node-selector", "gpu-type=a100"], [("node-1", 3, "chief")]),
    ],
)
def test_plan_json(args: list[str], allocation: list[tuple[str, int, str]]) -> None:
    out = run_json("plan", *args)
    assert [(e["node"], e["gpus"], e["role"]) for e in out["allocation"]] == allocation
    assert out["requested"] == sum(gpus for _, gpus, _ in allocation)
    assert out["nodes_spanned"] == len(allocation)
    assert out["resource"] == "nvidia.com/gpu"
    assert set(out) == {
        "requested",
        "resource",
        "policy",
        "nodes_spanned",
        "topology_key",
        "domains",
        "allocation",
        "free_after",
    }


def test_plan_json_free_after_covers_eligible_nodes_only() -> None:
    out = run_json("plan", "--gpus", "6", "--cluster", CLUSTER)
    assert out["free_after"] == {"node-1": 0, "node-2": 3, "node-3": 1}
    assert out["policy"] == "optimal"


def test_plan_with_topology_key() -> None:
    out = run_json("plan", "--gpus", "7", "--cluster", CLUSTER, "--topology-key", "rack")
    # rack r1 holds node-1 (5) and node-3 (2): one rack, two nodes
    assert out["domains"] == ["r1"]
    assert out["topology_key"] == "rack"
    assert [(e["node"], e["gpus"]) for e in out["allocation"]] == [("node-1", 5), ("node-3", 2)]


def test_plan_table_for_people() -> None:
    result = run("plan", "--gpus", "6", "--free", "a=5,b=3,c=2")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "Plan for 6 nvidia.com/gpu (policy optimal): 2 node(s)",
        "ROLE    NODE  GPUS  FREE AFTER",
        "worker  a     5     0",
        "chief   c     1     1",
        "Free blocks left on eligible nodes, largest first: 3, 1, 0",
    ]


def test_cannot_place_lists_numbers_and_excluded_nodes() -> None:
    result = run("plan", "--gpus", "16", "--cluster", CLUSTER)
    assert result.exit_code == 3
    message = result.stderr
    assert "cannot place 16 GPU(s)" in message
    assert "only 10 out of 16" in message
    assert "node-1 with 5 free" in message
    assert "Excluded 4 of 7 node(s), with 24 GPU(s) free on them:" in message
    assert "  node-6 (8 free): untolerated taint dedicated=web:NoSchedule" in message
    assert "  node-4 (8 free): cordoned (spec.unschedulable)" in message


def test_cannot_place_with_no_eligible_node() -> None:
    result = run("plan", "--gpus", "1", "--cluster", CLUSTER, "--node-selector", "gpu-type=none-such")
    assert result.exit_code == 3
    assert "there is no eligible node" in result.stderr


def test_a_resource_no_node_advertises_is_bad_input_as_for_the_manager() -> None:
    result = run("plan", "--gpus", "1", "--cluster", CLUSTER, "--resource", "amd.com/gpu")
    assert result.exit_code == 2
    assert "no node advertises 'amd.com/gpu' (extended resources in this cluster: nvidia.com/gpu)" in \
        result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--gpus", "0", "--free", "a=1"], "0 is not in the range x>=1"),
        (["plan", "--gpus", "two", "--free", "a=1"], "'two' is not a valid integer"),
        (["plan", "--free", "a=1"], "Missing option '--gpus'"),
        (["plan", "--gpus", "1", "--free", "a"], "'a' is not NODE=COUNT"),
        (["plan", "--gpus", "1", "--free", "a=1.5"], "--free a: '1.5' is not a whole number"),
        (["plan", "--gpus", "1", "--free", "a=1,a=2"], "node a is given twice"),
        (["plan", "--gpus", "1", "--free", "a=1", "--cluster", CLUSTER], "cannot be combined with --cluster"),
        (
            ["plan", "--gpus", "1", "--free", "a=1", "--policy", "best"],
            "'best' is not one of 'optimal', 'largest-first'",
        ),
        (
            ["plan", "--gpus", "1", "--cluster", CLUSTER, "--topology-key", "no-such-label"],
            "no eligible node has the label 'no-such-label'",
        ),
        (["inventory", "--cluster", CLUSTER, "--toleration", "dedicated:Sometimes"], "effect 'Sometimes'"),
        (["inventory", "--cluster", CLUSTER, "--node-selector", "gpu-type"], "'gpu-type' is not KEY=VALUE"),
        (["inventory", "--cluster", "/nonexistent/cluster.json"], "/nonexistent/cluster.json: cannot read"),
    ],
)
def test_bad_usage_exits_2_and_says_what_is_wrong(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_plan_and_run_share_the_gpu_rule_and_the_field_parsers() -> None:
    """`plan --gpus` has run's cap; --toleration and --node-selector are run's parsers, checks included."""
    capped = run("plan", "--gpus", "100001", "--free", "a=1")
    assert capped.exit_code == 2 and "beyond the sane cap of 100000 GPUs" in capped.stderr
    key = run("inventory", "--cluster", CLUSTER, "--toleration", "bad!key:NoSchedule")
    assert key.exit_code == 2 and "name 'bad!key' must be 1-63 characters" in key.stderr
    label = run("inventory", "--cluster", CLUSTER, "--node-selector", "gpu-type=not a label")
    assert label.exit_code == 2 and "label value 'not a label'" in label.stderr


def test_malformed_cluster_file_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"kind": "List", "items": [{"kind": "Node"')
    result = run("plan", "--gpus", "1", "--cluster", str(broken))
    assert result.exit_code == 2
    assert f"error: {broken}: not valid JSON" in result.stderr


def test_live_cluster_unreachable_names_the_kubeconfig(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    result = run("inventory")
    assert result.exit_code == 72
    assert str(missing) in result.stderr
    assert "--kubeconfig FILE" in result.stderr


def test_help_teaches_with_examples() -> None:
    plan_help = run("plan", "--help").stdout
    assert "distributetrain plan --gpus 6 --free a=5,b=3,c=2" in plan_help
    assert "largest-first" in plan_help and "--topology-key LABEL" in plan_help
    inventory_help = run("inventory", "--help").stdout
    assert "kubectl get nodes,pods -A -o json > cluster.json" in inventory_help
    assert "KEY[=VALUE][:EFFECT]" in inventory_help


# ---- the installed console script ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "stream_text"),
    [
        (["plan", "--gpus", "6", "--cluster", CLUSTER, "--json"], 0, ('"role": "chief"', "")),
        (["plan", "--gpus", "16", "--cluster", CLUSTER], 3, ("", "error: cannot place 16 GPU(s)")),
        (["plan", "--gpus", "-1", "--free", "a=1"], 2, ("", "-1 is not in the range x>=1")),
        (["inventory", "--cluster", CLUSTER], 0, ("node-6", "")),
    ],
)
def test_console_script_exit_codes(args: list[str], code: int, stream_text: tuple[str, str]) -> None:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == code, done.stderr
    assert stream_text[0] in done.stdout
    assert stream_text[1] in done.stderr
    if code:
        assert "Traceback" not in done.stderr


# ---- the same fit rules as the manager -----------------------------------------------------------


def test_plan_counts_each_pods_cpu_as_the_manager_does() -> None:
    # 64 cpu per node, some held: at 30 cpu per GPU node-1 takes 2 of its 5 free GPUs, as `run` would find
    result = run_json("plan", "--gpus", "4", "--cluster", CLUSTER, "--cpu-per-gpu", "30")
    assert [(a["node"], a["gpus"], a["role"]) for a in result["allocation"]] == \
        [("node-1", 2, "worker"), ("node-2", 2, "chief")]
    table = run("inventory", "--cluster", CLUSTER, "--cpu-per-gpu", "30")
    assert table.exit_code == 0, table.output
    assert "2 of 5: " in table.stdout and "cpu" in table.stdout
    assert "(largest: node-1 with 2)" in table.stdout


def test_plan_reads_the_pod_template_as_the_manager_does(tmp_path: Path) -> None:
    template = tmp_path / "template.yaml"
    template.write_text("spec:\n  nodeSelector:\n    kubernetes.io/hostname: node-2\n")
    result = run_json("plan", "--gpus", "3", "--cluster", CLUSTER, "--pod-template", str(template))
    assert [(a["node"], a["gpus"]) for a in result["allocation"]] == [("node-2", 3)]


def test_free_counts_cannot_be_combined_with_what_describes_nodes(tmp_path: Path) -> None:
    template = tmp_path / "template.yaml"
    template.write_text("spec: {}\n")
    result = run("plan", "--gpus", "1", "--free", "a=1", "--pod-template", str(template))
    assert result.exit_code == 2
    assert "cannot be combined with --pod-template" in result.stderr


# ---- a fabric ---------------------------------------------------------------------------------------------
def efa_cluster(tmp_path: Path, held: int = 0) -> str:
    """Two p4d-like nodes (8 GPUs, 4 EFA) as `kubectl get nodes,pods -o json` writes them; `held` EFA of
    node-b taken by another pod."""

    def node(name: str) -> dict[str, Any]:
        allocatable = {"cpu": "96", "memory": "1152Gi", "pods": "110", "nvidia.com/gpu": "8",
                       "vpc.amazonaws.com/efa": "4"}
        return {"kind": "Node", "metadata": {"name": name}, "spec": {},
                "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}
    pods = [{"kind": "Pod", "metadata": {"name": "other", "namespace": "x"},
             "spec": {"nodeName": "node-b", "containers": [{"name": "c", "resources": {
                 "limits": {"vpc.amazonaws.com/efa": str(held)}}}]}, "status": {"phase": "Running"}}]
    path = tmp_path / "cluster.json"
    items = [node("node-a"), node("node-b"), *(pods if held else [])]
    path.write_text(json.dumps({"kind": "List", "items": items}))
    return str(path)


def test_plan_and_inventory_show_the_fabric(tmp_path: Path) -> None:
    cluster = efa_cluster(tmp_path)
    plan = run_json("plan", "--gpus", "14", "--cluster", cluster)
    assert [(a["node"], a["gpus"], a.get("fabric")) for a in plan["allocation"]] == [
        ("node-a", 8, {"vpc.amazonaws.com/efa": 4}), ("node-b", 6, {"vpc.amazonaws.com/efa": 3})]
    table = run("plan", "--gpus", "14", "--cluster", cluster).output
    assert "VPC.AMAZONAWS.COM/EFA" in table.splitlines()[1]
    one_pod = run_json("plan", "--gpus", "8", "--cluster", cluster)  # crosses no node: no device
    assert [a.get("fabric") for a in one_pod["allocation"]] == [None]
    tcp = run_json("plan", "--gpus", "14", "--cluster", cluster, "--fabric-resource", "none")
    assert all("fabric" not in a for a in tcp["allocation"])
    rows = run_json("inventory", "--cluster", efa_cluster(tmp_path, held=3))
    assert [(r["node"], r["fabric"]["free"], r["fabric"]["offered"]) for r in rows] == [
        ("node-a", 4, 8), ("node-b", 1, 3)]
    refused = run("plan", "--gpus", "16", "--cluster", efa_cluster(tmp_path, held=3))
    assert refused.exit_code == 3
    assert "node-b offers 3 of 8 free GPU(s)" in refused.output
