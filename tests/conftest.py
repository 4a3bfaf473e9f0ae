"""What this project's tests give the local cluster's pytest fixtures (localcluster.pytest_plugin, loaded by
pytest because `localcluster` is installed): the official client for `cluster.api_client()`, and the
project's image map (scripts/local-cluster-images.yaml: our Dockerfiles, busybox and python as the host's).

def test_x(local_cluster):                      # nodes [5, 3, 2], sim runtime, GPU taints on
    v1 = kubernetes.client.CoreV1Api(local_cluster.api_client())
    local_cluster.kubectl("get", "pods")

def test_y(local_cluster_factory):
    cluster = local_cluster_factory(nodes=[8, 8], runtime="sim", gpu_taint=False, cpu_nodes=1,
                                    behaviors=[(lambda p: p["metadata"]["name"].endswith("-chief"),
                                                Behavior(log="done\\n", exit_code=0, exit_after=0.5))])

Where the manager runs (tests/integration, tests/e2e, tests/reliability) a conftest.py gives the plugin's
`pod_security_labels` the demo namespace's labels (demo_namespace.py).
"""

from __future__ import annotations

import pytest
from localcluster import ClientFactory, ImageMap

from apiclient import make_api_client
from project_images import project_images


@pytest.fixture
def local_cluster_client_factory() -> ClientFactory:
    return make_api_client


@pytest.fixture
def local_cluster_images() -> ImageMap:
    return project_images()
