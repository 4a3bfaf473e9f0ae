"""Least privilege: the manager completes under exactly the rules of rbac/, and removing any single rule makes
the step that needs it fail with the API server's Forbidden message surfaced to the user - except the rules
that only make the job visible (Events, the manager pod's phase label): without one of those the job still
succeeds, and the manager's log says once what is not shown."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from localcluster import TestCluster
from manager_support import chief_behavior, leftovers, manager_pod, orchestrator, spec
from visibility_support import MANAGER, observed_job

from distributetrain.errors import ApiError
from distributetrain.kube.gateway import Kube
from distributetrain.manager.cleanup import delete_job

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
SA = "distributetrain-serviceaccount"
USER = f'User "system:serviceaccount:default:{SA}"'


def documents(*names: str) -> list[dict[str, Any]]:
    return [doc for name in names for doc in yaml.safe_load_all((ROOT / name).read_text()) if doc]


def roles() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in documents("rbac/DistributeTrain_ClusterRole.yaml")}


def apply(cluster: TestCluster, docs: list[dict[str, Any]]) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr


def as_manager(cluster: TestCluster) -> Kube:
    token = cluster.token_for("default", SA)
    return Kube.from_token(url=cluster.url, token=token, ca_path=str(cluster.ca_path))


CLAIM = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "shared", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}


@pytest.fixture
def rbac_cluster(local_cluster_factory: Factory) -> TestCluster:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=0, exit_after=0.5)])
    result = cluster.kubectl("apply", "-f", str(ROOT / "rbac"))
    assert result.returncode == 0, result.stderr
    apply(cluster, [CLAIM])  # the job mounts a shared volume: every rule of the Role is used
    return cluster


def test_manager_completes_with_exactly_the_rbac_rules(rbac_cluster: TestCluster, tmp_path: Path) -> None:
    orch, observer = observed_job(rbac_cluster, tmp_path, "least", volume_claim="shared",
                                  kube=as_manager(rbac_cluster))
    assert orch.run() == 0
    observer.close()
    assert "epoch 2" in observer.chief_stream.getvalue()
    assert leftovers(rbac_cluster, "least") == {"pods": ["least-chief"]}
    # the optional rules are used: the manager recorded its Events and labelled its own pod
    assert "not recorded" not in observer.stream.getvalue()
    reasons = rbac_cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={MANAGER}",
                                   "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert {"Planned", "TrainingSucceeded", "CleanedUp"} <= set(reasons), reasons
    label = rbac_cluster.kubectl("get", "job", MANAGER, "-o", "jsonpath={.metadata.labels}").stdout
    assert '"distributetrain.io/phase":"Succeeded"' in label


def optional(rule: dict[str, Any]) -> bool:
    """Rules the job runs without: Events, and patching the manager's own Job (its phase label)."""
    return rule["resources"] == ["events"] or rule.get("resourceNames") == [MANAGER]


RULES = [("ClusterRole", i) for i in range(len(roles()["ClusterRole"]["rules"]))] + \
        [("Role", i) for i, rule in enumerate(roles()["Role"]["rules"]) if not optional(rule)]
OPTIONAL = [i for i, rule in enumerate(roles()["Role"]["rules"]) if optional(rule)]


@pytest.mark.parametrize(("kind", "index"), RULES, ids=[f"{k}-{i}" for k, i in RULES])
def test_removing_any_single_rule_fails_with_forbidden(rbac_cluster: TestCluster, kind: str,
                                                       index: int) -> None:
    role = copy.deepcopy(roles()[kind])
    removed = role["rules"].pop(index)
    apply(rbac_cluster, [role])
    job = f"rbac-{kind.lower()}-{index}"
    # owned by a manager pod, as rbac/'s admission policy requires of every job pod
    owner = manager_pod(Kube(rbac_cluster.api_client()))
    orch, _ = orchestrator(rbac_cluster, spec(job_name=job, volume_claim="shared"),
                           kube=as_manager(rbac_cluster), owner=owner)
    with pytest.raises(ApiError) as caught:
        orch.run()
    message = str(caught.value)
    assert caught.value.exit_code == 72
    assert "Forbidden" in message and "is forbidden: " + USER in message
    verbs_or = "|".join(removed["verbs"])
    assert any(f'cannot {verb} resource "{resource}"' in message
               for verb in verbs_or.split("|") for resource in removed["resources"]), message
    delete_job(Kube(rbac_cluster.api_client()), job=job, namespace="default", keep_chief=False)


@pytest.mark.parametrize("index", OPTIONAL, ids=[f"Role-{i}" for i in OPTIONAL])
def test_removing_a_visibility_rule_never_fails_the_job(rbac_cluster: TestCluster, tmp_path: Path,
                                                        index: int) -> None:
    role = copy.deepcopy(roles()["Role"])
    removed = role["rules"].pop(index)
    apply(rbac_cluster, [role])
    orch, observer = observed_job(rbac_cluster, tmp_path, f"visible-{index}", volume_claim="shared",
                                  kube=as_manager(rbac_cluster))
    assert orch.run() == 0
    observer.close()
    log = observer.stream.getvalue()
    said = ("not recorded: " if removed["resources"] == ["events"]
            else f"are not shown on job default/{MANAGER}: ")
    assert log.count(said) == 1, log  # once, however many writes were refused
    verb = removed["verbs"][0]
    assert f'cannot {verb} resource "{removed["resources"][0]}"' in log, log
    assert "further failures of this kind are not logged" in log


def test_the_visibility_rules_are_exactly_create_events_and_patch_the_manager_job() -> None:
    rules = [r for r in roles()["Role"]["rules"] if optional(r)]
    assert rules == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [MANAGER], "verbs": ["patch"]}]
    (job,) = documents("manifests/DistributeTrain_Manager.yaml")
    assert (job["kind"], job["metadata"]["name"]) == ("Job", MANAGER)


def test_rbac_grants_no_writes_cluster_wide() -> None:
    cluster_role = roles()["ClusterRole"]
    verbs = {verb for rule in cluster_role["rules"] for verb in rule["verbs"]}
    assert verbs <= {"get", "list", "watch"}
    assert {r for rule in cluster_role["rules"] for r in rule["resources"]} == {"nodes", "pods"}


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
def test_rbac_and_manifests_validate_strictly(version: str) -> None:
    files = sorted((ROOT / "rbac").glob("*.yaml")) + sorted((ROOT / "manifests").glob("*.yaml"))
    assert [f.name for f in files] == [
        "DistributeTrain_AdmissionParams.yaml", "DistributeTrain_AdmissionPolicy.yaml",
        "DistributeTrain_ClusterRole.yaml",
        "DistributeTrain_ClusterRoleBinding.yaml", "DistributeTrain_ServiceAccount.yaml",
        "DistributeTrain_Manager.yaml", "DistributeTrain_ManagerDisruptionBudget.yaml",
        "DistributeTrain_Namespace.yaml", "DistributeTrain_PodTemplate.yaml",
        "DistributeTrain_PriorityClass.yaml"]
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(doc, version, strict=True)
    # the job pods' template the ConfigMap carries is a PodTemplateSpec too
    (config_map,) = documents("manifests/DistributeTrain_PodTemplate.yaml")
    template = yaml.safe_load(config_map["data"]["pod-template.yaml"])
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                  "template": template}, version, strict=True)


def test_the_role_reads_the_job_secret_by_name_and_lists_no_secret() -> None:
    rules = roles()["Role"]["rules"]
    secrets = [r for r in rules if "secrets" in r["resources"]]
    assert secrets == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete", "get"]}]
    assert {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]} in rules


def test_manager_manifest_runs_as_the_service_account_non_root() -> None:
    (job,) = documents("manifests/DistributeTrain_Manager.yaml")
    assert (job["kind"], job["metadata"]["name"]) == ("Job", "distributetrain-manager")
    pod = job["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == SA and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    container = pod["spec"]["containers"][0]
    assert container["args"][:2] == ["--gpus", "6"]
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
                for e in container["env"] if "valueFrom" in e}
    assert downward == {"DT_NAMESPACE": "metadata.namespace", "DT_MANAGER_POD_NAME": "metadata.name",
                        "DT_MANAGER_POD_UID": "metadata.uid", "DT_MANAGER_NAMESPACE": "metadata.namespace",
                        "DT_MANAGER_POD_IPS": "status.podIPs",
                        "DT_MANAGER_JOB_NAME": "metadata.labels['batch.kubernetes.io/job-name']",
                        "DT_MANAGER_JOB_UID": "metadata.labels['batch.kubernetes.io/controller-uid']"}


def test_the_manager_job_hands_a_lost_pod_on_and_never_reruns_a_finished_training() -> None:
    (job,) = documents("manifests/DistributeTrain_Manager.yaml")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    # a drain, eviction, preemption or node shutdown of the manager pod: ignored, another one adopts the job
    assert rules[0] == {"action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    # only the manager pod's own end is retried (77: the API server gone too long; 137/143: killed or stopped)
    assert rules[1] == {"action": "FailJob", "onExitCodes": {"containerName": "manager", "operator": "NotIn",
                                                             "values": [77, 137, 143]}}
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (1, 1)
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "distributetrain-manager"
