"""A pod deleted without grace hands its GPUs over at once, as on a real node, where the kubelet counts only
active pods' devices as taken: a pod created for the same GPUs right after (what the manager does when it
replaces a lost worker) starts, rather than being refused while the old pod's processes are still dying."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from kubeclient import as_body
from localcluster import TestCluster

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

# ignores SIGTERM, so only the kill at the end of the (zero) grace period stops it
STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)\n"
SHOW = "import os, time\nprint('devices=' + os.environ.get('NVIDIA_VISIBLE_DEVICES', ''), flush=True)\n" \
       "time.sleep(600)\n"


def _pod(name: str, script: str) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "2"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "main", "image": "python:3.11-slim",
                        "command": [sys.executable, "-c", script],
                        "resources": {"limits": gpus, "requests": gpus}}]}}


def _phase(api: client.CoreV1Api, name: str) -> tuple[str, str]:
    pod = api.read_namespaced_pod(name, "default")
    waiting = [str(s.state.waiting.message or s.state.waiting.reason)
               for s in pod.status.container_statuses or [] if s.state and s.state.waiting]
    return str(pod.status.phase), "; ".join(waiting)


def test_a_pod_deleted_without_grace_hands_its_gpus_to_the_next(
        local_cluster_factory: Callable[..., TestCluster]) -> None:
    cluster = local_cluster_factory(nodes=[2], runtime="process", gpu_taint=False)
    api = client.CoreV1Api(cluster.api_client())
    for round_ in range(3):  # the race is short: try it a few times
        old, new = f"old-{round_}", f"new-{round_}"
        api.create_namespaced_pod("default", as_body(_pod(old, STUBBORN)))
        deadline = time.monotonic() + 60
        while _phase(api, old)[0] != "Running":
            assert time.monotonic() < deadline, _phase(api, old)
            time.sleep(0.1)
        api.delete_namespaced_pod(old, "default", grace_period_seconds=0)
        api.create_namespaced_pod("default", as_body(_pod(new, SHOW)))
        deadline = time.monotonic() + 30
        while (state := _phase(api, new))[0] != "Running":
            assert time.monotonic() < deadline, f"{new} never ran: {state}"
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        while "devices=" not in (log := api.read_namespaced_pod_log(new, "default")):
            assert time.monotonic() < deadline, log
            time.sleep(0.1)
        assert sorted(log.split("devices=", 1)[1].split()[0].split(",")) == ["0", "1"]
        api.delete_namespaced_pod(new, "default", grace_period_seconds=0)
        deadline = time.monotonic() + 30
        while any(p.metadata.name == new for p in api.list_namespaced_pod("default").items):
            assert time.monotonic() < deadline
            time.sleep(0.1)
