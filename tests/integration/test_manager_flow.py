"""The manager against the local cluster (real HTTPS API server, simulated kubelets): the issue's scenarios.

After every scenario nothing carrying the job's labels is left but the kept chief."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from localcluster import Behavior, TestCluster
from manager_support import (
    IMAGE,
    Recorder,
    chief_behavior,
    is_worker,
    leftovers,
    manager_pod,
    orchestrator,
    spec,
)

from distributetrain import naming, podstatus
from distributetrain.errors import CannotPlace, InvalidInput, ScheduleTimeout, WorkerFailed
from distributetrain.hostfile import parse
from distributetrain.kube.gateway import Kube
from podsecurity import restricted

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(120)


def test_six_gpus_on_5_3_2(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    kube = Kube(cluster.api_client())
    owner = manager_pod(kube)
    orch, recorder = orchestrator(cluster, spec(), owner=owner, kube=kube)

    launched = orch.pretraining.run()

    pods = {p["metadata"]["name"]: p for p in kube.list("pods", "default",
                                                         label_selector=naming.job_selector("train"))[0]}
    assert sorted(pods) == ["train-chief", "train-worker-0"]
    worker, chief = pods["train-worker-0"], pods["train-chief"]
    assert (worker["spec"]["nodeName"], podstatus.gpus(worker)) == ("node-1", 5)   # the 5-GPU node
    assert (chief["spec"]["nodeName"], podstatus.gpus(chief)) == ("node-3", 1)     # the 2-GPU node
    # GPUs, cpu and memory per GPU (8Gi each, plus /dev/shm's 1Gi, requested and limited): never BestEffort
    assert worker["spec"]["containers"][0]["resources"] == {
        "requests": {"nvidia.com/gpu": "5", "cpu": "10", "memory": "41Gi"},
        "limits": {"nvidia.com/gpu": "5", "memory": "41Gi"}}
    assert chief["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1", "cpu": "2",
                                                                       "memory": "9Gi"}
    assert worker["status"]["qosClass"] == chief["status"]["qosClass"] == "Burstable"
    # the hostfile lists the worker's pod IP with its GPUs; the chief adds itself at run time
    configmap = kube.get("configmaps", "default", "train-hostfile")
    assert configmap is not None
    assert parse(configmap["data"]["hostfile"]) == parse(f"{worker['status']['podIP']} slots=5\n")
    # every object: our labels and an ownerReference to the manager pod
    for kind, name, role in [("pods", "train-worker-0", "worker"), ("pods", "train-chief", "chief"),
                             ("secrets", "train-ssh", "ssh"), ("configmaps", "train-hostfile", "hostfile"),
                             ("networkpolicies", "train-network", "network")]:
        obj = kube.get(kind, "default", name)
        assert obj is not None, f"{kind}/{name} missing"
        assert obj["metadata"]["labels"] == naming.job_labels("train", role)
        assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "controller": True,
                                                       "name": owner.name, "uid": owner.uid}]
    secret = kube.get("secrets", "default", "train-ssh")
    assert secret is not None
    private = base64.b64decode(secret["data"]["id_ed25519"])
    assert private.startswith(b"-----BEGIN OPENSSH " b"PRIVATE KEY-----")  # split: key scanners
    assert launched.timings["chief_created"] >= launched.timings["workers_created"]
    # the manager's log tells the user all of it, in order: the inventory, the plan, each pod and where
    said = [line.split(" distributetrain: ", 1)[1] for line in recorder.text.splitlines()]
    # first the namespace's policies and the job's network rules, read and decided before anything
    assert said[:2] == ["namespace default: Pod Security: enforce=restricted",
                        "network: ingress only from the job's pods; egress open (to anywhere; "
                        "--restrict-egress limits it to the job's pods and DNS)"]
    said = said[2:]
    assert said[:5] == [
        "inventory: 3 node(s), 3 eligible; 10 of 10 nvidia.com/gpu free on eligible nodes",
        "  NODE    ALLOCATABLE  REQUESTED  FREE  ELIGIBLE",
        "  node-1  5            0          5     yes",
        "  node-2  3            0          3     yes",
        "  node-3  2            0          2     yes",
    ]
    assert said[5] == "plan (attempt 1): 6 GPU(s) as 5 on node-1, 1 on node-3; chief 1 on node-3"
    assert said[7] == "worker train-worker-0 created on node-1 with 5 GPUs"
    assert said[8].startswith("1 worker(s) Running and Ready ")
    assert said[9] == f"hostfile ConfigMap train-hostfile written: {worker['status']['podIP']} slots=5"
    assert said[10].startswith("chief train-chief created on node-3 with 1 GPU;")
    assert said[11].startswith("chief train-chief is Running, ")

    # training ends: the chief logs and exits 0
    cluster.call(cluster.runtime.append_log("default", "train-chief", "loss 0.1\n"))  # type: ignore[attr-defined]
    cluster.call(cluster.runtime.exit_container("default", "train-chief", 0))  # type: ignore[attr-defined]
    assert orch.run_posttraining(launched) == 0
    assert ("supervising job train: chief train-chief (node-3, 1 GPU), workers train-worker-0 "
            "(node-1, 5 GPUs)") in recorder.text
    assert "epoch 2 loss 0.5\nloss 0.1\n" in recorder.chief_out.getvalue()
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_run_passes_the_chief_exit_code_through_and_keeps_its_log(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(log="Traceback: boom\n", exit_code=3)])
    orch, recorder = orchestrator(cluster, spec())
    assert orch.run() == 3
    assert "Traceback: boom" in recorder.chief_out.getvalue()
    assert "chief train-chief ended with exit code 3" in recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}
    assert "Traceback: boom" in cluster.kubectl("logs", "train-chief").stdout


def test_no_keep_chief_leaves_nothing(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    orch, _ = orchestrator(cluster, spec(keep_chief="false"))
    assert orch.run() == 0
    assert leftovers(cluster, "train") == {}


def test_worker_failing_stops_the_job(local_cluster_factory: Factory) -> None:
    worker_dies = (is_worker, Behavior(exit_code=137, exit_after=1.5))
    cluster = local_cluster_factory(behaviors=[worker_dies, chief_behavior(exit_code=None)])
    orch, recorder = orchestrator(cluster, spec())
    with pytest.raises(WorkerFailed) as caught:
        orch.run()
    message = str(caught.value)
    assert caught.value.exit_code == 70
    assert "train-worker-0" in message and "node-1" in message and "exited with code 137" in message
    assert leftovers(cluster, "train") == {}  # the chief is deleted too: the job failed
    assert "deleting all it created" in recorder.text


def test_worker_deleted_by_someone_stops_the_job(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    kube = Kube(cluster.api_client())
    orch, _ = orchestrator(cluster, spec(), kube=kube)
    launched = orch.pretraining.run()
    kube.delete("pods", "default", "train-worker-0")
    with pytest.raises(WorkerFailed, match="train-worker-0"):
        orch.run_posttraining(launched)
    assert leftovers(cluster, "train") == {}


def test_chief_node_failing_is_chief_lost(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    orch, _ = orchestrator(cluster, spec())
    launched = orch.pretraining.run()
    cluster.call(cluster.runtime.fail_node("node-3"))
    with pytest.raises(Exception) as caught:
        orch.run_posttraining(launched)
    assert getattr(caught.value, "exit_code", None) == 75
    assert "NodeLost" in str(caught.value)
    assert leftovers(cluster, "train") == {}


def test_gpus_taken_between_plan_and_create(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    admin = Kube(cluster.api_client())

    def take_gpu_on_planned_node(plan: Any, attempt: int) -> None:
        if attempt == 0:  # someone else grabs one GPU of the node our 5-GPU worker is about to be pinned to
            node = plan.workers[0].node
            admin.create(restricted({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "intruder", "namespace": "default"},
                          "spec": {"nodeName": node, "restartPolicy": "Never",
                                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                                   "containers": [{"name": "c", "image": IMAGE, "resources": {
                                       "limits": {"nvidia.com/gpu": "1"}}}]}}))

    recorder = Recorder(on_plan=take_gpu_on_planned_node)
    orch, _ = orchestrator(cluster, spec(schedule_timeout="3s"), recorder=recorder)
    assert orch.run() == 0
    first, second = recorder.plans[0], recorder.plans[1]
    assert [(e.node, e.gpus) for e in first.allocation] == [("node-1", 5), ("node-3", 1)]
    assert sum(e.gpus for e in second.allocation) == 6 and ("node-1", 5) not in \
        [(e.node, e.gpus) for e in second.allocation]
    assert "train-worker-0 planned for node node-1" in recorder.text
    assert "Insufficient nvidia.com/gpu" in recorder.text or "Unschedulable" in recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_gang_never_ready_fails_after_retries_naming_the_pod(local_cluster_factory: Factory) -> None:
    never_ready = (is_worker, Behavior(ready=False))
    cluster = local_cluster_factory(behaviors=[never_ready])
    orch, recorder = orchestrator(cluster, spec(schedule_timeout="1s", start_timeout="1s", retries="1"))
    with pytest.raises(ScheduleTimeout) as caught:
        orch.run()
    assert caught.value.exit_code == 71
    assert "train-worker-0 on node node-1" in str(caught.value) and "not Ready" in str(caught.value)
    assert len(recorder.plans) == 2
    assert leftovers(cluster, "train") == {}


def test_not_enough_gpus_creates_nothing(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory()
    orch, _ = orchestrator(cluster, spec(gpus="11"))
    with pytest.raises(CannotPlace) as caught:
        orch.run()
    assert caught.value.exit_code == 3
    assert "only 10 out of 11" in str(caught.value) and "nothing was created" in str(caught.value)
    assert orch.kube.requests["create"] == 0 and orch.kube.requests["delete"] == 0
    assert leftovers(cluster, "train") == {}


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"resource": "example.com/tpu"}, "no node advertises 'example.com/tpu'"),
    ({"namespace": "missing"}, "'missing' does not exist"),
])
def test_invalid_against_the_cluster_exits_2_creating_nothing(local_cluster_factory: Factory,
                                                              fields: dict[str, str], fragment: str) -> None:
    cluster = local_cluster_factory()
    orch, _ = orchestrator(cluster, spec(**fields))
    with pytest.raises(InvalidInput) as caught:
        orch.run()
    assert caught.value.exit_code == 2 and fragment in str(caught.value)
    assert orch.kube.requests["create"] <= 1  # at most the refused Secret
    assert leftovers(cluster, "train", fields.get("namespace", "default")) == {}
    assert leftovers(cluster, "train") == {}


def test_a_job_that_fits_one_node_is_a_chief_alone(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    kube = Kube(cluster.api_client())
    orch, recorder = orchestrator(cluster, spec(gpus="2", keep_chief="true"), kube=kube)
    assert orch.run() == 0
    assert [(e.node, e.gpus) for e in recorder.plans[0].allocation] == [("node-3", 2)]  # the tightest fit
    assert "workers (none: the chief runs every process)" in recorder.text
    assert "hostfile ConfigMap train-hostfile written: (no workers)" in recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def blocker(kube: Kube, node: str, gpus: int) -> None:
    kube.create(restricted({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": "blocker", "namespace": "default"},
                 "spec": {"nodeName": node, "restartPolicy": "Never",
                          "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                          "containers": [{"name": "c", "image": IMAGE, "resources": {
                              "limits": {"nvidia.com/gpu": str(gpus)}}}]}}))


def test_wait_for_gpus_creates_nothing_while_waiting_then_proceeds(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    admin = Kube(cluster.api_client())
    blocker(admin, "node-1", 5)  # 5 of 10 GPUs held: 6 do not fit

    def release_when_waiting(message: str) -> None:
        if message.startswith("waiting for GPUs"):
            assert leftovers(cluster, "train") == {}  # nothing created while waiting
            admin.delete("pods", "default", "blocker")

    recorder = Recorder(on_say=release_when_waiting)
    orch, _ = orchestrator(cluster, spec(wait_for_gpus="60s"), recorder=recorder)
    assert orch.run() == 0
    assert "waiting for GPUs to free up: cannot place 6 GPU(s)" in recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_wait_for_gpus_gives_up_clearly(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory()
    blocker(Kube(cluster.api_client()), "node-1", 5)
    orch, recorder = orchestrator(cluster, spec(wait_for_gpus="3s"))
    with pytest.raises(CannotPlace) as caught:
        orch.run()
    assert caught.value.exit_code == 3
    assert "(after waiting 3s); nothing was created" in str(caught.value)
    assert recorder.text.count("waiting for GPUs") >= 1
    assert orch.kube.requests["create"] == 0 and leftovers(cluster, "train") == {}


def test_chief_gpus_taken_before_it_is_created_replans_the_whole_gang(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior()])
    admin = Kube(cluster.api_client())

    def take_the_chiefs_node(plan: Any, attempt: int) -> None:
        if attempt == 0:
            blocker(admin, plan.chief.node, 2)

    recorder = Recorder(on_plan=take_the_chiefs_node)
    orch, _ = orchestrator(cluster, spec(schedule_timeout="3s"), recorder=recorder)
    assert orch.run() == 0
    assert [(e.node, e.gpus) for e in recorder.plans[0].allocation] == [("node-1", 5), ("node-3", 1)]
    assert [(e.node, e.gpus) for e in recorder.plans[1].allocation] == [("node-1", 5), ("node-2", 1)]
    assert "pod train-chief planned for node node-3: not scheduled" in recorder.text
    assert "deleting the gang so no GPU stays held" in recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}
