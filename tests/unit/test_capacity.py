"""A gang the manager does not place (placement/pool.py, manager/manifests.py's Gang, the chief's wait for its
hostfile): its shape, the marks Kueue and a ProvisioningRequest read, and what the chief waits for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from distributetrain import naming
from distributetrain.chief import launcher
from distributetrain.chief import settings as launchsettings
from distributetrain.errors import EXIT_SCHEDULE_TIMEOUT, InvalidInput, ScheduleTimeout
from distributetrain.manager import manifests
from distributetrain.manager.startup import StartWatch
from distributetrain.placement import pool
from distributetrain.placement.inventory import NodeGpus
from distributetrain.placement.planner import Entry
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

IMAGE = "distributetrain/base:0.1.0"
OWNER = ManagerIdentity(name="distributetrain-manager", uid="0b7c-uid", namespace="default")


def make_spec(**overrides: object) -> JobSpec:
    return JobSpec.from_sources({"gpus": "5", "image": IMAGE, "job_name": "train", **overrides}, {})


# ---- the shape ---------------------------------------------------------------------------------------------
def test_a_gang_is_pods_of_one_node_each_and_a_chief_of_the_rest() -> None:
    plan = pool.gang_shape(7, 2)
    assert [e.gpus for e in plan.workers] == [2, 2, 2] and plan.chief == Entry("", 1)
    assert [e.gpus for e in pool.gang_shape(8, 8).allocation] == [8]  # one pod: the chief alone
    assert all(e.node == "" for e in plan.allocation)


def row(node: str, allocatable: int, *, eligible: bool = True) -> NodeGpus:
    return NodeGpus(node, allocatable, allocatable, 0, eligible, None if eligible else "NotReady")


def test_a_pool_node_size_comes_from_the_request_then_the_nodes_then_karpenter() -> None:
    rows = [row("a", 4), row("b", 8, eligible=False), row("c", 2)]
    assert pool.node_gpus(rows, given=2) == 2
    assert pool.node_gpus(rows, given=None) == 4  # busy or not, but eligible
    nodepool = {"spec": {"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["4", "8"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}}
    assert pool.node_gpus([], given=None, karpenter=pool.karpenter_gpus([nodepool])) == 8
    with pytest.raises(InvalidInput, match="pass --gpus-per-node"):
        pool.node_gpus([row("b", 8, eligible=False)], given=None)


# ---- the pods ----------------------------------------------------------------------------------------------
def test_a_queued_gang_is_one_kueue_pod_group_not_pinned_nor_controlled_by_the_manager() -> None:
    spec = make_spec(topology_key="topology.kubernetes.io/zone")
    gang = manifests.Gang(pods=3, hostfile_wait=1380.0, queue="team", group="train-1a2b3c4d-0",
                          topology_key=spec.topology_key)
    worker = manifests.worker_pod(spec, index=0, entry=Entry("", 2), owner=OWNER, gang=gang)
    chief = manifests.chief_pod(spec, entry=Entry("", 1), owner=OWNER, gang=gang)
    for pod in (worker, chief):
        meta = pod["metadata"]
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team"
        assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == "train-1a2b3c4d-0"
        assert meta["labels"]["distributetrain.io/job"] == "train"
        assert {k: v for k, v in meta["annotations"].items() if k.startswith("kueue")} == {
            "kueue.x-k8s.io/pod-group-total-count": "3", "kueue.x-k8s.io/retriable-in-group": "false",
            "kueue.x-k8s.io/podset-preferred-topology": "topology.kubernetes.io/zone"}
        # Kueue leaves pods whose controller is a pod to that pod: the manager is an owner, not the controller
        assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod",
                                            "name": "distributetrain-manager", "uid": "0b7c-uid"}]
        assert "affinity" not in pod["spec"]
        kubernetes_validate.validate(pod, "1.30.0", strict=True)
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
    assert env[naming.ENV_HOSTFILE_WAIT] == "1380"
    assert naming.ENV_HOSTFILE_WAIT not in {e["name"] for e in worker["spec"]["containers"][0]["env"]}


def test_a_placed_job_keeps_its_pin_and_controller() -> None:
    worker = manifests.worker_pod(make_spec(), index=0, entry=Entry("node-1", 4), owner=OWNER)
    assert worker["spec"]["affinity"]["nodeAffinity"]
    assert worker["metadata"]["ownerReferences"][0]["controller"] is True
    assert not any(k.startswith("kueue") for k in worker["metadata"]["labels"])


def test_a_provisioned_gang_consumes_its_request_made_of_its_pod_templates() -> None:
    spec = make_spec()
    gang = manifests.Gang(pods=3, hostfile_wait=60.0,
                          provisioning=("train-0", naming.BEST_EFFORT_ATOMIC))
    worker = manifests.worker_pod(spec, index=0, entry=Entry("", 2), owner=OWNER, gang=gang)
    assert {k: v for k, v in worker["metadata"]["annotations"].items() if k.startswith("autoscaling")} == {
        "autoscaling.x-k8s.io/consume-provisioning-request": "train-0",
        "autoscaling.x-k8s.io/provisioning-class-name": "best-effort-atomic-scale-up.autoscaling.x-k8s.io"}
    assert "kueue.x-k8s.io/queue-name" not in worker["metadata"]["labels"]
    template = manifests.pod_template(spec, worker, gpus=2, owner=OWNER)
    assert template["metadata"]["name"] == "train-worker-2gpu"
    assert template["template"]["spec"] == worker["spec"]
    kubernetes_validate.validate(template, "1.30.0", strict=True)
    request = manifests.provisioning_request(spec, name="train-0", cls=naming.BEST_EFFORT_ATOMIC,
                                             templates=[("train-worker-2gpu", 2), ("train-chief-1gpu", 1)],
                                             owner=OWNER)
    assert request["spec"] == {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                               "podSets": [{"podTemplateRef": {"name": "train-worker-2gpu"}, "count": 2},
                                           {"podTemplateRef": {"name": "train-chief-1gpu"}, "count": 1}]}
    assert request["metadata"]["labels"]["distributetrain.io/role"] == "capacity"


def test_the_hostfile_of_a_gang_made_at_once_starts_empty_and_may_change() -> None:
    made = manifests.hostfile_configmap(make_spec(), [], owner=OWNER, mutable=True)
    assert made["immutable"] is False and made["data"] == {"hostfile": ""}


def test_a_kueue_queue_and_lost_worker_recovery_do_not_go_together() -> None:
    with pytest.raises(InvalidInput, match=r"queue \(team\): a Kueue pod group is admitted whole"):
        make_spec(queue="team", restarts="2")
    assert make_spec(queue="none", restarts="2").recovery == "restart"


# ---- the waits ---------------------------------------------------------------------------------------------
def test_progress_says_what_unbound_pods_wait_for() -> None:
    watch = StartWatch(["a", "b"], lambda p: False, created=0.0, schedule_timeout=600, start_timeout=600,
                       unbound_hint=lambda pods: "waiting for node-pool scale-up")
    pods: dict[str, Any] = {"a": {"metadata": {"name": "a"}, "spec": {"nodeName": "gpu-1"}},
                            "b": {"metadata": {"name": "b"}, "spec": {}}}
    assert watch.observe(pods, 1.0) is None
    line = watch.progress(pods, 31.0)
    assert line is not None
    assert line.startswith("1 of 2 pod(s) bound to their nodes, waiting for node-pool scale-up")


def settings(hostfile: Path, wait: float) -> launchsettings.Settings:
    return launchsettings.parse_settings([], {
        naming.ENV_HOSTFILE: str(hostfile), naming.ENV_POD_IP: "10.0.0.9", naming.ENV_SLOTS: "1",
        naming.ENV_NUM_PROCESSES: "5", naming.ENV_HOSTFILE_WAIT: f"{wait:g}"})


def test_the_chief_waits_until_the_hostfile_lists_every_process(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 3:  # the kubelet updates the volume: the workers' lines arrive
            hostfile.write_text("10.0.0.2 slots=2\n10.0.0.3 slots=2\n")

    launcher.wait_for_hostfile(settings(hostfile, 60), clock=lambda: now[0], sleep=sleep)
    assert now[0] == 3


def test_a_hostfile_that_never_comes_ends_the_chief_naming_how_much_it_held(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("10.0.0.2 slots=2\n")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(ScheduleTimeout) as caught:
        launcher.wait_for_hostfile(settings(hostfile, 10), clock=lambda: now[0], sleep=sleep)
    assert caught.value.exit_code == EXIT_SCHEDULE_TIMEOUT
    assert "not written within 10s (3 of 5 processes listed)" in str(caught.value)
    # without a wait (the default flow), the chief reads the hostfile as it is
    launcher.wait_for_hostfile(settings(hostfile, 0), clock=lambda: 0.0, sleep=sleep)
