"""Nodes that advertise fabric devices beside their GPUs (ClusterSpec.fabric, `localcluster up --fabric`), as
the EFA device plugin advertises vpc.amazonaws.com/efa: in the Node's capacity and allocatable, and scheduled
and accounted as the GPUs are (the scheduler's NodeResourcesFit and the kubelet's admission)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster import ClusterSpec, InvalidInput, NodePool
from localcluster._internal.cluster.spec import node_object, parse_fabric
from localcluster._internal.controllers.scheduler import admit, schedule

EFA = "vpc.amazonaws.com/efa"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def nodes(spec: ClusterSpec) -> list[dict[str, Any]]:
    gpu = [node_object(i, gpus, spec) for i, gpus in enumerate(spec.nodes, start=1)]
    return [*gpu, node_object(len(gpu) + 1, None, spec, name="cpu-1")]


def pod(name: str, gpus: int, efa: int, *, on: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), EFA: str(efa)}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "resources": {"limits": limits}}],
                            "tolerations": TOLERATE_GPU}
    if on:
        spec["nodeName"] = on
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": spec, "status": {"phase": phase}}


def test_every_gpu_node_advertises_the_devices_and_cpu_nodes_none() -> None:
    made = nodes(ClusterSpec(nodes=(8, 8), fabric="efa:4"))
    assert [(n["metadata"]["name"], n["status"]["allocatable"].get(EFA)) for n in made] == [
        ("node-1", "4"), ("node-2", "4"), ("cpu-1", None)]
    assert made[0]["status"]["capacity"][EFA] == "4"


def test_one_count_per_node_and_any_resource() -> None:
    made = nodes(ClusterSpec(nodes=(8, 8, 4), fabric="efa:4,2,1"))
    assert [n["status"]["allocatable"].get(EFA) for n in made] == ["4", "2", "1", None]
    assert parse_fabric("rdma/hca_shared_devices_a:1000", 2) == ("rdma/hca_shared_devices_a", (1000, 1000))


def test_the_nodes_a_pool_adds_advertise_one_count_for_all_and_none_of_a_per_node_list() -> None:
    pool = NodePool("gpu", gpus=8, max_size=2)
    one = ClusterSpec(nodes=(), cpu_nodes=1, node_pools=(pool,), fabric="efa:4")
    added = node_object(2, 8, one, name="gpu-abc12")
    assert (added["status"]["allocatable"][EFA], added["status"]["capacity"][EFA]) == ("4", "4")
    listed = ClusterSpec(nodes=(8,), node_pools=(pool,), fabric="efa:4")
    assert node_object(2, 8, listed, name="gpu-def34")["status"]["allocatable"][EFA] == "4"
    per_node = ClusterSpec(nodes=(8, 8), node_pools=(pool,), fabric="efa:4,2")
    assert EFA not in node_object(3, 8, per_node, name="gpu-ghi56")["status"]["allocatable"]


@pytest.mark.parametrize("text", ["efa", "efa:x", "efa:-1", "ib:4", "efa:4,4"])
def test_a_fabric_that_does_not_say_what_and_how_many_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="--fabric"):
        parse_fabric(text, 3)


def test_the_devices_are_scheduled_and_accounted_like_gpus() -> None:
    made = nodes(ClusterSpec(nodes=(8, 8), fabric="efa:4,2"))
    # 3 EFA fit node-1 only; node-2 has 2, the CPU node none
    fits = schedule(pod("p", 4, 3), made)
    assert fits.node_name == "node-1"
    assert fits.reasons["node-2"] == ("Insufficient vpc.amazonaws.com/efa",)
    # once another pod holds 2 of node-1's EFA, 3 more fit nowhere, with the real scheduler's words
    held = [pod("held", 2, 2, on="node-1", phase="Running")]
    nowhere = schedule(pod("p", 4, 3), made, held)
    assert nowhere.node_name is None
    assert nowhere.message.startswith("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
                                      "3 Insufficient vpc.amazonaws.com/efa.")
    # and the kubelet refuses a pod bound past them, as it does for GPUs
    refused = admit(pod("p", 4, 3, on="node-1"), made[0], held)
    assert not refused.admitted and refused.reason == f"OutOf{EFA}"


def test_the_command_line_passes_the_fabric_on_and_refuses_a_bad_one(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from localcluster import serve_command
    from localcluster._internal.cluster.cli import main

    command = serve_command(tmp_path, nodes=[8, 8], fabric="efa:4")
    assert command[command.index("--fabric") + 1] == "efa:4"
    assert "--fabric" not in serve_command(tmp_path, nodes=[8, 8])
    up = ["up", "--nodes", "8,8", "--fabric", "efa:4,4,4", "--dir", str(tmp_path)]
    refused = CliRunner().invoke(main, up)
    assert refused.exit_code != 0
    assert "--fabric 'efa:4,4,4': 3 counts for 2 GPU node(s)" in refused.output
    assert not (tmp_path / "pid").exists()  # refused before anything started
