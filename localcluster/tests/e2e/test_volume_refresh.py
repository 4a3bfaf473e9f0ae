"""ConfigMap volumes take updates while the pod runs, as on a real cluster: after the kubelet's sync period
(here a short one, `volume_refresh`), every file of the volume changes at once; with the kubelet's own period,
an update of the pod object brings them at once; with refresh off, nothing else does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from hostimages import HOST_IMAGES_FILE
from localcluster import TestCluster, kubectl_path

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

Factory = Callable[..., TestCluster]
# prints both keys every 0.1 s, each read through the same `..data` (an atomic snapshot), with the time
READER = """
import os, time
while True:
    try:
        snapshot = os.path.join('/cfg', os.readlink('/cfg/..data'))
        a, b = (open(os.path.join(snapshot, k)).read() for k in ('a', 'b'))
        print(f'{time.time():.3f} a={a} b={b} link={os.readlink("/cfg/a")}', flush=True)
    except FileNotFoundError:
        pass  # the old snapshot was removed between readlink and open: read again
    time.sleep(0.1)
"""


class Kubectl(Protocol):
    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]: ...


def start(cluster: Kubectl) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1", "b": "1"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "python:3.11-slim",
                        "command": [sys.executable, "-c", READER],
                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}}
    for doc in (cm, pod):
        done = cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
        assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while "a=1 b=1" not in cluster.kubectl("logs", "reader").stdout:
        assert time.monotonic() < deadline, cluster.kubectl("describe", "pod", "reader").stdout
        time.sleep(0.2)


def update(cluster: Kubectl) -> float:
    done = cluster.kubectl("patch", "configmap", "cfg", "--type", "merge", "-p", '{"data":{"a":"2","b":"2"}}')
    assert done.returncode == 0, done.stderr
    return time.time()


def test_an_update_reaches_the_pod_within_the_sync_period_all_at_once(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[1], runtime="process", gpu_taint=False,
                                    runtime_options={"volume_refresh": 1.0})
    start(cluster)
    changed_at = update(cluster)
    deadline = time.monotonic() + 30
    while "a=2 b=2" not in (log := cluster.kubectl("logs", "reader").stdout):
        assert time.monotonic() < deadline, log[-2000:]
        time.sleep(0.2)
    lines = [line.split() for line in log.splitlines()]
    seen = [(float(t), a, b) for t, a, b, _ in lines]
    first_new = next(t for t, a, _ in seen if a == "a=2")
    assert first_new - changed_at < 3.0  # one sync period (1 s) and the reader's pace
    # never a mix of old and new, and the files are the kubelet's symlinks through ..data
    assert {(a, b) for _, a, b in seen} == {("a=1", "b=1"), ("a=2", "b=2")}
    assert {link for *_, link in lines} == {"link=..data/a"}


def test_an_update_of_the_pod_brings_the_changed_configmap_long_before_the_sync_period(
        local_cluster_factory: Factory) -> None:
    """The kubelet's own sync period (60 s, plus up to 30 s of jitter): a ConfigMap update waits for it,
    unless the pod object changes, which makes the kubelet sync the pod and remount its volumes now (an
    annotation, as a writer of the ConfigMap may set to have it seen at once)."""
    cluster = local_cluster_factory(nodes=[1], runtime="process", gpu_taint=False,
                                    runtime_options={"volume_refresh": 60.0})
    start(cluster)
    update(cluster)
    done = cluster.kubectl("annotate", "pod", "reader", "example.com/config-version=2")
    assert done.returncode == 0, done.stderr
    # 20 s: a third of the shortest periodic sync, so only the update can have brought it
    deadline = time.monotonic() + 20
    while "a=2 b=2" not in (log := cluster.kubectl("logs", "reader").stdout):
        assert time.monotonic() < deadline, log[-2000:]
        time.sleep(0.2)
    lines = [line.split() for line in log.splitlines()]
    assert {(a, b) for _, a, b, _ in lines} == {("a=1", "b=1"), ("a=2", "b=2")}
    # without another update of the pod, the next change waits for the periodic sync, 60 s or more after the
    # one the annotation caused
    assert cluster.kubectl("patch", "configmap", "cfg", "--type", "merge",
                           "-p", '{"data":{"a":"3","b":"3"}}').returncode == 0
    time.sleep(3)
    assert "a=3" not in cluster.kubectl("logs", "reader").stdout


def test_without_refresh_the_pod_keeps_what_it_started_with(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(nodes=[1], runtime="process", gpu_taint=False,
                                    runtime_options={"volume_refresh": 0})
    start(cluster)
    update(cluster)
    time.sleep(3)
    log = cluster.kubectl("logs", "reader").stdout
    assert "a=2" not in log and log.splitlines()[-1].split()[1:3] == ["a=1", "b=1"]


class UpCluster:
    """A cluster started by `localcluster up`, driven with the real kubectl."""

    def __init__(self, state: Path, cache: str) -> None:
        self.state, self.cache = state, cache

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl_path(), "--cache-dir", self.cache, *args], input=input,
                              env={**os.environ, "KUBECONFIG": str(self.state / "kubeconfig")},
                              capture_output=True, text=True, timeout=60, check=False)


def test_localcluster_up_takes_the_sync_period(tmp_path: Path) -> None:
    command = str(Path(sys.executable).parent / "localcluster")
    state = tmp_path / "cluster"
    up = subprocess.run([command, "up", "--runtime", "process", "--nodes", "1", "--cpu-nodes", "0",
                         "--no-gpu-taint", "--volume-refresh", "0.5", "--dir", str(state),
                         "--images", str(HOST_IMAGES_FILE)],
                        capture_output=True, text=True, timeout=120, check=False)
    try:
        assert up.returncode == 0, up.stderr
        with tempfile.TemporaryDirectory() as cache:
            cluster: Any = UpCluster(state, cache)
            start(cluster)
            update(cluster)
            deadline = time.monotonic() + 20
            while "a=2 b=2" not in (log := cluster.kubectl("logs", "reader").stdout):
                assert time.monotonic() < deadline, log[-2000:]
                time.sleep(0.2)
    finally:
        down = subprocess.run([command, "down", "--dir", str(state)], capture_output=True, text=True,
                              timeout=120, check=False)
        assert down.returncode == 0, down.stderr
