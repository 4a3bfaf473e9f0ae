"""GPU inventory: accounting, every eligibility rule, and the cluster files it reads."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from distributetrain.errors import InvalidInput, InvalidQuantity
from distributetrain.placement.clusterfiles import parse_cluster_document, read_cluster_files
from distributetrain.placement.inventory import NodeGpus, PodDemand, free_gpus, inventory, topology
from distributetrain.placement.tolerations import Toleration, default_tolerations

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


def node(
    name: str,
    gpus: str | None = "8",
    *,
    ready: str | None = "True",
    cordoned: bool = False,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    resource: str = GPU,
) -> dict[str, Any]:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus is not None:
        allocatable[resource] = gpus
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    spec: dict[str, Any] = {}
    if cordoned:
        spec["unschedulable"] = True
    if taints is not None:
        spec["taints"] = taints
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable, "conditions": conditions},
    }


def pod(
    name: str,
    on: str | None,
    gpus: str | None = "1",
    *,
    phase: str = "Running",
    requests: bool = False,
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, str] | None = None,
    resource: str = GPU,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if gpus is not None:
        resources = {"requests" if requests else "limits": {resource: gpus}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "train", "resources": resources}]}
    if on is not None:
        spec["nodeName"] = on
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
        "status": {"phase": phase},
    }


def one(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None, **kwargs: Any) -> NodeGpus:
    rows = inventory(nodes, pods or [], **kwargs)
    assert len(rows) == 1
    return rows[0]


# ---- accounting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "requested", "why"),
    [
        ([], 0, "no pods"),
        ([pod("a", "n1", "3")], 3, "a running pod holds its GPUs"),
        ([pod("a", "n1", "2", phase="Pending")], 2, "a bound Pending pod holds its GPUs"),
        ([pod("a", None, "2", phase="Pending")], 0, "an unbound pod holds none"),
        (
            [pod("a", "n1", "2", phase="Succeeded"), pod("b", "n1", "1", phase="Failed")],
            0,
            "finished pods hold none",
        ),
        ([pod("a", "n2", "5")], 0, "a pod on another node does not count here"),
        ([pod("a", "n1", "2", requests=True), pod("b", "n1", "1")], 3, "requests or limits, pods add up"),
        ([pod("a", "n1", None)], 0, "a pod without GPUs"),
        (
            [pod("a", "n1", "1", init=[{"name": "i", "resources": {"limits": {GPU: "4"}}}])],
            4,
            "the largest init container sets the peak",
        ),
        (
            [
                pod(
                    "a",
                    "n1",
                    "1",
                    init=[{"name": "s", "restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}}],
                )
            ],
            2,
            "a sidecar init container adds to the app containers",
        ),
        ([pod("a", "n1", "2", overhead={GPU: "1"})], 3, "spec.overhead adds"),
        ([pod("a", "n1", "1000m")], 1, "1000m is one whole GPU"),
    ],
)
def test_requested_and_free(pods: list[dict[str, Any]], requested: int, why: str) -> None:
    row = one([node("n1", "8")], pods)
    assert (row.allocatable, row.requested, row.free) == (8, requested, 8 - requested), why
    assert row.eligible and row.reason is None


def test_free_is_clamped_at_zero() -> None:
    # possible after a device plugin restart shrinks allocatable under running pods
    row = one([node("n1", "2")], [pod("a", "n1", "3")])
    assert (row.allocatable, row.requested, row.free) == (2, 3, 0)


def test_fractional_gpu_request_is_an_error_naming_pod_and_node() -> None:
    with pytest.raises(
        InvalidQuantity, match=re.escape("pod ml/half on node n1 requests 0.5 nvidia.com/gpu")
    ):
        inventory([node("n1")], [pod("half", "n1", "500m")])


def test_bad_quantity_in_a_pod_names_the_pod() -> None:
    with pytest.raises(InvalidQuantity, match=re.escape("pod ml/odd on node n1: container 'main'")):
        inventory([node("n1")], [pod("odd", "n1", "one")])


def test_fractional_allocatable_is_an_error_naming_the_node() -> None:
    with pytest.raises(InvalidQuantity, match=re.escape("node n1 status.allocatable.nvidia.com/gpu")):
        inventory([node("n1", "1.5")], [])


def test_pods_of_finished_or_unbound_state_do_not_raise_on_fractions_elsewhere() -> None:
    # an unbound pod is never parsed: it holds nothing anywhere
    assert one([node("n1")], [pod("half", None, "500m")]).requested == 0


@pytest.mark.parametrize(
    ("resource", "allocatable", "pods", "free"),
    [
        ("amd.com/gpu", "4", [pod("a", "n1", "1", resource="amd.com/gpu"), pod("b", "n1", "2")], 3),
        ("nvidia.com/mig-1g.10gb", "7", [pod("a", "n1", "2", resource="nvidia.com/mig-1g.10gb")], 5),
    ],
)
def test_resource_name_is_configurable(
    resource: str, allocatable: str, pods: list[dict[str, Any]], free: int
) -> None:
    row = one([node("n1", allocatable, resource=resource)], pods, resource=resource)
    assert row.free == free
    assert row.eligible


def test_rows_sorted_by_name_and_json_shape() -> None:
    rows = inventory([node("n2", "4"), node("n1", "8", cordoned=True)], [pod("a", "n2", "1")])
    assert [r.node for r in rows] == ["n1", "n2"]
    assert [r.to_json() for r in rows] == [
        {
            "node": "n1",
            "allocatable": 8,
            "requested": 0,
            "free": 8,
            "eligible": False,
            "reason": "cordoned (spec.unschedulable)",
        },
        {"node": "n2", "allocatable": 4, "requested": 1, "free": 3, "eligible": True, "reason": None},
    ]


# ---- eligibility ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "options", "reason"),
    [
        ({}, {}, None),
        ({"ready": "False"}, {}, "not Ready (Ready=False)"),
        ({"ready": "Unknown"}, {}, "not Ready (Ready=Unknown)"),
        ({"ready": None}, {}, "not Ready (no Ready condition)"),
        ({"cordoned": True}, {}, "cordoned (spec.unschedulable)"),
        ({"gpus": None}, {}, "no nvidia.com/gpu allocatable"),
        ({"gpus": "0"}, {}, "no nvidia.com/gpu allocatable"),
        # GPU nodes are usually tainted so; workers tolerate it by default, whatever the value and effect
        ({"taints": [GPU_TAINT]}, {}, None),
        ({"taints": [{"key": GPU, "effect": "NoExecute"}]}, {}, None),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {},
            "untolerated taint dedicated=ml:NoSchedule",
        ),
        ({"taints": [{"key": "spot", "effect": "NoExecute"}]}, {}, "untolerated taint spot:NoExecute"),
        ({"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]}, {}, None),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {"tolerations": [*default_tolerations(), Toleration("dedicated", "Equal", "ml")]},
            None,
        ),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {"tolerations": [Toleration("dedicated", "Equal", "web")]},
            "untolerated taint dedicated=ml:NoSchedule",
        ),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {"tolerations": [Toleration("dedicated", "Exists", effect="NoExecute")]},
            "untolerated taint dedicated=ml:NoSchedule",
        ),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {"tolerations": [Toleration("dedicated", "Exists", effect="NoSchedule")]},
            None,
        ),
        (
            {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]},
            {"tolerations": [Toleration("", "Exists")]},
            None,
        ),
        # passing tolerations replaces the defaults: exactly what the worker pods carry
        ({"taints": [GPU_TAINT]}, {"tolerations": []}, "untolerated taint nvidia.com/gpu=present:NoSchedule"),
        ({"labels": {"gpu-type": "a100"}}, {"node_selector": {"gpu-type": "a100"}}, None),
        (
            {"labels": {"gpu-type": "v100"}},
            {"node_selector": {"gpu-type": "a100"}},
            "node selector gpu-type=a100 does not match (gpu-type=v100)",
        ),
        (
            {},
            {"node_selector": {"gpu-type": "a100"}},
            "node selector gpu-type=a100 does not match (no label gpu-type)",
        ),
        (
            {"labels": {"gpu-type": "a100", "zone": "b"}},
            {"node_selector": {"gpu-type": "a100", "zone": "a"}},
            "node selector zone=a does not match (zone=b)",
        ),
        ({"ready": "False", "cordoned": True}, {}, "not Ready (Ready=False); cordoned (spec.unschedulable)"),
    ],
)
def test_eligibility(kwargs: dict[str, Any], options: dict[str, Any], reason: str | None) -> None:
    row = one([node("n1", **{"gpus": "8", **kwargs})], [], **options)
    assert row.reason == reason
    assert row.eligible is (reason is None)


def test_excluded_nodes_keep_their_accounting_but_leave_the_planner_input() -> None:
    rows = inventory(
        [node("n1", "8", cordoned=True), node("n2", "4"), node("n3", "2", ready="False")],
        [pod("a", "n1", "3"), pod("b", "n2", "1")],
    )
    assert rows[0].free == 5
    assert free_gpus(rows) == {"n2": 3}


def test_default_tolerations_follow_the_resource() -> None:
    assert default_tolerations() == (Toleration(GPU, "Exists"),)
    assert default_tolerations("amd.com/gpu") == (
        Toleration(GPU, "Exists"),
        Toleration("amd.com/gpu", "Exists"),
    )
    row = one(
        [node("n1", "4", resource="amd.com/gpu", taints=[{"key": "amd.com/gpu", "effect": "NoSchedule"}])],
        resource="amd.com/gpu",
    )
    assert row.eligible


def test_topology_of_eligible_labelled_nodes() -> None:
    rows = inventory(
        [node("n1", labels={"rack": "r1"}), node("n2"), node("n3", labels={"rack": "r2"}, cordoned=True)], []
    )
    assert topology(rows, "rack") == {"n1": "r1"}


# ---- cluster files -------------------------------------------------------------------------------


def test_kubectl_v1_list_skips_other_kinds() -> None:
    text = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": ""},
            "items": [
                node("n1"),
                pod("a", "n1"),
                {"kind": "Service", "apiVersion": "v1", "metadata": {"name": "svc"}},
            ],
        }
    )
    nodes, pods = parse_cluster_document(text, source="c.json")
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]
    assert [p["metadata"]["name"] for p in pods] == ["a"]


def test_node_and_pod_lists_without_item_kinds_in_yaml() -> None:
    text = (
        "kind: NodeList\napiVersion: v1\nitems:\n- metadata: {name: n1}\n"
        "  status: {allocatable: {nvidia.com/gpu: '4'}}\n"
        "---\nkind: PodList\napiVersion: v1\nitems:\n- metadata: {name: p, namespace: ml}\n"
        "  spec: {nodeName: n1, containers: []}\n---\nkind: Pod\nmetadata: {name: q}\n"
    )
    nodes, pods = parse_cluster_document(text, source="c.yaml")
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]
    assert [p["metadata"]["name"] for p in pods] == ["p", "q"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "List", "items": [', "c.json: not valid JSON"),
        ("kind: List\nitems: [\n", "c.json: not valid JSON or YAML"),
        ("[1, 2]", "c.json: the document is not a Kubernetes object or List"),
        ('{"kind": "Deployment"}', "c.json: the document has kind 'Deployment'"),
        ('{"kind": "List", "items": {}}', "c.json: the document is a List whose items is not a list"),
        ('{"kind": "List", "items": [3]}', r"c.json: items\[0\] is not an object but int"),
        (
            '{"kind": "NodeList", "items": [{"metadata": {}}]}',
            r"c.json: items\[0\] \(Node\) has no metadata.name",
        ),
        ('{"kind": "Node", "metadata": {"name": "n"}, "status": []}', r"\(Node n\): status is not an object"),
    ],
)
def test_malformed_cluster_documents_name_the_file_and_the_fault(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_cluster_document(text, source="c.json")


def test_read_cluster_files_merges_files(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps({"kind": "NodeList", "items": [node("n1", "4")]}))
    (tmp_path / "pods.yaml").write_text("kind: PodList\nitems:\n- " + json.dumps(pod("a", "n1", "3")) + "\n")
    nodes, pods = read_cluster_files(paths=[str(tmp_path / "nodes.json"), str(tmp_path / "pods.yaml")])
    assert free_gpus(inventory(nodes, pods)) == {"n1": 1}


def test_read_cluster_files_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(
        InvalidInput, match=re.escape(f"{missing}: cannot read the cluster file: No such file")
    ):
        read_cluster_files(paths=[str(missing)])
    pods_only = tmp_path / "pods.json"
    pods_only.write_text(json.dumps({"kind": "PodList", "items": []}))
    with pytest.raises(
        InvalidInput, match=r"no Node objects in .*pods\.json.*kubectl get nodes,pods -A -o json"
    ):
        read_cluster_files(paths=[str(pods_only)])
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidInput, match=re.escape("binary.json: not a text file")):
        read_cluster_files(paths=[str(binary)])


# ---- what a job pod asks besides GPUs: cpu, memory, a pod slot; shared and MIG GPUs ----------------------
def demand(cpu_per_gpu: int = 2, memory_gib_per_gpu: int = 8, *, role: str = "worker",
           fixed_gib: int = 1, affinity: tuple[dict[str, Any], ...] = ()) -> PodDemand:
    """A job pod of g GPUs requesting cpu_per_gpu*g cpu and memory_gib_per_gpu*g + fixed_gib GiB."""
    return PodDemand(role=role, tolerations=default_tolerations(GPU), node_affinity=affinity,
                     requests=lambda g: {"cpu": Fraction(cpu_per_gpu * g),
                                         "memory": Fraction((memory_gib_per_gpu * g + fixed_gib) * 2**30)})


def busy(name: str, on: str, cpu: str, memory: str) -> dict[str, Any]:
    """A pod holding cpu and memory but no GPU (a data loader, a daemon)."""
    p = pod(name, on, None)
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return p


def test_free_gpus_without_room_for_the_pods_memory_are_not_eligible() -> None:
    row = one([node("n1")], [busy("db", "n1", "8", "508Gi")], demands=[demand()])
    assert (row.free, row.eligible) == (8, False)
    assert row.reason == "worker needs 9Gi memory for 1 GPU, 4Gi free"
    cpu = one([node("n1")], [busy("db", "n1", "62500m", "1Gi")], demands=[demand()])
    assert cpu.reason == "worker needs 2 cpu for 1 GPU, 1.5 free"


def test_a_node_offers_as_many_gpus_as_the_pods_requests_fit() -> None:
    row = one([node("n1")], [busy("db", "n1", "54", "1Gi")], demands=[demand()])
    assert (row.free, row.offered, row.eligible) == (8, 5, True)
    assert row.note == "5 of 8: worker needs 12 cpu for 6 GPUs, 10 free"
    assert free_gpus([row]) == {"n1": 5}
    assert row.to_json()["usable"] == 5
    # the stricter of the roles decides: a chief asking more
    rows = inventory([node("n1")], [], demands=[demand(), demand(cpu_per_gpu=16, role="chief")])
    assert (rows[0].offered, rows[0].note) == (4, "4 of 8: chief needs 80 cpu for 5 GPUs, 64 free")


def test_the_pods_of_terminated_jobs_free_their_cpu_and_memory() -> None:
    done = busy("old", "n1", "64", "512Gi")
    done["status"]["phase"] = "Succeeded"
    assert one([node("n1")], [done], demands=[demand()]).offered == 8


def test_a_full_node_takes_no_more_pods() -> None:
    full = node("n1")
    full["status"]["allocatable"]["pods"] = "2"
    row = one([full], [busy("a", "n1", "1", "1Gi"), busy("b", "n1", "1", "1Gi")], demands=[demand()])
    assert not row.eligible and "no room for another pod (2 pods" in str(row.reason)


def test_node_affinity_of_the_template() -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    rows = inventory([node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"})], [],
                     demands=[demand(affinity=(term,))])
    assert [r.eligible for r in rows] == [True, False]
    assert rows[1].reason == "node affinity does not match (zone In [a])"


def test_time_sliced_gpus_give_a_job_pod_one() -> None:
    row = one([node("n1", labels={"nvidia.com/gpu.replicas": "4"})])
    assert (row.free, row.offered, row.eligible) == (8, 1, True)
    assert row.note is not None and "nvidia.com/gpu.replicas=4" in row.note
    shared = one([node("n1", resource="nvidia.com/gpu.shared")], resource="nvidia.com/gpu.shared")
    assert shared.offered == 1


def test_mig_devices_serve_one_gpu_jobs_only() -> None:
    mig = node("n1", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    assert one([mig], job_gpus=1).eligible
    row = one([mig], job_gpus=4)
    assert not row.eligible and "NCCL cannot use MIG" in str(row.reason)


def test_gke_gpu_sharing_labels_count_as_time_slicing_and_mig() -> None:
    """GKE's own node-pool labels: time-sharing or MPS (a strategy, or more than one client per GPU) give a
    job pod one GPU; MIG partitions serve 1-GPU jobs only, as GPU feature discovery's labels do."""
    for labels in ({"cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                    "cloud.google.com/gke-max-shared-clients-per-gpu": "3"},
                   {"cloud.google.com/gke-gpu-sharing-strategy": "mps"},
                   {"cloud.google.com/gke-max-shared-clients-per-gpu": "2"}):
        row = one([node("n1", labels=labels)])
        assert (row.free, row.offered, row.eligible) == (8, 1, True), labels
        assert row.note is not None and "shared GPUs (cloud.google.com/gke-" in row.note
    assert one([node("n1", labels={"cloud.google.com/gke-max-shared-clients-per-gpu": "1"})]).offered == 8
    partitioned = node("n1", labels={"cloud.google.com/gke-gpu-partition-size": "1g.5gb"})
    assert one([partitioned], job_gpus=1).eligible
    row = one([partitioned], job_gpus=2)
    assert not row.eligible
    assert "MIG partitions (cloud.google.com/gke-gpu-partition-size=1g.5gb)" in str(row.reason)
