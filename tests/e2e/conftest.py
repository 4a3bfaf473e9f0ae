"""The manager runs here: each cluster's `default` namespace gets the demo's Pod Security labels.

The shared set-ups are modules of their own, imported here so every test module of this folder gets their
fixtures: the job pods without Kubernetes (local_pods.py: `pods`, `trained`) and the shipped manifests'
cluster (user_manifests.py: `manifests_cluster`)."""

import pytest
from local_pods import pods, trained
from user_manifests import manifests_cluster

from demo_namespace import demo_namespace_labels

__all__ = ["manifests_cluster", "pods", "trained"]


@pytest.fixture
def pod_security_labels() -> dict[str, str]:
    return demo_namespace_labels()
