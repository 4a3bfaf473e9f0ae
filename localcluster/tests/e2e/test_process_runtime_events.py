"""The process runtime's kubelet events through the real API server, as `kubectl describe pod` and `kubectl
get events` show them: Pulled, Created, Started; BackOff for a crashing container; Unhealthy for failed
probes with the probe's own output; Killing for a liveness failure and on deletion; Failed for a container
that cannot be created; ErrImagePull, then ImagePullBackOff, for an image the cluster's image map does not
name."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body, present
from localcluster import TestCluster, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root"),
]

PY = sys.executable


@pytest.fixture
def cluster(local_cluster_factory: Callable[..., TestCluster]) -> TestCluster:
    return local_cluster_factory(
        nodes=[1],
        runtime="process",
        gpu_taint=False,
        runtime_options={"restart_backoff": 0.2, "max_backoff": 1.0},
    )


def pod(name: str, command: list[str] | None, restart: str = "Never", **container: Any) -> dict[str, Any]:
    main: dict[str, Any] = {"name": "main", "image": "python:3.11-slim", **container}
    if command is not None:
        main["command"] = command
    return {"metadata": {"name": name}, "spec": {"restartPolicy": restart, "containers": [main]}}


def events(v1: client.CoreV1Api, name: str) -> list[tuple[str | None, str | None, str | None]]:
    listed = v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    return [(e.type, e.reason, e.message) for e in listed]


def reasons(v1: client.CoreV1Api, name: str) -> list[str | None]:
    return [reason for _, reason, _ in events(v1, name)]


def test_a_started_then_deleted_pod_reads_like_a_kubelet(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("sleeper", ["sleep", "600"])))
    wait_until(lambda: "Started" in reasons(v1, "sleeper"), timeout=30, what="Started")
    assert events(v1, "sleeper") == [
        ("Normal", "Scheduled", "Successfully assigned default/sleeper to node-1"),
        ("Normal", "Pulled",
         'Container image "python:3.11-slim" already present on machine and can be accessed by the pod'),
        ("Normal", "Created", "Created container: main"),
        ("Normal", "Started", "Started container main"),
    ]
    v1.delete_namespaced_pod("sleeper", "default", grace_period_seconds=1)
    wait_until(lambda: "Killing" in reasons(v1, "sleeper"), timeout=30, what="Killing")
    assert events(v1, "sleeper")[-1] == ("Normal", "Killing", "Stopping container main")


def test_a_crashing_container_backs_off(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    crasher = pod("crasher", [PY, "-c", "raise SystemExit(3)"], "Always")
    created = v1.create_namespaced_pod("default", as_body(crasher))
    wait_until(lambda: "BackOff" in reasons(v1, "crasher"), timeout=30, what="BackOff")
    backoff = next(e for e in v1.list_namespaced_event("default", field_selector="reason=BackOff").items)
    assert (backoff.type, backoff.message) == (
        "Warning",
        f"Back-off restarting failed container main in pod crasher_default({created.metadata.uid})",
    )
    wait_until(
        lambda: (
            (next(e for e in v1.list_namespaced_event("default", field_selector="reason=BackOff").items).count
             or 0) >= 2
        ),
        timeout=30,
        what="the BackOff event counted again",
    )
    described = cluster.kubectl("describe", "pod", "crasher").stdout
    assert re.search(
        r"Warning\s+BackOff\s+\S+ \(x\d+ over \S+\)\s+kubelet\s+spec\.containers\{main\}: Back-off "
        r"restarting failed container main",
        described,
    ), described


def test_failing_probes_are_unhealthy_and_a_dead_container_is_killed(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    probe = {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 1}
    v1.create_namespaced_pod("default", as_body(pod("unready", ["sleep", "600"], readinessProbe=probe)))
    v1.create_namespaced_pod("default", as_body(pod("dead", ["sleep", "600"], "Always", livenessProbe=probe)))
    wait_until(lambda: "Unhealthy" in reasons(v1, "unready"), timeout=30, what="Unhealthy")
    ip = v1.read_namespaced_pod("unready", "default").status.pod_ip
    assert (
        "Warning",
        "Unhealthy",
        f"Readiness probe failed: dial tcp {ip}:9: connect: connection refused",
    ) in (events(v1, "unready"))
    wait_until(lambda: "Killing" in reasons(v1, "dead"), timeout=30, what="Killing after the liveness probe")
    found = events(v1, "dead")
    assert ("Normal", "Killing", "Container main failed liveness probe, will be restarted") in found
    assert any(m.startswith("Liveness probe failed: dial tcp") for _, r, m in found if r == "Unhealthy")


def test_a_container_that_cannot_be_created_fails_with_the_error(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("nocommand", None)))  # the host's files: no ENTRYPOINT
    wait_until(lambda: "Failed" in reasons(v1, "nocommand"), timeout=30, what="Failed")
    failed = [(t, m) for t, r, m in events(v1, "nocommand") if r == "Failed"]
    state = present(v1.read_namespaced_pod("nocommand", "default").status.container_statuses)[0].state.waiting
    assert state.reason == "CreateContainerError"
    assert failed == [("Warning", f"Error: {state.message}")]


def test_an_image_the_map_does_not_name_fails_to_pull_and_backs_off(cluster: TestCluster) -> None:
    v1 = client.CoreV1Api(cluster.api_client())
    v1.create_namespaced_pod("default", as_body(pod("unknown", ["true"], image="team/unknown:1.0")))

    def waiting() -> Any:
        statuses = v1.read_namespaced_pod("unknown", "default").status.container_statuses or []
        return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None

    first = wait_until(lambda: (w := waiting()) is not None and w.reason == "ErrImagePull" and w, timeout=30,
                       what="ErrImagePull")
    assert first.message == ('rpc error: code = NotFound desc = failed to pull and unpack image '
                             '"team/unknown:1.0": not found in the local cluster\'s image map (map it to a '
                             "Dockerfile or to the host's files: ClusterSpec(images=...), localcluster up "
                             "--images FILE)")
    later = wait_until(lambda: (w := waiting()) is not None and w.reason == "ImagePullBackOff" and w,
                       timeout=30, what="ImagePullBackOff")
    # since v1.32 the waiting message carries the failed pull's error (the event does not)
    assert later.message == f'Back-off pulling image "team/unknown:1.0": ErrImagePull: {first.message}'
    assert v1.read_namespaced_pod("unknown", "default").status.phase == "Pending"
    found = events(v1, "unknown")
    assert ("Normal", "Pulling", 'Pulling image "team/unknown:1.0"') in found
    assert ("Warning", "Failed", f'Failed to pull image "team/unknown:1.0": {first.message}') in found
    assert ("Warning", "Failed", "Error: ErrImagePull") in found
    assert ("Normal", "BackOff", 'Back-off pulling image "team/unknown:1.0"') in found
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in found
    assert "Pulled" not in reasons(v1, "unknown")
