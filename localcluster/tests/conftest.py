"""What this suite gives the plugin's fixtures (localcluster.pytest_plugin): the official client for
`cluster.api_client()`, and the host images its pods run (hostimages.py)."""

from __future__ import annotations

import pytest

from hostimages import HOST_IMAGES
from kubeclient import make_api_client
from localcluster import ClientFactory, ImageMap


@pytest.fixture
def local_cluster_client_factory() -> ClientFactory:
    return make_api_client


@pytest.fixture
def local_cluster_images() -> ImageMap:
    return HOST_IMAGES
