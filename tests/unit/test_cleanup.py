"""The one guard every entry point runs under, where no cluster is needed: it only cleans up what is its."""

from __future__ import annotations

import io
from typing import Any, cast

import pytest

from distributetrain.errors import ApiUnreachable, Interrupted, WorkerFailed
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


def test_a_job_the_api_server_no_longer_answers_for_is_left_to_its_owner() -> None:
    said = io.StringIO()
    unreachable = cast(Kube, object())  # nothing can be deleted: the guard must not even try
    with pytest.raises(ApiUnreachable), cleanup.guard(unreachable, job="j", namespace="ns",
                                                      reporter=Reporter(said)):
        raise ApiUnreachable("watch pods: no event for 1800s")
    assert "its pods are left running with their owner" in said.getvalue()
    assert "deleting all it created" not in said.getvalue()


def test_a_stopped_manager_pod_of_a_job_leaves_the_running_job_to_the_next_pod() -> None:
    said = io.StringIO()
    with pytest.raises(Interrupted), cleanup.guard(cast(Kube, object()), job="j", namespace="ns",
                                                   reporter=Reporter(said), durable=True):
        raise Interrupted("SIGTERM", signal_number=15)
    assert "the job goes on, owned by the manager's Job, whose next pod adopts it" in said.getvalue()
