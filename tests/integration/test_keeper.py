"""The keeper (manager/keeper.py) holds an elastic or restart job at its size, on simulated kubelets: a lost
worker leaves the hostfile at once, its GPUs are planned again over what is free now (a NotReady node
excluded), the replacement joins the hostfile once Ready; below the minimum for too long, or out of restarts,
the job fails as a plain one does, leaving nothing. What Horovod and Train.py make of it is the e2e tests'
(tests/reliability/test_recovery.py)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import TestCluster, wait_until
from manager_support import IMAGE, Recorder, chief_behavior, leftovers, manager_pod, orchestrator, spec

from distributetrain import naming
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Watched
from distributetrain.manager.orchestrator import Orchestrator
from distributetrain.request.jobspec import ManagerIdentity

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(180)
HOSTFILE = naming.hostfile_configmap_name("train")


class Running:
    """Orchestrator.run() in a thread, and the hostfile ConfigMap's contents as they changed meanwhile."""

    def __init__(self, cluster: TestCluster, orch: Orchestrator) -> None:
        self.kube = Kube(cluster.api_client())
        self.code: int | None = None
        self.error: BaseException | None = None
        self.hostfiles: list[dict[str, str]] = []
        self._done = threading.Event()
        self._run = threading.Thread(target=self._main, args=(orch,), daemon=True)
        self._poll = threading.Thread(target=self._watch_hostfile, daemon=True)
        self._run.start()
        self._poll.start()

    def _main(self, orch: Orchestrator) -> None:
        try:
            self.code = orch.run()
        except BaseException as err:  # the test reads it
            self.error, self.code = err, getattr(err, "exit_code", 1)
        finally:
            self._done.set()

    def _watch_hostfile(self) -> None:
        watched = Watched(self.kube, "configmaps", "default", naming.job_selector("train"))
        while not self._done.is_set():
            for snapshot in watched.changes(deadline=time.monotonic() + 0.5):
                data = dict((snapshot.get(HOSTFILE) or {}).get("data") or {})
                if data and (not self.hostfiles or self.hostfiles[-1] != data):
                    self.hostfiles.append(data)

    def join(self, timeout: float = 90) -> int:
        self._run.join(timeout)
        assert not self._run.is_alive(), "the manager hung"
        self._poll.join(5)
        assert self.code is not None
        return self.code


def pods(cluster: TestCluster) -> dict[str, dict[str, Any]]:
    items, _ = Kube(cluster.api_client()).list("pods", "default", label_selector=naming.job_selector("train"))
    return {p["metadata"]["name"]: p for p in items}


def ready(cluster: TestCluster, name: str) -> dict[str, Any] | None:
    pod = pods(cluster).get(name)
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return pod if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None


def nudged(cluster: TestCluster) -> bool:
    """Whether the chief's pod carries the hostfile's current resourceVersion: the annotation that has its
    kubelet refresh the hostfile volume at once (manager/hostfilepush.py)."""
    admin = Kube(cluster.api_client())
    configmap = admin.get("configmaps", "default", HOSTFILE)
    chief = admin.get("pods", "default", "train-chief")
    if configmap is None or chief is None:
        return False
    annotations = chief["metadata"].get("annotations") or {}
    return bool(annotations.get(naming.HOSTS_VERSION_ANNOTATION) == configmap["metadata"]["resourceVersion"])


def chief_ends(cluster: TestCluster, code: int = 0) -> None:
    cluster.call(cluster.runtime.exit_container("default", "train-chief", code))  # type: ignore[attr-defined]


def _says(recorder: Recorder, words: str) -> bool:
    return words in recorder.text


def start(cluster: TestCluster, *, kube: Kube | None = None, owner: ManagerIdentity | None = None,
          **fields: object) -> tuple[Running, Recorder]:
    """The job `spec(**fields)` launched (as admin, or as `kube` with `owner`), once it is supervised."""
    orch, recorder = orchestrator(cluster, spec(**fields), kube=kube, owner=owner)
    running = Running(cluster, orch)
    wait_until(lambda: "supervising job train" in recorder.text, timeout=60, what="supervision")
    return running, recorder


def test_a_deleted_worker_is_replaced_and_the_hostfile_follows(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[5, 3, 2], behaviors=[chief_behavior(exit_code=None)])
    running, recorder = start(cluster, min_gpus="1")
    first = ready(cluster, "train-worker-0")
    assert first is not None
    old_ip = first["status"]["podIP"]
    wait_until(lambda: running.hostfiles, timeout=10, what="the hostfile")
    assert running.hostfiles[0] == {"hostfile": f"{old_ip} slots=5\n", "names": f"{old_ip} train-worker-0\n",
                                    "nodes": f"{old_ip} node-1\n"}
    Kube(cluster.api_client()).delete("pods", "default", "train-worker-0", grace_seconds=0)
    replacement = wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30, what="the replacement")
    new_ip = replacement["status"]["podIP"]
    wait_until(lambda: running.hostfiles[-1].get("hostfile") == f"{new_ip} slots=5\n", timeout=10,
               what="the replacement in the hostfile")
    # the chief's pod is annotated with the hostfile's version: its kubelet refreshes the volume now
    wait_until(lambda: nudged(cluster), timeout=10, what="the chief annotated with the hostfile's version")
    chief_ends(cluster)
    assert running.join() == 0, recorder.text
    # removed at once (an empty hostfile: Horovod goes on with the chief's rank), then the replacement
    assert [h["hostfile"] for h in running.hostfiles] == [f"{old_ip} slots=5\n", "", f"{new_ip} slots=5\n"]
    assert running.hostfiles[-1]["names"] == f"{new_ip} train-worker-1\n"
    assert running.hostfiles[-1]["nodes"] == f"{new_ip} node-1\n"
    # the exact planner over what was free then: node-1's 5 GPUs, freed by the lost worker
    assert replacement["spec"]["nodeName"] == "node-1"
    text = recorder.text
    assert "elastic job: a lost worker is replaced on the best free GPUs; training goes on with at least " \
           "1 of 6 GPU(s)" in text
    assert "worker train-worker-0 on node-1 (its pod is being deleted) lost: removed from the hostfile; " \
           "Horovod goes on with 1 of 6 GPU(s) (at least 1)" in text or \
           "worker train-worker-0 on node-1 (its pod disappeared" in text, text
    assert "plan to replace the lost worker(s): 5 GPU(s) as 5 on node-1" in text
    assert f"worker train-worker-1 Ready on node-1 ({new_ip}, 5 GPUs): added to the hostfile; the job " \
           "holds 6 of 6 GPU(s)" in text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_a_lost_node_is_not_planned_on_while_notready(local_cluster_factory: Factory) -> None:
    # on a real cluster a NotReady node's pods stay Running (not Ready) for minutes: the manager asks the node
    cluster = local_cluster_factory(nodes=[5, 3, 2, 5], behaviors=[chief_behavior(exit_code=None)])
    running, recorder = start(cluster, min_gpus="1")
    host = cluster.runtime.host  # type: ignore[attr-defined]
    cluster.call(host.set_node_ready("node-1", False, reason="NodeStatusUnknown", message="gone quiet"))
    cluster.call(cluster.runtime.set_ready("default", "train-worker-0", False))  # type: ignore[attr-defined]
    replacement = wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30, what="the replacement")
    assert replacement["spec"]["nodeName"] == "node-4"
    assert "worker train-worker-0 on node-1 (its node node-1 is NotReady) lost" in recorder.text
    assert "5 GPU(s) as 5 on node-4" in recorder.text
    chief_ends(cluster)
    assert running.join() == 0, recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_below_the_minimum_past_the_replace_timeout_fails_and_leaves_nothing(
        local_cluster_factory: Factory) -> None:
    # a worker of 5 on node-1, the chief's 1 on node-2: with node-1 gone, nothing is free anywhere
    cluster = local_cluster_factory(nodes=[5, 1], behaviors=[chief_behavior(exit_code=None)])
    running, recorder = start(cluster, min_gpus="3", replace_timeout="2s")
    lost_at = time.monotonic()
    cluster.call(cluster.runtime.fail_node("node-1"))
    assert running.join() == 70, recorder.text
    waited = time.monotonic() - lost_at
    assert 2.0 <= waited < 20, waited
    message = str(running.error)
    assert "1 GPU(s) train but the job needs 3 (--min-gpus) and no room freed within --replace-timeout 2s" \
        in message
    assert "waiting for room to replace 5 GPU(s): 0 free for a worker on eligible nodes" in recorder.text
    assert leftovers(cluster, "train") == {}


def test_an_elastic_job_grows_to_its_maximum_when_gpus_free_up(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[5, 3, 1], behaviors=[chief_behavior(exit_code=None)])
    kube = Kube(cluster.api_client())
    blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other-team", "namespace": "default"},
               "spec": {"restartPolicy": "Never", "nodeName": "node-2", "containers": [{
                   "name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "3"}},
                   "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                       "runAsNonRoot": True, "runAsUser": 1000,
                                       "seccompProfile": {"type": "RuntimeDefault"}}}],
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    kube.create(blocker)
    running, recorder = start(cluster, min_gpus="2", max_gpus="8", grow_interval="1s")
    time.sleep(2)
    assert "train-worker-1" not in pods(cluster)  # nothing free: nothing to grow with
    kube.delete("pods", "default", "other-team", grace_seconds=0)
    grown = wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30, what="a worker to grow with")
    assert (grown["spec"]["nodeName"], grown["metadata"]["annotations"][naming.GPUS_ANNOTATION]) == \
        ("node-2", "2")  # up to --max-gpus 8: 2 of node-2's 3
    assert "plan to grow toward 8: 2 GPU(s) as 2 on node-2" in recorder.text
    wait_until(lambda: "the job holds 8 of 6 GPU(s) (up to 8)" in recorder.text, timeout=10, what="8 GPUs")
    chief_ends(cluster)
    assert running.join() == 0, recorder.text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_a_restart_job_counts_its_restarts_and_says_from_which_epoch_each_resumed(
        local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[5, 3, 2], behaviors=[chief_behavior(exit_code=None)])
    running, recorder = start(cluster, restarts="2")
    for lost, epoch in (("train-worker-0", 3), ("train-worker-1", 7)):
        cluster.call(cluster.runtime.exit_container("default", lost, 137))  # type: ignore[attr-defined]
        following = f"train-worker-{int(lost[-1]) + 1}"
        wait_until(functools.partial(ready, cluster, following), timeout=30, what="the replacement")
        wait_until(lambda: "every lost worker replaced" in recorder.text.rsplit("lost:", 1)[-1], timeout=10,
                   what="the hostfile complete")
        cluster.call(cluster.runtime.append_log(  # type: ignore[attr-defined]
            "default", "train-chief", f"resumed_from_epoch={epoch}\n"))
        wait_until(functools.partial(_says, recorder, f"the training resumed from epoch {epoch}"), timeout=10,
                   what="the resumed epoch")
    chief_ends(cluster)
    assert running.join() == 0, recorder.text
    text = recorder.text
    assert "once it is replaced the chief relaunches the training from its last checkpoint (restart 1 of 2)" \
        in text
    assert "restart 2: the training resumed from epoch 7" in text
    assert ("chief train-chief ended with exit code 0, after 2 restart(s) (the training resumed from epoch "
            "3; the training resumed from epoch 7)") in text
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


def test_a_restart_job_out_of_restarts_fails_and_leaves_nothing(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[5, 3, 2], behaviors=[chief_behavior(exit_code=None)])
    running, recorder = start(cluster, restarts="1")
    cluster.call(cluster.runtime.exit_container("default", "train-worker-0", 137))  # type: ignore[attr-defined]
    wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30, what="the replacement")
    cluster.call(cluster.runtime.exit_container("default", "train-worker-1", 137))  # type: ignore[attr-defined]
    assert running.join() == 70, recorder.text
    assert "the training was relaunched 1 time(s) already, the most --restarts allows" in str(running.error)
    assert leftovers(cluster, "train") == {}


MANAGER_SH = Path(__file__).resolve().parents[2] / "manager-image" / "Manager.sh"


def test_manager_sh_supervises_an_elastic_job_in_its_own_process(local_cluster_factory: Factory,
                                                                 tmp_path: Path) -> None:
    """PostTraining as a process of its own reads the request again to build replacements."""
    cluster = local_cluster_factory(nodes=[5, 3, 2], behaviors=[chief_behavior(exit_code=None)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DT_", "KUBERNETES_"))}
    env.update(DT_PYTHON=sys.executable, DT_MIN_GPUS="1")
    log = tmp_path / "manager.log"
    with log.open("w") as sink:
        manager = subprocess.Popen([str(MANAGER_SH), "--kubeconfig", str(cluster.kubeconfig), "--gpus", "6",
                                    "--image", IMAGE, "--job-name", "train"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=sink, text=True)
    try:
        wait_until(lambda: "supervising job train" in log.read_text(), timeout=60, what="PostTraining")
        Kube(cluster.api_client()).delete("pods", "default", "train-worker-0", grace_seconds=0)
        wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30,
                   what="the replacement\n" + log.read_text())
        cli = str(Path(sys.executable).parent / "distributetrain")
        waited = subprocess.run([cli, "wait", "train", "--kubeconfig", str(cluster.kubeconfig)],
                                capture_output=True, text=True, timeout=60, check=False)
        assert waited.returncode == 2 and "job train is elastic" in waited.stderr, waited.stderr
        chief_ends(cluster)
        manager.wait(timeout=60)
    finally:
        if manager.poll() is None:
            manager.kill()
    err = log.read_text()
    assert manager.returncode == 0, err
    assert "worker train-worker-1 Ready on node-1" in err
    assert leftovers(cluster, "train") == {"pods": ["train-chief"]}


ROOT = Path(__file__).resolve().parents[2]
SA = "distributetrain-serviceaccount"


def as_the_manager(cluster: TestCluster) -> tuple[Kube, ManagerIdentity]:
    """rbac/ applied; the manager's ServiceAccount's client, and a pod standing for the manager (rbac/'s
    admission policy admits no job pod without an owner)."""
    assert cluster.kubectl("apply", "-f", str(ROOT / "rbac")).returncode == 0
    kube = Kube.from_token(url=cluster.url, token=cluster.token_for("default", SA),
                           ca_path=str(cluster.ca_path))
    return kube, manager_pod(Kube(cluster.api_client()))


def apply_role_without(cluster: TestCluster, resource: str, verb: str) -> None:
    """rbac/'s namespaced Role applied again without `verb` on `resource` (a Role from before that grant)."""
    roles = yaml.safe_load_all((ROOT / "rbac" / "DistributeTrain_ClusterRole.yaml").read_text())
    role = next(doc for doc in roles if doc["kind"] == "Role")
    for rule in role["rules"]:
        if rule["resources"] == [resource]:
            rule["verbs"].remove(verb)
    assert cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(role)).returncode == 0


def test_keeping_a_job_needs_exactly_the_patch_of_configmaps_rbac_grants(
        local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[5, 3, 2], behaviors=[chief_behavior(exit_code=None)])
    as_manager, owner = as_the_manager(cluster)
    running, recorder = start(cluster, kube=as_manager, owner=owner, min_gpus="1")
    Kube(cluster.api_client()).delete("pods", "default", "train-worker-0", grace_seconds=0)
    wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30, what="the replacement")
    # the Role's `patch` on pods and the admission policy let the manager annotate its chief
    wait_until(lambda: nudged(cluster), timeout=10, what="the chief annotated with the hostfile's version")
    chief_ends(cluster)
    assert running.join() == 0, recorder.text
    assert "could not be annotated" not in recorder.text

    apply_role_without(cluster, "configmaps", "patch")
    running, recorder = start(cluster, kube=as_manager, owner=owner, min_gpus="1", job_name="train")
    Kube(cluster.api_client()).delete("pods", "default", "train-worker-0", grace_seconds=0)
    assert running.join() == 72, recorder.text
    assert 'cannot patch resource "configmaps"' in str(running.error)
    assert leftovers(cluster, "train") == {}


def test_without_patch_on_pods_a_job_is_kept_and_the_manager_says_once_what_it_costs(
        local_cluster_factory: Factory) -> None:
    """A Role from before the annotation (no `patch` on pods): the chief's volume then takes each hostfile
    update at its kubelet's periodic sync, which costs time, not the job."""
    cluster = local_cluster_factory(nodes=[5, 3, 2], behaviors=[chief_behavior(exit_code=None)])
    as_manager, owner = as_the_manager(cluster)
    apply_role_without(cluster, "pods", "patch")
    running, recorder = start(cluster, kube=as_manager, owner=owner, min_gpus="1")
    Kube(cluster.api_client()).delete("pods", "default", "train-worker-0", grace_seconds=0)
    replacement = wait_until(lambda: ready(cluster, "train-worker-1"), timeout=30, what="the replacement")
    new_ip = replacement["status"]["podIP"]
    wait_until(lambda: running.hostfiles and running.hostfiles[-1].get("hostfile") == f"{new_ip} slots=5\n",
               timeout=10, what="the replacement in the hostfile")
    chief_ends(cluster)
    assert running.join() == 0, recorder.text
    # two hostfile writes (the loss, the replacement), one line about the annotation refused
    assert recorder.text.count("the chief's pod train-chief could not be annotated with "
                               "distributetrain.io/hosts-version") == 1, recorder.text
    assert 'cannot patch resource "pods"' in recorder.text
    assert "up to 90 s later" in recorder.text
    assert not nudged(cluster)
