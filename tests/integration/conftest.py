"""The manager runs here: each cluster's `default` namespace gets the demo's Pod Security labels."""

import pytest

from demo_namespace import demo_namespace_labels


@pytest.fixture
def pod_security_labels() -> dict[str, str]:
    return demo_namespace_labels()
