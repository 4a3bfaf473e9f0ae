"""The local scheduler's filters, its real-style Unschedulable messages, and the kubelet's admission check."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.controllers.scheduler import (
    AdmitResult,
    ScheduleResult,
    admit,
    feasible_nodes_to_find,
    schedule,
    scheduled_event_message,
    unschedulable_condition,
    usage_by_node,
    with_pod,
)

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def node(
    name: str,
    gpus: int,
    *,
    taints: list[dict[str, Any]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
    pods: str = "110",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": [GPU_TAINT] if taints is None and gpus else (taints or [])}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": pods, "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    gpus: int = 0,
    *,
    node_name: str | None = None,
    phase: str = "Pending",
    cpu: str | None = None,
    tolerate: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if cpu:
        limits["cpu"] = cpu
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "img", "resources": {"limits": limits}}],
        **spec,
    }
    if tolerate:
        body["tolerations"] = TOLERATE_GPU
    if node_name:
        body["nodeName"] = node_name
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": body,
        "status": {"phase": phase},
    }


NODES = [node("node-1", 5), node("node-2", 3), node("node-3", 2)]
PREEMPT_3 = " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."


def hostname_affinity(*names: str, operator: str = "In") -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": operator, "values": list(names)}
                        ]
                    }
                ]
            }
        }
    }


CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], ScheduleResult]] = [
    ("least allocated: most free GPU share wins", pod("p", 2), NODES, [], ScheduleResult("node-1", "", {})),
    (
        "taken GPUs count; terminated pods do not",
        pod("p", 2),
        NODES,
        [
            pod("a", 4, node_name="node-1", phase="Running"),
            pod("done", 3, node_name="node-2", phase="Succeeded"),
        ],
        ScheduleResult("node-2", "", {"node-1": ("Insufficient nvidia.com/gpu",)}),
    ),
    (
        "nothing fits: grouped, sorted counts and the preemption clause",
        pod("p", 6),
        NODES,
        [],
        ScheduleResult(
            None,
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." + PREEMPT_3,
            {
                "node-1": ("Insufficient nvidia.com/gpu",),
                "node-2": ("Insufficient nvidia.com/gpu",),
                "node-3": ("Insufficient nvidia.com/gpu",),
            },
        ),
    ),
    (
        "untolerated taint is unresolvable by preemption",
        pod("p", 4, tolerate=False),
        [node("node-1", 5), node("cpu-1", 0), node("node-3", 2)],
        [],
        ScheduleResult(
            None,
            "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
            "{nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 1 No preemption victims "
            "found for incoming pod, 2 Preemption is not helpful for scheduling.",
            {
                "node-1": ("node(s) had untolerated taint {nvidia.com/gpu: present}",),
                "cpu-1": ("Insufficient nvidia.com/gpu",),
                "node-3": ("node(s) had untolerated taint {nvidia.com/gpu: present}",),
            },
        ),
    ),
    (
        "unschedulable and NotReady nodes",
        pod("p", 1),
        [node("node-1", 5, unschedulable=True), node("node-2", 3, ready=False), node("node-3", 2)],
        [pod("a", 2, node_name="node-3", phase="Running")],
        ScheduleResult(
            None,
            "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
            "{node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable. preemption: 0/3 nodes "
            "are available: 1 No preemption victims found for incoming pod, 2 Preemption is not "
            "helpful for scheduling.",
            {
                "node-1": ("node(s) were unschedulable",),
                "node-2": ("node(s) had untolerated taint {node.kubernetes.io/not-ready: }",),
                "node-3": ("Insufficient nvidia.com/gpu",),
            },
        ),
    ),
    (
        "nodeSelector",
        pod("p", 1, nodeSelector={"zone": "b"}),
        [node("node-1", 5, labels={"zone": "a"}), node("node-2", 3, labels={"zone": "b"})],
        [],
        ScheduleResult("node-2", "", {"node-1": ("node(s) didn't match Pod's node affinity/selector",)}),
    ),
    (
        "required affinity In kubernetes.io/hostname",
        pod("p", 1, affinity=hostname_affinity("node-3")),
        NODES,
        [],
        ScheduleResult(
            "node-3",
            "",
            {
                "node-1": ("node(s) didn't match Pod's node affinity/selector",),
                "node-2": ("node(s) didn't match Pod's node affinity/selector",),
            },
        ),
    ),
    (
        "required affinity NotIn",
        pod("p", 1, affinity=hostname_affinity("node-1", "node-2", operator="NotIn")),
        NODES,
        [],
        ScheduleResult(
            "node-3",
            "",
            {
                "node-1": ("node(s) didn't match Pod's node affinity/selector",),
                "node-2": ("node(s) didn't match Pod's node affinity/selector",),
            },
        ),
    ),
    (
        "matchFields metadata.name, Exists/DoesNotExist/Gt",
        pod(
            "p",
            1,
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                                ]
                            },
                            {
                                "matchExpressions": [
                                    {"key": "fast", "operator": "Exists"},
                                    {"key": "old", "operator": "DoesNotExist"},
                                    {"key": "gen", "operator": "Gt", "values": ["3"]},
                                ]
                            },
                        ]
                    }
                }
            },
        ),
        [
            node("node-1", 1),
            node("node-2", 8, labels={"fast": "", "gen": "4"}),
            node("node-3", 8, labels={"fast": "", "gen": "4", "old": "y"}),
            node("node-4", 8, labels={"gen": "9"}),
        ],
        [],
        ScheduleResult(
            "node-2",
            "",
            {
                "node-3": ("node(s) didn't match Pod's node affinity/selector",),
                "node-4": ("node(s) didn't match Pod's node affinity/selector",),
            },
        ),
    ),
    (
        "several resources short on one node; PreferNoSchedule ignored by the filter",
        pod("p", 1, cpu="100"),
        [node("node-1", 0, taints=[{"key": "k", "effect": "PreferNoSchedule"}])],
        [],
        ScheduleResult(
            None,
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu. "
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
            {"node-1": ("Insufficient cpu", "Insufficient nvidia.com/gpu")},
        ),
    ),
    (
        "too many pods",
        pod("p"),
        [node("node-1", 0, pods="1")],
        [pod("a", node_name="node-1", phase="Running")],
        ScheduleResult(
            None,
            "0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: "
            "1 No preemption victims found for incoming pod.",
            {"node-1": ("Too many pods",)},
        ),
    ),
    (
        "PreferNoSchedule steers to the untainted node",
        pod("p"),
        [node("node-1", 0, taints=[{"key": "k", "effect": "PreferNoSchedule"}]), node("node-2", 0)],
        [],
        ScheduleResult("node-2", "", {}),
    ),
    (
        "a NoExecute taint needs its own toleration",
        pod("p", tolerate=False),
        [node("node-1", 0, taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])],
        [],
        ScheduleResult(
            None,
            "0/1 nodes are available: 1 node(s) had untolerated taint {k: v}. preemption: 0/1 nodes "
            "are available: 1 Preemption is not helpful for scheduling.",
            {"node-1": ("node(s) had untolerated taint {k: v}",)},
        ),
    ),
    (
        "preemptionPolicy Never",
        pod("p", 9, preemptionPolicy="Never"),
        [node("node-1", 5)],
        [],
        ScheduleResult(
            None,
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due "
            "to preemptionPolicy=Never.",
            {"node-1": ("Insufficient nvidia.com/gpu",)},
        ),
    ),
    (
        "ties go to the first node in natural order",
        pod("p"),
        [node("node-10", 0), node("node-2", 0)],
        [],
        ScheduleResult("node-2", "", {}),
    ),
    ("no nodes at all", pod("p"), [], [], ScheduleResult(None, "no nodes available to schedule pods", {})),
]


@pytest.mark.parametrize(
    ("the_pod", "nodes", "pods", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_schedule(
    the_pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]], expected: ScheduleResult
) -> None:
    assert schedule(the_pod, nodes, pods) == expected


def test_message_counts_sort_as_text_like_the_real_scheduler() -> None:
    nodes = [node(f"node-{i}", 1) for i in range(1, 11)] + [node("cpu-1", 0), node("cpu-2", 0)]
    result = schedule(pod("p", 2, tolerate=False), nodes, [])
    assert result.message == (
        "0/12 nodes are available: 10 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/12 nodes are available: "
        "10 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    )


def test_pod_itself_in_the_pod_list_is_not_counted_twice() -> None:
    me = pod("p", 5)
    assert schedule(me, [node("node-1", 5)], [me]).node_name == "node-1"


ADMISSIONS = [
    (
        "fits",
        pod("p", 2, node_name="node-1"),
        node("node-1", 5),
        [pod("a", 3, node_name="node-1", phase="Running")],
        AdmitResult(True),
    ),
    (
        "out of GPUs",
        pod("p", 4, node_name="node-1"),
        node("node-1", 5),
        [pod("a", 3, node_name="node-1", phase="Running"), pod("b", 9, node_name="node-2", phase="Running")],
        AdmitResult(
            False,
            "OutOfnvidia.com/gpu",
            "Node didn't have enough resource: nvidia.com/gpu, requested: 4, used: 3, capacity: 5",
        ),
    ),
    (
        "cpu in millicores",
        pod("p", node_name="node-1", cpu="65"),
        node("node-1", 0),
        [],
        AdmitResult(
            False,
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 65000, used: 0, capacity: 64000",
        ),
    ),
    (
        "pods count",
        pod("p", node_name="node-1"),
        node("node-1", 0, pods="1"),
        [pod("a", node_name="node-1", phase="Running")],
        AdmitResult(
            False, "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"
        ),
    ),
    (
        "NoSchedule taints do not stop the kubelet",
        pod("p", 1, node_name="node-1", tolerate=False),
        node("node-1", 5),
        [],
        AdmitResult(True),
    ),
    (
        "node affinity is rechecked",
        pod("p", node_name="node-1", nodeSelector={"zone": "b"}),
        node("node-1", 0),
        [],
        AdmitResult(
            False,
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
        ),
    ),
]


@pytest.mark.parametrize(
    ("the_pod", "the_node", "pods", "expected"), [c[1:] for c in ADMISSIONS], ids=[c[0] for c in ADMISSIONS]
)
def test_admit(
    the_pod: dict[str, Any], the_node: dict[str, Any], pods: list[dict[str, Any]], expected: AdmitResult
) -> None:
    assert admit(the_pod, the_node, pods) == expected


def test_rejected_pod_status_words() -> None:
    result = admit(pod("p", 6, node_name="node-1"), node("node-1", 5), [])
    assert (result.reason, result.pod_message) == (
        "OutOfnvidia.com/gpu",
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 6, "
        "used: 0, capacity: 5",
    )


def test_condition_and_event_shapes() -> None:
    assert unschedulable_condition("0/1 nodes are available: x.", now="2026-01-01T00:00:00Z") == {
        "type": "PodScheduled",
        "status": "False",
        "lastProbeTime": None,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: x.",
    }
    assert scheduled_event_message(pod("w-0"), "node-2") == "Successfully assigned default/w-0 to node-2"


def test_precomputed_usage_gives_the_same_answers() -> None:
    nodes = [node("node-1", 4), node("node-2", 4)]
    usage = usage_by_node([])
    placed: list[dict[str, Any]] = []
    for i in range(5):
        p = pod(f"p{i}", 2)
        result = schedule(p, nodes, usage=usage)
        assert result == schedule(p, nodes, placed)
        if result.node_name:
            bound = {**p, "spec": {**p["spec"], "nodeName": result.node_name}}
            placed.append(bound)
            usage = with_pod(usage, bound)
    assert [q["spec"]["nodeName"] for q in placed] == ["node-1", "node-2", "node-1", "node-2"]
    assert admit(pod("x", 1, node_name="node-1"), nodes[0], usage=usage).reason == "OutOfnvidia.com/gpu"


@pytest.mark.parametrize(
    ("total", "expected"), [(5, 5), (99, 99), (100, 100), (200, 100), (1000, 420), (5000, 500), (10000, 500)]
)
def test_feasible_nodes_to_find(total: int, expected: int) -> None:
    assert feasible_nodes_to_find(total) == expected


def with_host_port(p: dict[str, Any], port: int, ip: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": port, "hostPort": port}
    if ip:
        entry["hostIP"] = ip
    p["spec"]["containers"][0]["ports"] = [entry]
    return p


def test_host_ports() -> None:
    nodes = [node("node-1", 0), node("node-2", 0)]
    taken = with_host_port(pod("a", node_name="node-1", phase="Running"), 2222)
    assert schedule(with_host_port(pod("p"), 2222), nodes, [taken]) == ScheduleResult(
        "node-2", "", {"node-1": ("node(s) didn't have free ports for the requested pod ports",)}
    )
    assert (
        schedule(
            with_host_port(pod("p"), 2222, "127.0.0.2"),
            nodes,
            [with_host_port(pod("b", node_name="node-2", phase="Running"), 2222, "127.0.0.3"), taken],
        ).node_name
        == "node-2"
    )
    me = with_host_port(pod("me", node_name="node-1"), 2222)
    assert admit(me, nodes[0], [me]) == AdmitResult(True)
    assert admit(me, nodes[0], [me, taken]) == AdmitResult(
        False,
        "NodePorts",
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
    )


def test_unknown_ready_status_means_unreachable() -> None:
    lost = node("node-1", 0)
    lost["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    fresh = node("node-2", 0)
    fresh["status"]["conditions"] = []
    assert schedule(pod("p"), [lost, fresh], []).reasons == {
        "node-1": ("node(s) had untolerated taint {node.kubernetes.io/unreachable: }",),
        "node-2": ("node(s) had untolerated taint {node.kubernetes.io/not-ready: }",),
    }
