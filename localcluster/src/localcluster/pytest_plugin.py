"""The local cluster's pytest fixtures. Registered through the `pytest11` entry point, so installing
`localcluster` gives every test suite these by name, each cluster new for its test and stopped after it:

    def test_x(local_cluster: TestCluster) -> None:      # nodes [5, 3, 2], simulated runtime, GPU taints on
        local_cluster.kubectl("get", "pods")

    def test_y(local_cluster_factory: Callable[..., TestCluster]) -> None:
        cluster = local_cluster_factory(nodes=[8, 8], runtime="process", cpu_nodes=1)  # any ClusterSpec field
        cluster = local_cluster_factory(behaviors=[(lambda pod: pod["metadata"]["name"].endswith("-chief"),
                                                    Behavior(log="done\\n", exit_code=0, exit_after=0.5))])

What a suite gives every cluster, by overriding these fixtures in its conftest.py:
- `local_cluster_images`: the ImageMap the process runtime runs images from (default: empty, so every image
  fails to pull, as on a node without a registry);
- `local_cluster_client_factory`: builds what `cluster.api_client()` returns from (url, ca_path, token), e.g.
  an official-client ApiClient (default: None; this package imports no Kubernetes client);
- `pod_security_labels`: labels put on each cluster's `default` namespace, e.g. Pod Security levels
  (default: none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from localcluster._internal.cluster.testcluster import ClientFactory, TestCluster, start_cluster
from localcluster._internal.runtime.images import ImageMap


@pytest.fixture
def local_cluster_images() -> ImageMap:
    """The images every cluster's process runtime can run; override to give your project's."""
    return ImageMap()


@pytest.fixture
def local_cluster_client_factory() -> ClientFactory | None:
    """What builds `cluster.api_client()` from (url, ca_path, token); override to use a client."""
    return None


@pytest.fixture
def pod_security_labels() -> dict[str, str]:
    """Labels put on the `default` namespace of every cluster a test starts; override to give some."""
    return {}


def _label_default_namespace(cluster: TestCluster, labels: dict[str, str]) -> None:
    body = json.dumps({"metadata": {"labels": labels}})
    answer = cluster.request("PATCH", "/api/v1/namespaces/default", body=body,
                             content_type="application/merge-patch+json")
    if answer.status != 200:
        raise RuntimeError(f"labelling namespace default with {labels}: {answer.status} {answer.body!r}")


@pytest.fixture
def local_cluster_factory(local_cluster_images: ImageMap, local_cluster_client_factory: ClientFactory | None,
                          pod_security_labels: dict[str, str]) -> Iterator[Callable[..., TestCluster]]:
    """`factory(**options)` starts a cluster (`start_cluster`'s options: nodes, runtime, gpu_taint, behaviors
    and any ClusterSpec field; cpu_nodes defaults to 0); every one is stopped when the test ends."""
    started: list[TestCluster] = []

    def factory(**options: Any) -> TestCluster:
        options.setdefault("images", local_cluster_images)
        options.setdefault("client_factory", local_cluster_client_factory)
        cluster = start_cluster(**options)
        started.append(cluster)
        if pod_security_labels:
            _label_default_namespace(cluster, dict(pod_security_labels))
        return cluster

    yield factory
    for cluster in started:
        cluster.close()


@pytest.fixture
def local_cluster(local_cluster_factory: Callable[..., TestCluster]) -> TestCluster:
    """A cluster of nodes with 5, 3 and 2 GPUs (tainted nvidia.com/gpu), simulated pods."""
    return local_cluster_factory()
