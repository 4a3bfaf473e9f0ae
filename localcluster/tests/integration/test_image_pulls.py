"""Image pulls on simulated nodes as a user reads them (`kubectl get pods`, `kubectl get events`, `kubectl
describe pod`): a slow first pull per image and node, later pulls instant, and the kubelet's failures
(ErrImagePull then ImagePullBackOff, InvalidImageName, ErrImageNeverPull, CreateContainerConfigError)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body, present
from localcluster import PullTime, TestCluster, wait_until


def pod(name: str, image: str, node: str = "node-1", **container: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {
        "nodeName": node, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "main", "image": image, **container}]}}


def waiting(v1: client.CoreV1Api, name: str) -> Any:
    statuses = v1.read_namespaced_pod(name, "default").status.container_statuses or []
    return statuses[0].state.waiting if statuses else None


def waiting_for(v1: client.CoreV1Api, name: str, reason: str) -> Any:
    """The container's waiting state once it has `reason`, else None."""
    state = waiting(v1, name)
    return state if state is not None and state.reason == reason else None


def events(cluster: TestCluster, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the pod's events, oldest first, as `kubectl get events` lists them."""
    shown = cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}",
                            "--sort-by=.metadata.creationTimestamp", "-o",
                            "jsonpath={range .items[*]}{.type}|{.reason}|{.message}{'\\n'}{end}")
    assert shown.returncode == 0, shown.stderr
    return [(t, r, m) for t, r, m in (line.split("|", 2) for line in shown.stdout.splitlines())]


@pytest.fixture
def cluster(local_cluster_factory: Any) -> TestCluster:
    cluster: TestCluster = local_cluster_factory(pull_times=(PullTime("team/big", 6.0, 7 * 2**30),),
                                                 missing_images=("team/typo",))
    return cluster


def test_a_slow_first_pull_keeps_the_pod_creating_then_later_pulls_are_instant(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("first", "team/big:1")))
    creating = wait_until(lambda: (w := waiting(v1, "first")) is not None and w, what="a waiting container")
    assert creating.reason == "ContainerCreating"
    row = cluster.kubectl("get", "pod", "first", "--no-headers").stdout.split()
    assert row[1:3] == ["0/1", "ContainerCreating"]
    assert v1.read_namespaced_pod("first", "default").status.phase == "Pending"
    wait_until(lambda: v1.read_namespaced_pod("first", "default").status.phase == "Running", timeout=30,
               what="first running")
    found = events(cluster, "first")
    assert found[0] == ("Normal", "Pulling", 'Pulling image "team/big:1"')   # bound by nodeName: no Scheduled
    pulled = found[1]
    assert pulled[:2] == ("Normal", "Pulled")
    assert re.fullmatch(r'Successfully pulled image "team/big:1" in 6(?:\.\d+)?s \(6(?:\.\d+)?s including '
                        r"waiting\)\. Image size: 7516192768 bytes\.", pulled[2]), pulled[2]
    assert [r for _, r, _ in found[2:]] == ["Created", "Started"]
    # the image is on node-1 now; node-2 pulls it for itself
    v1.create_namespaced_pod("default", as_body(pod("second", "team/big:1")))
    v1.create_namespaced_pod("default", as_body(pod("elsewhere", "team/big:1", node="node-2")))
    wait_until(lambda: v1.read_namespaced_pod("second", "default").status.phase == "Running", what="second")
    assert ("Normal", "Pulled", 'Container image "team/big:1" already present on machine and can be accessed '
                                "by the pod") in events(cluster, "second")
    wait_until(lambda: v1.read_namespaced_pod("elsewhere", "default").status.phase == "Running", timeout=30,
               what="elsewhere")
    assert ("Normal", "Pulling", 'Pulling image "team/big:1"') in events(cluster, "elsewhere")


def test_a_missing_image_fails_to_pull_then_backs_off(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("typo", "team/typo:1")))
    first = wait_until(lambda: waiting_for(v1, "typo", "ErrImagePull"), what="ErrImagePull")
    assert first.message == ('rpc error: code = NotFound desc = failed to pull and unpack image '
                             '"docker.io/team/typo:1": failed to resolve reference "docker.io/team/typo:1": '
                             "docker.io/team/typo:1: not found")
    later = wait_until(lambda: waiting_for(v1, "typo", "ImagePullBackOff"), timeout=10,
                       what="ImagePullBackOff")
    assert later.message == f'Back-off pulling image "team/typo:1": ErrImagePull: {first.message}'
    described = cluster.kubectl("describe", "pod", "typo").stdout
    assert "Reason:       ImagePullBackOff" in described
    found = events(cluster, "typo")
    assert ("Warning", "Failed", f'Failed to pull image "team/typo:1": {first.message}') in found
    assert ("Warning", "Failed", "Error: ErrImagePull") in found
    assert ("Normal", "BackOff", 'Back-off pulling image "team/typo:1"') in found
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in found
    assert v1.read_namespaced_pod("typo", "default").status.phase == "Pending"


def test_an_invalid_reference_never_pulls(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("bad", "Ubuntu:22.04")))
    state = wait_until(lambda: waiting_for(v1, "bad", "InvalidImageName"), what="InvalidImageName")
    message = ('Failed to apply default image tag "Ubuntu:22.04": couldn\'t parse image reference '
               '"Ubuntu:22.04": invalid reference format: repository name (library/Ubuntu) must be lowercase')
    assert state.message == message
    assert cluster.kubectl("get", "pod", "bad", "--no-headers").stdout.split()[2] == "InvalidImageName"
    found = events(cluster, "bad")
    assert ("Warning", "InspectFailed", message) in found
    assert ("Warning", "Failed", "Error: InvalidImageName") in found
    assert not any(reason == "Pulling" for _, reason, _ in found)


def test_pull_policy_never_refuses_an_image_the_node_lacks(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("never", "team/big:2", imagePullPolicy="Never")))
    state = wait_until(lambda: waiting_for(v1, "never", "ErrImageNeverPull"), what="ErrImageNeverPull")
    assert state.message == 'Container image "team/big:2" is not present with pull policy of Never'


def test_a_missing_secret_key_waits_in_create_container_config_error(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    v1.create_namespaced_pod("default", as_body(pod("env", "busybox:1.36", env=env)))
    state = wait_until(lambda: waiting_for(v1, "env", "CreateContainerConfigError"),
                       what="CreateContainerConfigError")
    assert state.message == 'secret "creds" not found'
    creds = {"metadata": {"name": "creds"}, "stringData": {"other": "x"}}
    v1.create_namespaced_secret("default", as_body(creds))
    wait_until(lambda: waiting(v1, "env").message == "couldn't find key token in Secret default/creds",
               timeout=10, what="the missing key")
    missing = "couldn't find key token in Secret default/creds"
    assert ("Warning", "Failed", f"Error: {missing}") in events(cluster, "env")
    v1.patch_namespaced_secret("creds", "default", as_body({"stringData": {"token": "t"}}))
    wait_until(lambda: v1.read_namespaced_pod("env", "default").status.phase == "Running", timeout=10,
               what="env running once the key exists")
    assert present(v1.read_namespaced_pod("env", "default").status.container_statuses)[0].ready
