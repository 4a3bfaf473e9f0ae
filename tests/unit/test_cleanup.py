"""The one guard every entry point runs under, where no cluster is needed: it only cleans up what is its."""

from __future__ import annotations

import io
from typing import Any, cast

import pytest

from distributetrain.errors import WorkerFailed
from distributetrain.kube.gateway import Kube
from distributetrain.manager import cleanup
from distributetrain.observe.joblog import Reporter


def test_a_failure_before_anything_was_created_propagates_untouched() -> None:
    said = io.StringIO()
    never_called = cast(Kube, object())  # a disarmed guard must not talk to the cluster at all
    with pytest.raises(WorkerFailed, match="boom"), cleanup.guard(
            never_called, job="j", namespace="ns", reporter=Reporter(said), armed=lambda: False):
        raise WorkerFailed("boom")
    assert said.getvalue() == ""


def test_the_guarded_body_returns_its_value() -> None:
    def body() -> Any:
        with cleanup.guard(cast(Kube, object()), job="j", namespace="ns", reporter=Reporter(io.StringIO())):
            return 7
    assert body() == 7
