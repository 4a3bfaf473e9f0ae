"""Fixtures and the report hook of the fault-matrix tests; the shared helpers are in reliability_support.py
(a module of its own, so test modules import it by a name no other conftest.py shadows)."""

from reliability_support import managers, pytest_runtest_makereport, row

__all__ = ["managers", "pytest_runtest_makereport", "row"]
