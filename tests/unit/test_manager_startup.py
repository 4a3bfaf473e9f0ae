"""The wait for a gang on two clocks (manager/startup.py): binding within --schedule-timeout, pulling and
starting within --start-timeout, and the kubelet's reasons that end the job at once."""

from __future__ import annotations

from typing import Any

from distributetrain import podstatus
from distributetrain.manager.startup import PULL_FAILURE_GRACE, StartWatch


def pod(name: str, *, node: str | None = None, ready: bool = False, waiting: tuple[str, str] | None = None,
        phase: str = "Pending") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if ready else phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    if waiting:
        status["containerStatuses"] = [{"name": "worker", "state": {"waiting": {"reason": waiting[0],
                                                                                  "message": waiting[1]}}}]
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}, "status": status}


def watch(**kwargs: Any) -> StartWatch:
    return StartWatch(("w0", "w1"), podstatus.is_ready, created=0.0, schedule_timeout=300.0,
                      start_timeout=1200.0, **kwargs)


def test_every_pod_ready_ends_the_wait() -> None:
    w = watch()
    assert w.observe({"w0": pod("w0", node="a"), "w1": pod("w1")}, 5.0) is None
    done = w.observe({"w0": pod("w0", node="a", ready=True), "w1": pod("w1", node="b", ready=True)}, 9.0)
    assert done is not None and done.failure is None


def test_a_slow_image_pull_is_not_a_scheduling_failure() -> None:
    w = watch()
    pulling = {"w0": pod("w0", node="a", waiting=("ContainerCreating", "")),
               "w1": pod("w1", node="b", ready=True)}
    assert w.observe(pulling, 1.0) is None
    # long past the schedule timeout, both bound: the start clock runs from binding
    assert w.observe(pulling, 900.0) is None
    late = w.observe(pulling, 1201.0)
    assert late is not None and not late.final
    assert "not started within --start-timeout (1200s)" in str(late.failure)


def test_a_pod_never_bound_times_out_on_the_schedule_clock() -> None:
    w = watch()
    pods = {"w0": pod("w0", node="a", ready=True), "w1": pod("w1")}
    assert w.observe(pods, 299.0) is None
    late = w.observe(pods, 300.0)
    assert late is not None and not late.final
    assert "not bound to a node within --schedule-timeout (300s)" in str(late.failure)
    assert w.wake_at() <= 300.0


def test_an_unparseable_image_ends_the_job_at_once() -> None:
    w = watch()
    bad = ("InvalidImageName", 'Failed to apply default image tag "Bad:Tag": couldn\'t parse image reference '
                               '"Bad:Tag": invalid reference format')
    outcome = w.observe({"w0": pod("w0", node="a", waiting=bad), "w1": pod("w1", node="b")}, 2.0)
    assert outcome is not None and outcome.final
    assert "pod w0: container worker: InvalidImageName: Failed to apply default image tag" in \
        str(outcome.failure)


def test_a_pull_that_keeps_failing_ends_the_job_and_one_that_recovers_does_not() -> None:
    failing = ("ErrImagePull", 'Failed to pull image "registry/base:typo": not found')
    backoff = ("ImagePullBackOff", 'Back-off pulling image "registry/base:typo"')
    w = watch()
    assert w.observe({"w0": pod("w0", node="a", waiting=failing), "w1": pod("w1", node="b")}, 10.0) is None
    assert w.wake_at() <= 10.0 + PULL_FAILURE_GRACE  # looked at again when the failing pull is final
    assert w.observe({"w0": pod("w0", node="a", waiting=backoff), "w1": pod("w1", node="b")}, 25.0) is None
    outcome = w.observe({"w0": pod("w0", node="a", waiting=backoff), "w1": pod("w1", node="b")}, 40.0)
    assert outcome is not None and outcome.final
    assert "could not be pulled for 30s (ImagePullBackOff" in str(outcome.failure)
    # a registry hiccup: the retry pulls, the clock of failures starts over
    w = watch()
    assert w.observe({"w0": pod("w0", node="a", waiting=failing), "w1": pod("w1", node="b")}, 10.0) is None
    assert w.observe({"w0": pod("w0", node="a", waiting=("ContainerCreating", "")),
                      "w1": pod("w1", node="b")}, 35.0) is None
    assert w.observe({"w0": pod("w0", node="a", waiting=failing), "w1": pod("w1", node="b")}, 50.0) is None


def test_progress_says_how_many_are_bound_and_which_are_starting_every_30s() -> None:
    w = watch()
    pods = {"w0": pod("w0", node="node-3", waiting=("ContainerCreating", "")), "w1": pod("w1")}
    assert w.observe(pods, 0.0) is None
    assert w.progress(pods, 10.0) is None
    line = w.progress(pods, 30.0)
    assert line == ("1 of 2 pod(s) bound to their nodes; starting (image pull, container start; "
                    "--start-timeout 1200s): w0 on node-3 for 30s (ContainerCreating)")
    assert w.progress(pods, 45.0) is None


def test_a_pod_that_ended_or_vanished_is_a_failure_to_re_plan() -> None:
    w = watch()
    assert w.observe({"w0": pod("w0", node="a")}, 1.0) == w.observe({"w0": pod("w0", node="a")}, 1.0)
    gone = w.observe({"w0": pod("w0", node="a")}, 1.0)
    assert gone is not None and gone.failure == "pod(s) w1 disappeared" and not gone.final
    failed = watch().observe({"w0": pod("w0", node="a", phase="Failed"), "w1": pod("w1")}, 1.0)
    assert failed is not None and not failed.final and "pod w0 on node a" in str(failed.failure)
