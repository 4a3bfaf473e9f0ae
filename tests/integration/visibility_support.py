"""What the tests of the job's visibility share: a Job standing for the manager's (as the shipped manifest
runs it), and a job run with the Observer as its Reporter (Events, the manager Job's label and annotations,
the metrics' state file)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from kubernetes import client
from localcluster import TestCluster
from manager_support import spec

from distributetrain.kube.gateway import Kube
from distributetrain.manager.orchestrator import Orchestrator
from distributetrain.manager.pretraining import PreTraining
from distributetrain.observe import jobstate
from distributetrain.observe.observer import Observer
from distributetrain.request.jobspec import ManagerIdentity

MANAGER = "distributetrain-manager"


def manager_identity(cluster: TestCluster) -> ManagerIdentity:
    """The manager as the shipped manifest runs it: a pod of the Job `distributetrain-manager`, which carries
    the job's Events, label and annotations and owns its objects. The Job is suspended (it makes no pod: the
    test process is the manager); its pod's name and uid are the downward API's."""
    body: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": MANAGER, "namespace": "default", "labels": {"app.kubernetes.io/name": "distributetrain"}},
        "spec": {"suspend": True, "template": {"spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "manager", "image": "distributetrain/manager:0.1.0",
                            "securityContext": {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}}]}}}}
    jobs = client.BatchV1Api(cluster.api_client())
    created = jobs.create_namespaced_job("default", body)  # type: ignore[arg-type]  # a dict is a body too
    return ManagerIdentity(name=f"{MANAGER}-x7k2p", uid="manager-pod-uid", namespace="default",
                           job_name=MANAGER, job_uid=str(created.metadata.uid))


def observed_job(cluster: TestCluster, tmp_path: Path, job: str, *, kube: Kube | None = None,
                 **fields: object) -> tuple[Orchestrator, Observer]:
    """The job `job` run by a manager (as `kube`, admin by default) whose Reporter is the Observer."""
    owner = manager_identity(cluster)
    kube = kube or Kube(cluster.api_client())
    job_spec = spec(job_name=job, **fields)
    state = jobstate.initial(job=job, namespace="default", gpus=job_spec.gpus)
    observer = Observer(kube, state, manager=owner, state_file=tmp_path / "state.json",
                        stream=io.StringIO(), chief_stream=io.StringIO(), patch_interval=0.5)
    return Orchestrator(PreTraining(kube, job_spec, owner=owner, reporter=observer)), observer
