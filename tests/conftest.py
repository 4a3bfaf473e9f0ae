"""Shared fixtures: a real local cluster (HTTPS API server, simulated kubelets by default) per test.

def test_x(local_cluster):                      # nodes [5, 3, 2], sim runtime, GPU taints on
    v1 = kubernetes.client.CoreV1Api(local_cluster.api_client())
    local_cluster.kubectl("get", "pods")

def test_y(local_cluster_factory):
    cluster = local_cluster_factory(nodes=[8, 8], runtime="sim", gpu_taint=False, cpu_nodes=1,
                                    behaviors=[(lambda p: p["metadata"]["name"].endswith("-chief"),
                                                Behavior(log="done\\n", exit_code=0, exit_after=0.5))])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from apiclient import make_api_client
from localcluster._internal.cluster.testcluster import TestCluster, start_cluster


@pytest.fixture
def pod_security_labels() -> dict[str, str]:
    """Labels put on the `default` namespace of every cluster a test starts: none here; where the manager runs
    (tests/integration, tests/e2e, tests/reliability) a conftest.py gives the demo's (demo_namespace.py)."""
    return {}


@pytest.fixture
def local_cluster_factory(pod_security_labels: dict[str, str]) -> Iterator[Callable[..., TestCluster]]:
    started: list[TestCluster] = []

    def factory(**options: Any) -> TestCluster:
        cluster = start_cluster(client_factory=make_api_client, **options)
        started.append(cluster)
        if pod_security_labels:
            client.CoreV1Api(cluster.api_client()).patch_namespace(
                "default", {"metadata": {"labels": dict(pod_security_labels)}})
        return cluster

    yield factory
    for cluster in started:
        cluster.close()


@pytest.fixture
def local_cluster(local_cluster_factory: Callable[..., TestCluster]) -> TestCluster:
    return local_cluster_factory()
