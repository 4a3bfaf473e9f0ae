"""What the manager's integration tests share: a manager pod to own the job, reading what a job left behind,
and a Reporter that records what the manager said."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from localcluster import Behavior, TestCluster

from distributetrain.kube.gateway import Kube
from distributetrain.manager.cleanup import find_job_objects
from distributetrain.manager.orchestrator import Orchestrator
from distributetrain.manager.pretraining import PreTraining
from distributetrain.observe.joblog import Reporter
from distributetrain.placement.planner import Plan
from distributetrain.request.jobspec import JobSpec, ManagerIdentity
from podsecurity import restricted

IMAGE = "distributetrain/base:0.1.0"


def is_chief(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"]["name"].endswith("-chief"))


def is_worker(pod: dict[str, Any]) -> bool:
    return "-worker-" in pod["metadata"]["name"]


def chief_behavior(log: str = "epoch 1 loss 0.9\nepoch 2 loss 0.5\n", exit_code: int | None = 0,
                   exit_after: float = 1.0) -> tuple[Callable[[dict[str, Any]], bool], Behavior]:
    return is_chief, Behavior(log=log, exit_code=exit_code, exit_after=exit_after)


class Recorder(Reporter):
    """The manager's log, kept for assertions; `on_plan(plan, attempt)` runs right after each plan and
    `on_say(message)` after each line the manager writes."""

    def __init__(self, on_plan: Callable[[Plan, int], None] | None = None,
                 on_say: Callable[[str], None] | None = None) -> None:
        self.out, self.chief_out = io.StringIO(), io.StringIO()
        super().__init__(self.out, self.chief_out)
        self.plans: list[Plan] = []
        self.on_plan = on_plan
        self.on_say = on_say

    def say(self, message: str) -> None:
        super().say(message)
        if self.on_say is not None:
            self.on_say(message)

    def planned(self, plan: object, attempt: int) -> None:
        assert isinstance(plan, Plan)
        self.plans.append(plan)
        if self.on_plan is not None:
            self.on_plan(plan, attempt)

    @property
    def text(self) -> str:
        return self.out.getvalue()


def manager_pod(kube: Kube, name: str = "distributetrain-manager") -> ManagerIdentity:
    """A real pod standing for the manager, so ownerReferences point at something the GC can see."""
    created = kube.create(restricted({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "default", "labels": {"app.kubernetes.io/name": "distributetrain"}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "manager", "image": "distributetrain/manager:0.1.0"}]}}))
    return ManagerIdentity(name=name, uid=created["metadata"]["uid"], namespace="default")


def spec(**fields: object) -> JobSpec:
    values: dict[str, object] = {"gpus": "6", "image": IMAGE, "job_name": "train", "schedule_timeout": "20s",
                                 "backoff": "0.2s", **fields}
    return JobSpec.from_sources(values, {})


def orchestrator(cluster: TestCluster, job: JobSpec, *, owner: ManagerIdentity | None = None,
                 recorder: Recorder | None = None, kube: Kube | None = None) -> tuple[Orchestrator, Recorder]:
    recorder = recorder or Recorder()
    phase = PreTraining(kube or Kube(cluster.api_client()), job, owner=owner, reporter=recorder)
    return Orchestrator(phase), recorder


def leftovers(cluster: TestCluster, job: str, namespace: str = "default") -> dict[str, list[str]]:
    """Every object still carrying the job's labels, by kind (read as admin)."""
    found = find_job_objects(Kube(cluster.api_client()), job=job, namespace=namespace)
    return {kind: sorted(i["metadata"]["name"] for i in items) for kind, items in found.items() if items}
