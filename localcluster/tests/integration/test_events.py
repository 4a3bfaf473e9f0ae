"""Events as kubectl shows them: the scheduler's and the kubelet's, in `kubectl describe pod` and `kubectl get
events`, repeats aggregated into one event's count, and expiry after the event TTL."""

from __future__ import annotations

import json
import re
from typing import Any

from localcluster import TestCluster, wait_until

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: main
    image: nginx:1.25
"""


def event_rows(described: str) -> list[list[str]]:
    """The Events table of `kubectl describe`: [type, reason, age, from, message] per row."""
    rows = []
    for line in described.split("Events:", 1)[1].splitlines()[3:]:
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=4)
        if len(parts) == 5:
            rows.append(parts)
    return rows


def test_describe_shows_the_scheduler_and_the_kubelet_in_order(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(cpu_nodes=1)
    assert cluster.kubectl("apply", "-f", "-", input=POD).returncode == 0
    wait_until(lambda: "Started" in cluster.kubectl("describe", "pod", "web").stdout, what="Started event")
    rows = event_rows(cluster.kubectl("describe", "pod", "web").stdout)
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
        ("Normal", "Scheduled", "default-scheduler", "Successfully assigned default/web to cpu-1"),
        (
            "Normal",
            "Pulled",
            "kubelet",
            'spec.containers{main}: Container image "nginx:1.25" already present on machine and can be '
            "accessed by the pod",
        ),
        ("Normal", "Created", "kubelet", "spec.containers{main}: Created container: main"),
        ("Normal", "Started", "kubelet", "spec.containers{main}: Started container main"),
    ]
    listed = json.loads(
        cluster.kubectl(
            "get", "events", "--field-selector", "involvedObject.name=web,reason=Started", "-o", "json"
        ).stdout
    )["items"]
    assert [(e["source"], e["involvedObject"]["fieldPath"], e["count"]) for e in listed] == [
        ({"component": "kubelet", "host": "cpu-1"}, "spec.containers{main}", 1)
    ]
    assert cluster.kubectl("delete", "pod", "web").returncode == 0
    killing = cluster.kubectl("get", "events", "--field-selector", "reason=Killing").stdout.splitlines()
    assert killing[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert killing[1].split()[1:] == ["Normal", "Killing", "pod/web", "Stopping", "container", "main"]


def test_repeats_aggregate_into_one_event_with_a_count(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(cpu_nodes=1)
    assert cluster.kubectl("apply", "-f", "-", input=POD).returncode == 0
    wait_until(lambda: "Started" in cluster.kubectl("describe", "pod", "web").stdout, what="Started event")
    for _ in range(2):  # restartPolicy Always: the kubelet starts the container again
        cluster.call(cluster.runtime.exit_container("default", "web", 1))  # type: ignore[attr-defined]
    started = json.loads(
        cluster.kubectl("get", "events", "--field-selector", "reason=Started", "-o", "json").stdout
    )["items"]
    assert [e["count"] for e in started] == [3]
    rows = event_rows(cluster.kubectl("describe", "pod", "web").stdout)
    assert re.fullmatch(r"\d+s \(x3 over \d+s\)", next(r[2] for r in rows if r[1] == "Started"))


def test_unschedulable_pods_get_one_failed_scheduling_event_per_message(local_cluster: TestCluster) -> None:
    assert (
        local_cluster.kubectl("apply", "-f", "-", input=POD).returncode == 0
    )  # no GPU toleration, no CPU node
    wait_until(
        lambda: "FailedScheduling" in local_cluster.kubectl("get", "events").stdout, what="FailedScheduling"
    )
    rows = event_rows(local_cluster.kubectl("describe", "pod", "web").stdout)
    assert rows == [
        [
            "Warning",
            "FailedScheduling",
            rows[0][2],
            "default-scheduler",
            "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}. "
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
        ]
    ]


def test_events_expire_after_the_event_ttl(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(cpu_nodes=1, event_ttl=1.0)
    assert cluster.kubectl("apply", "-f", "-", input=POD).returncode == 0
    wait_until(lambda: "Started" in cluster.kubectl("get", "events").stdout, what="events recorded")
    wait_until(
        lambda: "No resources found" in cluster.kubectl("get", "events").stderr,
        timeout=10,
        what="events expired",
    )
    assert cluster.kubectl("get", "pod", "web").returncode == 0  # the pod itself stays
