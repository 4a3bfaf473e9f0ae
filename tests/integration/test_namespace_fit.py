"""The namespace a platform team hands out: a LimitRange that defaults the cpu limit to 1 and caps memory, a
ResourceQuota on requests and limits of cpu, memory and GPUs, Pod Security `restricted`, and the shipped
ValidatingAdmissionPolicy (rbac/). The manager reads them before creating anything: its pods are shaped to
fit (limit = request), a job that can never fit is exit 2 and one that does not fit now exit 3, each naming
the policy, the field and both numbers, with nothing left behind. As the manager's ServiceAccount, a
privileged pod, a hostPath pod and an unlabelled Secret are all refused by the policy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import TestCluster, wait_until
from manager_support import IMAGE, chief_behavior, leftovers, manager_pod, orchestrator, spec

from distributetrain import naming
from distributetrain.errors import ApiError, CannotPlace, InvalidInput
from distributetrain.kube.gateway import Kube
from distributetrain.manager import dryrun
from distributetrain.manager.pretraining import PreTraining

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]
SA = "distributetrain-serviceaccount"

LIMIT_RANGE = """\
apiVersion: v1
kind: LimitRange
metadata: {name: team-defaults}
spec:
  limits:
  - type: Container
    default: {cpu: "1", memory: 4Gi}
    defaultRequest: {cpu: 500m, memory: 1Gi}
    max: {memory: MAX}
"""
QUOTA = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: team-quota}
spec:
  hard: {requests.cpu: "CPU", limits.cpu: "CPU", requests.memory: 200Gi, limits.memory: 200Gi,
         requests.nvidia.com/gpu: "GPUS"}
"""


def apply(cluster: TestCluster, text: str) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=text)
    assert result.returncode == 0, result.stderr


def policies(cluster: TestCluster, *, memory_max: str = "64Gi", cpu: str = "40", gpus: str = "10") -> None:
    apply(cluster, LIMIT_RANGE.replace("MAX", memory_max))
    apply(cluster, QUOTA.replace("CPU", cpu).replace("GPUS", gpus))


def quota_used(cluster: TestCluster) -> dict[str, str]:
    quota = Kube(cluster.api_client()).get("resourcequotas", "default", "team-quota") or {}
    return dict((quota.get("status") or {}).get("used") or {})


def as_manager(cluster: TestCluster) -> Kube:
    token = cluster.token_for("default", SA)
    return Kube.from_token(url=cluster.url, token=token, ca_path=str(cluster.ca_path))


@pytest.fixture
def team(local_cluster_factory: Factory) -> TestCluster:
    """A namespace as a platform team hands it out, with rbac/ applied (the Role, the admission policy and
    its params): `default`, Pod Security restricted (the suite's labels)."""
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=0, exit_after=0.5)])
    result = cluster.kubectl("apply", "-f", str(ROOT / "rbac"))
    assert result.returncode == 0, result.stderr
    return cluster


def test_the_job_fits_limit_range_quota_and_policy(team: TestCluster) -> None:
    policies(team)
    kube = as_manager(team)
    owner = manager_pod(Kube(team.api_client()))
    orch, recorder = orchestrator(team, spec(job_name="fits"), owner=owner, kube=kube)
    assert orch.run() == 0, recorder.text
    assert "namespace default: LimitRange default/team-defaults: Container default cpu=1, memory=4Gi" \
        in recorder.text
    assert "ResourceQuota default/team-quota (used/hard)" in recorder.text
    assert "network: ingress only from the job's pods; egress open" in recorder.text
    assert leftovers(team, "fits") == {"pods": ["fits-chief"]}
    chief = kube.get("pods", "default", "fits-chief")
    assert chief is not None
    # limit = request: the LimitRange's default cpu limit of 1 would have made the pod invalid
    job = chief["spec"]["containers"][0]["resources"]
    assert job["requests"]["cpu"] == job["limits"]["cpu"]
    assert job["requests"]["memory"] == job["limits"]["memory"]


def test_a_dry_run_shows_the_shaped_pods(team: TestCluster) -> None:
    policies(team)
    objects = dryrun.preview(as_manager(team), spec(job_name="preview"), owner=None)
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert pods and all(p["spec"]["containers"][0]["resources"]["limits"]["cpu"]
                        == p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in pods)


@pytest.mark.parametrize(("settings", "message"), [
    ({"memory_max": "20Gi"},
     "LimitRange default/team-defaults: maximum memory usage per Container is 20Gi, but limit is 41Gi"),
    ({"gpus": "4"},
     "ResourceQuota default/team-quota: requests.nvidia.com/gpu: the job needs 6, the quota allows 4 in all"),
    ({"cpu": "8"},
     "ResourceQuota default/team-quota: limits.cpu: the job needs 12, the quota allows 8 in all"),
])
def test_what_can_never_fit_is_exit_2_naming_the_policy_and_numbers(team: TestCluster,
                                                                     settings: dict[str, str],
                                                                     message: str) -> None:
    policies(team, **settings)
    orch, _ = orchestrator(team, spec(job_name="never"), kube=as_manager(team))
    with pytest.raises(InvalidInput) as caught:
        orch.run()
    assert caught.value.exit_code == 2
    assert message in str(caught.value), str(caught.value)
    assert leftovers(team, "never") == {}


def test_what_does_not_fit_now_is_exit_3_and_nothing_is_made(team: TestCluster) -> None:
    policies(team, gpus="8")
    holder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"},
              "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                       "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                           "seccompProfile": {"type": "RuntimeDefault"}},
                       "containers": [{"name": "c", "image": "busybox", "resources": {
                           "requests": {"nvidia.com/gpu": "4", "cpu": "1", "memory": "1Gi"},
                           "limits": {"nvidia.com/gpu": "4", "cpu": "1", "memory": "1Gi"}},
                           "securityContext": {"allowPrivilegeEscalation": False,
                                               "capabilities": {"drop": ["ALL"]}}}]}}
    Kube(team.api_client()).create(holder)
    wait_until(lambda: quota_used(team).get("requests.nvidia.com/gpu") == "4", what="the quota to count it")
    orch, _ = orchestrator(team, spec(job_name="later"), kube=as_manager(team))
    with pytest.raises(CannotPlace) as caught:
        orch.run()
    assert caught.value.exit_code == 3
    assert ("ResourceQuota default/team-quota: requests.nvidia.com/gpu: the job needs 6, 4 of 8 is used, 4 "
            "left") in str(caught.value)
    assert leftovers(team, "later") == {}


def test_a_template_the_restricted_level_refuses_is_exit_2(team: TestCluster, tmp_path: Path) -> None:
    template = tmp_path / "root.yaml"
    root = {"spec": {"securityContext": {"runAsNonRoot": False, "runAsUser": 0}}}
    template.write_text(yaml.safe_dump(root))
    orch, _ = orchestrator(team, spec(job_name="root", pod_template=str(template)), kube=as_manager(team))
    with pytest.raises(InvalidInput) as caught:
        orch.run()
    assert ("namespace default (pod-security.kubernetes.io/enforce=restricted) refuses worker 0 (5 GPUs): "
            "container worker may run as root (runAsNonRoot False, runAsUser 0)") in str(caught.value)
    assert leftovers(team, "root") == {}


# ---- the shipped admission policy, as the manager's ServiceAccount -----------------------------------------
JOB_LABELS = {"app.kubernetes.io/managed-by": "distributetrain", "distributetrain.io/job": "evil",
              "distributetrain.io/role": "worker"}


def job_pod(owner: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A pod that is everything a job pod is (labels, owner, image, restricted), before `changes`."""
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "evil", "namespace": "default", "labels": dict(JOB_LABELS),
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                          "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                          "controller": True}]},
        "spec": {"automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "worker", "image": IMAGE, "securityContext": {
                     "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    for path, value in changes.items():
        where = pod
        *parents, last = path.split(".")
        for part in parents:
            where = where[int(part)] if isinstance(where, list) else where.setdefault(part, {})
        where[last] = value
    return pod


def refusal(kube: Kube, body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        kube.create(body)
    return str(caught.value)


def test_the_policy_refuses_a_privileged_pod_a_host_path_pod_and_an_unlabelled_secret(
        local_cluster_factory: Factory) -> None:
    # a namespace without Pod Security, so that the policy alone decides
    cluster = local_cluster_factory()
    assert cluster.kubectl("label", "namespace", "default", "pod-security.kubernetes.io/enforce-",
                           "pod-security.kubernetes.io/warn-").returncode == 0
    admin = Kube(cluster.api_client())
    owner = admin.create({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "manager", "namespace": "default"},
                          "spec": {"containers": [{"name": "m", "image": "distributetrain/manager:0.1.0"}]}})
    policy_file = ROOT / "rbac" / "DistributeTrain_AdmissionPolicy.yaml"
    docs = [d for d in yaml.safe_load_all(policy_file.read_text()) if d]
    rbac = [d for f in ("DistributeTrain_ServiceAccount.yaml", "DistributeTrain_ClusterRole.yaml",
                        "DistributeTrain_ClusterRoleBinding.yaml", "DistributeTrain_Capacity.yaml")
            for d in yaml.safe_load_all((ROOT / "rbac" / f).read_text()) if d]
    apply(cluster, yaml.safe_dump_all(rbac))
    manager = as_manager(cluster)
    privileged = job_pod(owner, **{"spec.containers.0.securityContext": {"privileged": True}})
    host_path = job_pod(owner, **{"spec.volumes": [{"name": "root", "hostPath": {"path": "/"}}]})
    secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": "loot", "namespace": "default"}, "stringData": {"a": "b"}}
    # before: RBAC alone lets the manager make all three
    for body in (privileged, host_path, secret):
        manager.create(copy.deepcopy(body))
        kind = "pods" if body["kind"] == "Pod" else "secrets"
        admin.delete(kind, "default", body["metadata"]["name"], grace_seconds=0)
    # after: the shipped policy refuses each, with its message
    params = yaml.safe_load((ROOT / "rbac" / "DistributeTrain_AdmissionParams.yaml").read_text())
    apply(cluster, yaml.safe_dump_all([params, *docs]))
    said = refusal(manager, privileged)
    assert ("ValidatingAdmissionPolicy 'distributetrain-manager-writes' with binding "
            "'distributetrain-manager-writes' denied request: no privileged container and no added "
            "capability in a job pod") in said, said
    said = refusal(manager, host_path)
    assert "denied request: no hostPath volume in a job pod" in said, said
    said = refusal(manager, secret)
    assert ("denied request: the manager may write only objects labelled app.kubernetes.io/managed-by="
            "distributetrain and distributetrain.io/job; secrets loot is not") in said, said
    other = job_pod(owner, **{"spec.containers.0.image": "attacker/miner:1"})
    assert "a job pod runs the allowed image distributetrain/base:0.1.0, not attacker/miner:1" in \
        refusal(manager, other)
    token = job_pod(owner, **{"spec.automountServiceAccountToken": True})
    assert "a job pod mounts no ServiceAccount token" in refusal(manager, token)
    # the manager cannot touch the policy's params: RBAC lets it delete PodTemplates (a scale-up's,
    # DistributeTrain_Capacity.yaml), the policy only its jobs' own
    with pytest.raises(ApiError) as caught:
        manager.delete("podtemplates", "default", "distributetrain-admission")
    assert "podtemplates distributetrain-admission is not" in str(caught.value), str(caught.value)
    assert admin.get("podtemplates", "default", "distributetrain-admission") is not None
    steal = job_pod(owner, **{"spec.volumes": [{"name": "s", "secret": {"secretName": "db-password"}}]})
    assert "a job pod mounts only the job's Secret" in refusal(manager, steal)
    # the policy lets a pod that is the job's through, and leaves the namespace's own objects alone
    assert manager.create(job_pod(owner))["metadata"]["name"] == "evil"
    admin.create({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                  "metadata": {"name": "default-deny", "namespace": "default"},
                  "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}})
    with pytest.raises(ApiError) as caught:
        manager.delete("networkpolicies", "default", "default-deny")
    assert "networkpolicies default-deny is not" in str(caught.value)
    assert admin.get("networkpolicies", "default", "default-deny") is not None
    pods = sorted(p["metadata"]["name"] for p in admin.list("pods", "default")[0])
    assert pods == ["evil", "manager"]
    assert admin.get("secrets", "default", "loot") is None


def test_a_whole_job_runs_under_the_policy(team: TestCluster) -> None:
    """The shipped policy admits everything a job does: its Secret, NetworkPolicy, pods, hostfile, and
    their deletion."""
    policies(team)
    owner = manager_pod(Kube(team.api_client()))
    orch, recorder = orchestrator(team, spec(job_name="allowed", restrict_egress="true"), owner=owner,
                                  kube=as_manager(team))
    assert orch.run() == 0, recorder.text
    assert leftovers(team, "allowed") == {"pods": ["allowed-chief"]}


def test_pretraining_reads_the_namespace_before_anything(team: TestCluster) -> None:
    policies(team)
    phase = PreTraining(as_manager(team), spec(job_name="reads"))
    phase.plan(attempt=0, wait=False)
    assert phase.policies is not None and phase.policies.enforce == "restricted"
    assert [q["metadata"]["name"] for q in phase.policies.quotas] == ["team-quota"]


def patch_refusal(kube: Kube, name: str, patch: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        kube.patch("pods", "default", name, patch)
    return str(caught.value)


def test_the_policy_lets_the_manager_change_only_the_chiefs_hosts_version(team: TestCluster) -> None:
    """The manager's `patch` on pods (its Role) is for one annotation of its job's chief
    (manager/hostfilepush.py): a label, another annotation, the spec, or any other pod stay out of reach."""
    admin = Kube(team.api_client())
    owner = admin.get("pods", "default", manager_pod(admin).name)
    assert owner is not None
    chief = job_pod(owner, **{"metadata.name": "evil-chief",
                              "metadata.annotations": {"distributetrain.io/recovery": "elastic"}})
    chief["metadata"]["labels"]["distributetrain.io/role"] = "chief"
    admin.create(chief)
    admin.create(job_pod(owner, **{"metadata.name": "evil-worker-0"}))
    manager = as_manager(team)
    version = {"metadata": {"annotations": {naming.HOSTS_VERSION_ANNOTATION: "42"}}}
    patched = manager.patch("pods", "default", "evil-chief", version)
    assert patched["metadata"]["annotations"] == {"distributetrain.io/recovery": "elastic",
                                                  naming.HOSTS_VERSION_ANNOTATION: "42"}
    denied = ("ValidatingAdmissionPolicy 'distributetrain-manager-writes' with binding "
              "'distributetrain-manager-writes' denied request: of a job pod the manager may change only "
              "the annotation distributetrain.io/hosts-version; its labels, other annotations, finalizers, "
              "owners and spec stay as they are")
    for patch in ({"metadata": {"labels": {"distributetrain.io/job": "other"}}},
                  {"metadata": {"labels": {"extra": "x"}}},
                  {"metadata": {"annotations": {"distributetrain.io/recovery": "restart"}}},
                  {"metadata": {"annotations": {"distributetrain.io/recovery": None}}},
                  {"metadata": {"annotations": {naming.HOSTS_VERSION_ANNOTATION: "43", "other": "x"}}},
                  {"metadata": {"finalizers": ["example.com/keep"]}},
                  {"spec": {"activeDeadlineSeconds": 1}}):
        said = patch_refusal(manager, "evil-chief", patch)
        assert denied in said, (patch, said)
    after = admin.get("pods", "default", "evil-chief")
    assert after is not None and after["metadata"]["annotations"] == patched["metadata"]["annotations"]
    assert after["metadata"]["labels"] == chief["metadata"]["labels"]
    # only the chief: a worker's or a pod that is not the job's is not the manager's to annotate
    assert "of the job pods the manager may change only the chief, not evil-worker-0" in \
        patch_refusal(manager, "evil-worker-0", version)
    assert "pods distributetrain-manager is not" in patch_refusal(manager, "distributetrain-manager", version)
    # the policy binds the manager's ServiceAccount only: an administrator labels the chief as before
    admin.patch("pods", "default", "evil-chief", {"metadata": {"labels": {"extra": "x"}}})
