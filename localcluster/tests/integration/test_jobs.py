"""batch/v1 Jobs through real kubectl and the official client: apply, get, logs (-f) by the Job's selector,
completion, backoffLimit, podFailurePolicy, deletion and its pods, `kubectl create job` (a protobuf body),
the TTL, and the downward API a Job's pods read their labels with. Simulated pods; the controller's
back-off is shortened (ClusterSpec.job_backoff)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubeclient import api_status, as_body, present
from localcluster import Behavior, TestCluster, wait_until

Obj = dict[str, Any]


def app(name: str) -> Any:
    return lambda pod: (pod["metadata"].get("labels") or {}).get("app") == name


BEHAVIORS = [(app("ok"), Behavior(log="hello\n", exit_code=0, exit_after=0.3)),
             (app("crash"), Behavior(log="oops\n", exit_code=3, exit_after=0.1)),
             (app("slow"), Behavior(log="working\n"))]


@pytest.fixture
def cluster(local_cluster_factory: Any) -> TestCluster:
    built: TestCluster = local_cluster_factory(nodes=[2, 2], gpu_taint=False, behaviors=BEHAVIORS,
                                               job_backoff=0.2)
    return built


@pytest.fixture
def batch(cluster: TestCluster) -> client.BatchV1Api:
    return client.BatchV1Api(cluster.api_client())


@pytest.fixture
def v1(cluster: TestCluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api_client())


def job(name: str, label: str, **spec: Any) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {"app": label}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "main", "image": "busybox"}]}}, **spec}}


def condition_types(batch: client.BatchV1Api, name: str) -> list[str]:
    status = batch.read_namespaced_job_status(name, "default").status
    return [c.type for c in (status.conditions or []) if c.status == "True"]


def pods_of(v1: client.CoreV1Api, name: str) -> list[Any]:
    selector = f"batch.kubernetes.io/job-name={name}"
    return list(v1.list_namespaced_pod("default", label_selector=selector).items)


def test_kubectl_applies_a_job_that_completes_and_shows_like_a_real_cluster(cluster: TestCluster,
                                                                           batch: client.BatchV1Api) -> None:
    applied = cluster.kubectl("apply", "-f", "-", input=json.dumps(job("pi", "ok")))
    assert applied.stdout == "job.batch/pi created\n", applied.stderr
    wait_until(lambda: "Complete" in condition_types(batch, "pi"), what="pi complete")
    table = cluster.kubectl("get", "jobs", "-o", "wide").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES",
                                "SELECTOR"]
    assert table[1].split()[:3] == ["pi", "Complete", "1/1"]
    assert table[1].split()[-1].startswith("batch.kubernetes.io/controller-uid=")
    assert cluster.kubectl("logs", "job/pi").stdout == "hello\n"
    status = present(batch.read_namespaced_job("pi", "default").status)
    assert (status.succeeded, status.active, status.ready, status.terminating) == (1, None, 0, 0)
    assert [c.reason for c in status.conditions or []] == ["CompletionsReached", "CompletionsReached"]
    assert status.completion_time is not None


def test_the_jobs_pods_are_owned_labelled_and_finalized_as_the_controller_makes_them(
        cluster: TestCluster, batch: client.BatchV1Api, v1: client.CoreV1Api) -> None:
    created = batch.create_namespaced_job("default", as_body(job("worker", "slow")))
    uid = present(created.metadata).uid
    pod = wait_until(lambda: pods_of(v1, "worker"), what="the job's pod")[0]
    refs = pod.metadata.owner_references
    assert [(r.api_version, r.kind, r.name, r.uid, r.controller, r.block_owner_deletion) for r in refs] == [
        ("batch/v1", "Job", "worker", uid, True, True)]
    assert pod.metadata.finalizers == ["batch.kubernetes.io/job-tracking"]
    assert pod.metadata.generate_name == "worker-"
    assert pod.metadata.labels == {"app": "slow", "batch.kubernetes.io/controller-uid": uid,
                                   "batch.kubernetes.io/job-name": "worker", "controller-uid": uid,
                                   "job-name": "worker"}
    wait_until(lambda: present(batch.read_namespaced_job("worker", "default").status).ready == 1,
               what="ready counted")


def test_kubectl_logs_follows_the_jobs_pod_until_it_ends(cluster: TestCluster, v1: client.CoreV1Api) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job("tail", "slow")))
    pod = wait_until(lambda: pods_of(v1, "tail"), what="the job's pod")[0].metadata.name
    wait_until(lambda: cluster.kubectl("logs", "job/tail").stdout == "working\n", what="first line")
    followed: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: followed.update(done=cluster.kubectl("logs", "-f", "job/tail")))
    reader.start()
    cluster.call(cluster.sim.append_log("default", pod, "step 2\n"))
    cluster.call(cluster.sim.exit_container("default", pod, 0))
    reader.join(timeout=30)
    assert followed["done"].stdout == "working\nstep 2\n"


def test_failures_beyond_the_backoff_limit_fail_the_job_with_the_real_reason(
        cluster: TestCluster, batch: client.BatchV1Api, v1: client.CoreV1Api) -> None:
    batch.create_namespaced_job("default", as_body(job("flaky", "crash", backoffLimit=2)))
    wait_until(lambda: "Failed" in condition_types(batch, "flaky"), timeout=20, what="flaky failed")
    status = present(batch.read_namespaced_job("flaky", "default").status)
    assert status.failed == 3
    assert [(c.type, c.reason, c.message) for c in status.conditions or []] == [
        ("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
        ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]
    assert len(pods_of(v1, "flaky")) == 3
    assert all(not p.metadata.finalizers for p in pods_of(v1, "flaky"))
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=flaky").stdout
    assert "BackoffLimitExceeded   job/flaky   Job has reached the specified backoff limit" in events


def test_a_fail_job_rule_ends_the_job_at_the_first_matching_exit_code(cluster: TestCluster,
                                                                      batch: client.BatchV1Api) -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In",
                                                              "values": [3]}}]}
    batch.create_namespaced_job("default", as_body(job("fatal", "crash", podFailurePolicy=policy)))
    wait_until(lambda: "Failed" in condition_types(batch, "fatal"), what="fatal failed")
    status = present(batch.read_namespaced_job("fatal", "default").status)
    failed = next(c for c in status.conditions or [] if c.type == "Failed")
    assert failed.reason == "PodFailurePolicy"
    assert failed.message.startswith("Container main for pod default/fatal-")
    assert failed.message.endswith("failed with exit code 3 matching FailJob rule at index 0")
    assert status.failed == 1


def test_a_job_the_server_refuses_gets_kube_apiservers_words(cluster: TestCluster) -> None:
    bad = job("bad", "ok")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    done = cluster.kubectl("apply", "-f", "-", input=json.dumps(bad))
    assert done.returncode == 1
    assert ('The Job "bad" is invalid: spec.template.spec.restartPolicy: Unsupported value: "Always": '
            'supported values: "OnFailure", "Never"') in done.stderr


def test_kubectl_create_job_sends_protobuf_the_server_reads(cluster: TestCluster,
                                                            batch: client.BatchV1Api) -> None:
    done = cluster.kubectl("create", "job", "one", "--image=busybox", "--", "sleep", "5")
    assert done.stdout == "job.batch/one created\n", done.stderr
    spec = present(batch.read_namespaced_job("one", "default").spec)
    container = present(spec.template.spec).containers[0]
    assert (container.name, container.image, container.command) == ("one", "busybox", ["sleep", "5"])
    assert (present(spec.template.spec).restart_policy, spec.backoff_limit) == ("Never", 6)


def test_kubectl_delete_job_takes_its_pods_while_a_bare_client_delete_orphans_them_with_a_warning(
        cluster: TestCluster, batch: client.BatchV1Api, v1: client.CoreV1Api) -> None:
    for name in ("gone", "kept"):
        batch.create_namespaced_job("default", as_body(job(name, "slow")))
    wait_until(lambda: pods_of(v1, "gone") and pods_of(v1, "kept"), what="the jobs' pods")
    assert cluster.kubectl("delete", "job", "gone").returncode == 0
    wait_until(lambda: not pods_of(v1, "gone"), what="gone's pods deleted")
    answer = cluster.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/kept")
    assert answer.status == 200
    assert answer.headers.get("Warning", "").endswith(
        '"child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to '
        'remove them or set propagationPolicy=Orphan to suppress this warning"')
    wait_until(lambda: not batch.list_namespaced_job("default").items, what="kept deleted")
    orphan = pods_of(v1, "kept")
    assert len(orphan) == 1 and not orphan[0].metadata.owner_references and not orphan[0].metadata.finalizers


def test_a_foreground_delete_waits_for_the_jobs_pods(cluster: TestCluster, batch: client.BatchV1Api,
                                                       v1: client.CoreV1Api) -> None:
    batch.create_namespaced_job("default", as_body(job("fore", "slow", parallelism=2)))
    wait_until(lambda: len(pods_of(v1, "fore")) == 2, what="two pods")
    done = cluster.kubectl("delete", "job", "fore", "--cascade=foreground", "--wait=true", timeout=90)
    assert done.returncode == 0, done.stderr
    assert not pods_of(v1, "fore")
    assert not batch.list_namespaced_job("default").items


def test_a_finished_job_with_a_ttl_is_deleted_with_its_pods(cluster: TestCluster, batch: client.BatchV1Api,
                                                            v1: client.CoreV1Api) -> None:
    batch.create_namespaced_job("default", as_body(job("brief", "ok", ttlSecondsAfterFinished=1)))
    wait_until(lambda: not batch.list_namespaced_job("default").items, timeout=20, what="brief expired")
    wait_until(lambda: not pods_of(v1, "brief"), what="brief's pod collected")


def test_the_downward_api_gives_a_label_or_nothing(cluster: TestCluster, v1: client.CoreV1Api) -> None:
    env = [{"name": "JOB", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}}},
           {"name": "MISSING", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['no-such-label']"}}},
           {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}}]
    manifest = job("reader", "slow")
    manifest["spec"]["template"]["metadata"]["annotations"] = {"note": "hi"}
    manifest["spec"]["template"]["spec"]["containers"][0]["env"] = env
    client.BatchV1Api(cluster.api_client()).create_namespaced_job("default", as_body(manifest))
    pod = wait_until(lambda: pods_of(v1, "reader"), what="reader's pod")[0]
    wait_until(lambda: v1.read_namespaced_pod(pod.metadata.name, "default").status.phase == "Running",
               what="running")
    seen = cluster.call(cluster.sim.container_env("default", pod.metadata.name))
    assert (seen["JOB"], seen["MISSING"], seen["NOTE"]) == ("reader", "", "hi")
    field_ref = pod.spec.containers[0].env[0].value_from.field_ref
    assert field_ref.api_version == "v1"


def test_a_label_map_without_a_key_is_not_a_valid_env_field(v1: client.CoreV1Api) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox", "env": [
        {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]}]}}
    with pytest.raises(ApiException) as refused:
        v1.create_namespaced_pod("default", as_body(pod))
    assert api_status(refused.value)["message"].startswith(
        'Pod "p" is invalid: spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: '
        '"metadata.labels": supported values: "metadata.name", "metadata.namespace"')


def test_the_jobs_pods_get_the_namespaces_limitrange_defaults_as_a_users_pod_does(
        cluster: TestCluster, v1: client.CoreV1Api) -> None:
    """The controller's creates go through mutating admission too (kube-controller-manager's pods are
    admitted like anyone's): a container without resources gets the LimitRange's defaults."""
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
              "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}}]}}
    v1.create_namespaced_limit_range("default", as_body(limits))
    client.BatchV1Api(cluster.api_client()).create_namespaced_job("default", as_body(job("shaped", "slow")))
    pod = wait_until(lambda: pods_of(v1, "shaped"), what="shaped's pod")[0]
    resources = pod.spec.containers[0].resources
    assert resources.limits == {"cpu": "500m", "memory": "256Mi"}
    assert resources.requests == {"cpu": "500m", "memory": "256Mi"}
    assert pod.metadata.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container main; "
        "cpu, memory limit for container main")
