"""The job's state as the manager shows it (jobstate.py) and the Events it records (events.py): pure."""

from __future__ import annotations

import datetime

import pytest

from distributetrain import naming
from distributetrain.observe import events, jobstate, progress
from distributetrain.observe.events import ObjectRef
from distributetrain.observe.jobstate import PodState

T0 = 1_800_000_000.0


def a_job() -> jobstate.JobState:
    state = jobstate.initial(job="train", namespace="ml", gpus=6, started_at=T0 - 2.0, now=T0)
    state = jobstate.with_pod(state, PodState("train-worker-0", "worker", "node-1", 5))
    state = jobstate.enter(state, jobstate.SCHEDULING, T0 + 1.0)
    state = jobstate.with_pod(state, PodState("train-chief", "chief", "node-3", 1))
    return jobstate.ready(state, ["train-worker-0"])


def test_phases_are_reached_once_and_final_phases_stay() -> None:
    state = a_job()
    state = jobstate.enter(state, jobstate.PLANNING, T0 + 2.0)  # a re-plan goes back
    state = jobstate.enter(state, jobstate.SCHEDULING, T0 + 3.0)
    assert state.reached == (("Planning", T0), ("Scheduling", T0 + 1.0))
    state = jobstate.enter(state, jobstate.FAILED, T0 + 4.0)
    assert jobstate.enter(state, jobstate.RUNNING, T0 + 5.0).phase == "Failed"
    assert state.since_start("Failed") == 6.0 and state.since_start("Running") is None
    with pytest.raises(ValueError, match="phase 'Done' is not one of Planning, Scheduling"):
        jobstate.enter(state, "Done", T0)


def test_gpus_held_and_workers_ready_follow_the_pods() -> None:
    state = a_job()
    assert (state.held, state.workers, state.workers_ready) == (6, 1, 1)
    state = jobstate.without_pods(state, ["train-worker-0"])
    assert (state.held, state.workers, state.workers_ready) == (1, 0, 0)
    assert jobstate.without_pods(state).held == 0


def test_the_first_step_is_the_first_progress_with_a_step() -> None:
    state = jobstate.with_progress(a_job(), progress.Progress(epoch=0, epochs=3), T0 + 5)
    assert state.first_step_at is None
    state = jobstate.with_progress(state, progress.Progress(step=1), T0 + 9)
    state = jobstate.with_progress(state, progress.Progress(step=7, loss=0.5), T0 + 12)
    assert state.first_step_at == T0 + 9
    assert state.progress == progress.Progress(epoch=0, epochs=3, step=7, loss=0.5)


def test_what_the_manager_pod_shows() -> None:
    state = jobstate.enter(a_job(), jobstate.RUNNING, T0 + 3.5)
    state = jobstate.with_progress(state, progress.Progress(epoch=2, epochs=20, loss=0.25), T0 + 4)
    state = jobstate.replace(state, plan=jobstate.plan_text([("node-1", 5), ("node-3", 1)], "node-3"))
    assert jobstate.pod_metadata(state) == {
        "labels": {naming.PHASE_LABEL: "Running"},
        "annotations": {
            "distributetrain.io/job": "train",
            "distributetrain.io/job-gpus": "6 requested, 6 held",
            "distributetrain.io/phase-times": "Planning +2.0s, Scheduling +3.0s, Running +5.5s",
            "distributetrain.io/plan": "5 on node-1, 1 on node-3 (chief)",
            "distributetrain.io/progress": "epoch 2 of 20, loss 0.2500"}}


def test_the_state_file_reads_back_and_refuses_anything_else() -> None:
    state = jobstate.with_progress(a_job(), progress.Progress(step=3, extra=(("val_loss", 0.5),)), T0)
    assert jobstate.loads(jobstate.dumps(state)) == state
    for text in ("", "{}", "[1]", '{"job": "x"}'):
        with pytest.raises(ValueError, match="not a job state"):
            jobstate.loads(text)


def test_an_event_as_client_go_records_it() -> None:
    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "train-worker-0", "namespace": "ml",
                                                           "uid": "u-1"}}
    now = datetime.datetime(2026, 11, 24, 12, 0, 5, 250000, tzinfo=datetime.UTC)
    body = events.event(ObjectRef.of(pod), reason=events.WORKER_FAILED, message="x" * 2000,
                        type=events.WARNING, instance="distributetrain-manager", now=now, sequence=3)
    assert body["metadata"]["namespace"] == "ml"
    assert body["metadata"]["name"].startswith("train-worker-0.")
    assert body["involvedObject"] == {"kind": "Pod", "namespace": "ml", "name": "train-worker-0",
                                      "uid": "u-1", "apiVersion": "v1"}
    assert (body["reason"], body["type"], len(body["message"])) == ("WorkerFailed", "Warning", 1024)
    assert body["source"] == {"component": "distributetrain-manager"}
    assert body["reportingComponent"] == "distributetrain-manager"
    assert body["reportingInstance"] == "distributetrain-manager"
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-11-24T12:00:05Z"
    later = events.event(ObjectRef.of(pod), reason="X", message="m", instance="i", now=now, sequence=4)
    assert later["metadata"]["name"] != body["metadata"]["name"]
    with pytest.raises(ValueError, match="neither Normal nor Warning"):
        events.event(ObjectRef.of(pod), reason="X", message="m", type="Error", instance="i", now=now)
