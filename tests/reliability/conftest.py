"""Fixtures and the report hook of the fault-matrix tests; the shared helpers are in reliability_support.py
(a module of its own, so test modules import it by a name no other conftest.py shadows). The manager runs
here: each cluster's `default` namespace gets the demo's Pod Security labels."""

import pytest
from reliability_support import managers, pytest_runtest_makereport, row

from demo_namespace import demo_namespace_labels

__all__ = ["managers", "pytest_runtest_makereport", "row"]


@pytest.fixture
def pod_security_labels() -> dict[str, str]:
    return demo_namespace_labels()
