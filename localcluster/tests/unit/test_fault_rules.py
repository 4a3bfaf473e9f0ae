"""The pure parts of the production faults: what an API outage answers (doubles/apioutage.py), how a
graceful node shutdown groups pods and times them, and what the node and its pods then read
(doubles/nodeshutdown.py), which processes a freeze or throttle picks (runtime/processfaults.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from localcluster import InvalidInput
from localcluster._internal.doubles import apioutage, nodeshutdown
from localcluster._internal.doubles.nodeshutdown import PodKill, ShutdownGroup, ShutdownPeriods
from localcluster._internal.runtime.processfaults import command_line, container_processes, selected


# ---- API outages ------------------------------------------------------------------------------------------
def test_an_outage_is_checked_and_429_defaults_to_apfs_first_retry_after() -> None:
    assert apioutage.checked("429", 60.0, None) == apioutage.Outage("429", 60.0, 1)
    assert apioutage.checked("refuse", None, None) == apioutage.Outage("refuse", None, None)
    with pytest.raises(InvalidInput, match="expected one of refuse, hang, 429, 503"):
        apioutage.checked("down", None, None)
    with pytest.raises(InvalidInput, match="more than 0 seconds"):
        apioutage.checked("hang", 0.0, None)


def test_429_answers_as_priority_and_fairness_rejects_a_request() -> None:
    answer = apioutage.too_many_requests(3)
    assert answer.status == 429
    assert answer.body == b"Too many requests, please try again later.\n"   # Go's http.Error: text, no Status
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert answer.headers["Retry-After"] == "3"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["X-Kubernetes-PF-FlowSchema-UID"]
    assert answer.headers["X-Kubernetes-PF-PriorityLevel-UID"]


def test_503_is_a_service_unavailable_status() -> None:
    error = apioutage.unavailable(5)
    assert error.body() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "the server is currently unable to handle the request",
                            "reason": "ServiceUnavailable", "details": {"retryAfterSeconds": 5}, "code": 503}
    assert error.headers == {"Retry-After": "5"}
    assert json.dumps(apioutage.unavailable(None).body())  # no Retry-After unless asked
    assert apioutage.unavailable(None).headers == {}


@pytest.mark.parametrize(("path", "probe"), [("/readyz", True), ("/healthz/etcd", True), ("/livez", True),
                                              ("/api/v1/pods", False), ("/readyzz", False)])
def test_only_the_health_probes_are_exempt_from_a_429_storm(path: str, probe: bool) -> None:
    assert apioutage.is_probe(path) is probe


def test_an_outage_says_what_it_is_and_how_long_it_has_left() -> None:
    outage = apioutage.Outage("refuse", 60.0, None, started=time.monotonic() - 15)
    assert outage.describe() == "API outage (refuse: connections refused), 45 s left of 60 s"
    assert apioutage.Outage("429", None, 2).describe() == (
        "API outage (429: every request answered 429 TooManyRequests, Retry-After 2), until cleared")


# ---- graceful node shutdown -------------------------------------------------------------------------------
def pod(name: str, *, priority: int | None = None, grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": "node-1"}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_pods_are_grouped_by_priority_and_each_gets_the_shorter_grace_period() -> None:
    pods = [pod("train", grace=600), pod("quick", grace=5),
            pod("important", priority=1_000_000_000, grace=60), pod("dns", priority=2_000_000_000, grace=30),
            pod("node-critical", priority=2_000_001_000, grace=3), pod("low", priority=-10)]
    assert nodeshutdown.plan(ShutdownPeriods(30.0, 10.0), pods) == [
        ShutdownGroup(0, 20.0, (PodKill("default", "train", 20.0), PodKill("default", "quick", 5.0),
                                PodKill("default", "important", 20.0), PodKill("default", "low", 20.0))),
        ShutdownGroup(2_000_000_000, 10.0, (PodKill("default", "dns", 10.0),
                                            PodKill("default", "node-critical", 3.0)))]


def test_shutdown_periods_are_checked_as_the_kubelet_configuration() -> None:
    assert ShutdownPeriods(30.0, 0.0).groups() == [(0, 30.0), (2_000_000_000, 0.0)]
    with pytest.raises(InvalidInput, match="shutdownGracePeriod 0 s"):
        ShutdownPeriods(0.0, 0.0)
    with pytest.raises(InvalidInput, match="shutdownGracePeriodCriticalPods 40 s"):
        ShutdownPeriods(30.0, 40.0)


def test_a_node_shutting_down_reads_not_ready_tainted_and_refuses_pods() -> None:
    node: dict[str, Any] = {
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "kubelet is posting ready status",
                                   "lastTransitionTime": "then"}]}}
    assert nodeshutdown.refusal({}, node) is None
    nodeshutdown.mark_shutting_down(node, "now")
    ready = node["status"]["conditions"][0]
    assert (ready["status"], ready["reason"], ready["message"], ready["lastTransitionTime"]) == (
        "False", "KubeletNotReady", "node is shutting down", "now")
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        ("nvidia.com/gpu", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute")]
    assert nodeshutdown.refusal({}, node) == (
        "NodeShutdown", "Pod was rejected as the node is shutting down.")
    assert nodeshutdown.disruption_condition() == {
        "type": "DisruptionTarget", "status": "True", "lastProbeTime": None, "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown."}


# ---- which processes a freeze or throttle picks -----------------------------------------------------------
def test_a_match_picks_the_matching_processes_and_what_they_started() -> None:
    # sh -> (sleep 101, python -c ... -> sleep 102): `python` picks the python process and its child
    script = "import subprocess; subprocess.run(['sleep', '102'])"
    tree = subprocess.Popen(["sh", "-c", f'sleep 101 & "{sys.executable}" -c "{script}" & wait'])
    try:
        deadline = time.monotonic() + 10
        while "sleep 102" not in map(command_line, container_processes(tree.pid, own_namespace=False)):
            assert time.monotonic() < deadline, "the process tree did not start"
            time.sleep(0.05)
        everything = container_processes(tree.pid, own_namespace=False)
        assert everything[0] == tree.pid and len(everything) == 4
        # as pgrep -f: the pattern is searched in the whole command line (the shell's names python too)
        assert len(selected(everything, re.compile("python"))) == 4
        picked = [command_line(p) for p in selected(everything, re.compile(r"^\S*python\S* -c"))]
        assert sorted(picked) == sorted([f"{sys.executable} -c {script}", "sleep 102"])
        assert selected(everything, None) == everything
    finally:
        for pid in reversed(container_processes(tree.pid, own_namespace=False)):  # ours, by PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        tree.wait()
