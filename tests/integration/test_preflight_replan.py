"""The manager's side of the pre-flight check (simulated kubelets): a chief whose check blames a node is
deleted with its gang, the node excluded and the job placed again without it, with an Event naming the node;
with no plan left without it, exit 76 naming it, and nothing left. The check itself, on a real slow link, is
tests/reliability/test_preflight_links.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from localcluster import Behavior, TestCluster
from manager_support import Recorder, is_chief, leftovers, orchestrator, spec
from visibility_support import MANAGER, observed_job

from distributetrain.errors import PreflightFailed
from distributetrain.observe import chieflog
from distributetrain.placement.planner import Plan

Factory = Callable[..., TestCluster]
Rule = tuple[Callable[[dict[str, Any]], bool], Behavior]
pytestmark = pytest.mark.timeout(120)
STAMP = "launcher 2026-11-26 12:00:00,000"


def failed_check(node: str) -> str:
    """What the chief's launcher says when its check blames `node` (chief/preflight.py), then exits 76."""
    blamed = chieflog.preflight_blamed(chieflog.PreflightBlame((node,), ("10.244.9.9",)))
    return (f"{STAMP} ERROR {blamed}\n{STAMP} ERROR a pod's link to the chief measured below --min-busbw 1 "
            f"GB/s (the sweep was skipped); to blame: 10.244.9.9 (node {node}); the training was not "
            "started\n")


PASSED = f"{STAMP} INFO {chieflog.PREFLIGHT_PASSED}\nepoch 1 loss 0.9\n"


class SlowNode:
    """The first chief's check blames the node of the first plan's first worker; later checks pass."""

    def __init__(self, nodes: int) -> None:
        self.node: str | None = None
        self.failed = False
        self.nodes = [f"node-{i}" for i in range(1, nodes + 1)]

    def planned(self, plan: Plan, attempt: int) -> None:
        if self.node is None:
            self.node = plan.workers[0].node

    def rules(self) -> list[Rule]:
        def blames(node: str) -> Callable[[dict[str, Any]], bool]:
            def first_chief(pod: dict[str, Any]) -> bool:
                if is_chief(pod) and not self.failed and self.node == node:
                    self.failed = True
                    return True
                return False
            return first_chief
        failing = [(blames(n), Behavior(log=failed_check(n), exit_code=76, exit_after=0.5))
                   for n in self.nodes]
        return [*failing, (is_chief, Behavior(log=PASSED, exit_code=0, exit_after=1.0))]


def test_a_blamed_node_is_excluded_and_the_job_placed_again_without_it(local_cluster_factory: Factory,
                                                                       tmp_path: Path) -> None:
    slow = SlowNode(3)
    cluster = local_cluster_factory(nodes=[2, 2, 2], behaviors=slow.rules())
    orch, observer = observed_job(cluster, tmp_path, "train", gpus="4", min_busbw="1")
    plans: list[Plan] = []
    planned = observer.planned

    def record(plan: object, attempt: int) -> None:
        assert isinstance(plan, Plan)
        plans.append(plan)
        slow.planned(plan, attempt)
        planned(plan, attempt)

    observer.planned = record  # type: ignore[method-assign]  # the plans, as the manager made them
    assert orch.run() == 0
    observer.close()
    assert slow.node is not None and len(plans) == 2
    assert slow.node in [e.node for e in plans[0].allocation]
    assert slow.node not in [e.node for e in plans[1].allocation]
    events = json.loads(cluster.kubectl("get", "events", "-o", "json").stdout)["items"]
    excluded = [e["message"] for e in events if e["reason"] == "PreflightExcludedNode"
                and e["involvedObject"]["name"] == MANAGER]
    assert len(excluded) == 1 and excluded[0].startswith(
        f"the pre-flight check blamed node(s) {slow.node}: a pod's link to the chief measured below "
        "--min-busbw 1 GB/s"), excluded
    assert f"re-planning without node(s) {slow.node} (check 2 of at most 2 next)" in excluded[0]
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}  # kept for its log, as always


def test_no_plan_left_without_the_blamed_node_exits_76_naming_it(local_cluster_factory: Factory) -> None:
    slow = SlowNode(2)
    cluster = local_cluster_factory(nodes=[2, 2], behaviors=slow.rules())
    orch, recorder = orchestrator(cluster, spec(gpus="4", min_busbw="1"),
                                  recorder=Recorder(on_plan=slow.planned))
    with pytest.raises(PreflightFailed) as caught:
        orch.run()
    assert caught.value.exit_code == 76
    assert str(caught.value).startswith(
        f"job train: no plan is left without the node(s) the pre-flight check excluded ({slow.node}): ")
    assert "Fix the network of those nodes, lower --min-busbw, or ask for fewer GPUs" in str(caught.value)
    assert "pre-flight blames node(s)" in recorder.chief_out.getvalue()  # the failed chief's log, kept
    assert leftovers(cluster, "train") == {}
