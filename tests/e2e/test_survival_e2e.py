"""A long training outlives what production does to its manager (issue 25), for real: the shipped manifests
on the local cluster with pods as processes (real sshd, horovodrun, Train.py with TensorFlow), and, while
the training runs, the API server refusing connections, then answering 429 with Retry-After, then the
manager's pod killed (SIGKILL, as an OOM kill or a lost node does it). The training never stops: every
epoch is trained once, in one run of the chief (no restart, no resume), the manager Job's next pod adopts
the job and the Job completes; then nothing is left but the kept chief.

One training for all three faults (e2e tests share trainings: each costs a minute of two cores). What a
user reads meanwhile is checked too: the manager says it is waiting for the API server, and the new
manager pod says it adopted the running job."""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from localcluster import TestCluster, wait_until
from user_manifests import JOB, MANAGER, apply, manager_ended, manager_manifest, manager_pod

from distributetrain import naming

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]

EPOCHS = 400  # about 0.5 s each here (6 ranks, 2 cores): long enough for the three faults
CHIEF = f"{JOB}-chief"
EPOCH_LINE = re.compile(r"\bepoch=(\d+) ")


def _chief_log(cluster: TestCluster) -> str:
    return cluster.kubectl("logs", CHIEF, timeout=60).stdout


def _epochs(cluster: TestCluster) -> list[int]:
    """The epochs rank 0 reported done, in order (`epoch=E loss=...` lines of Train.py's EpochLog)."""
    return [int(m.group(1)) for m in EPOCH_LINE.finditer(_chief_log(cluster))]


def _trained_past(cluster: TestCluster, epoch: int) -> int:
    return wait_until(lambda: max(_epochs(cluster), default=0) >= epoch and max(_epochs(cluster)),
                      timeout=600, interval=1.0, what=f"the training past epoch {epoch}")


def _job_pods(cluster: TestCluster) -> dict[str, str]:
    done = cluster.kubectl("get", "pods", "-l", naming.job_selector(JOB), "-o", "json")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in json.loads(done.stdout)["items"]}


def test_a_long_training_outlives_api_outages_and_a_killed_manager(manifests_cluster: TestCluster) -> None:
    cluster = manifests_cluster
    apply(cluster, manager_manifest(DT_COMMAND=f"python3 /opt/distributetrain/Train.py --epochs {EPOCHS}"))
    _trained_past(cluster, 3)
    pods = _job_pods(cluster)
    assert set(pods) == {CHIEF, f"{JOB}-worker-0"}

    # 1. connections refused for 20 s: beyond the 6 bounded attempts (~8 s) that used to end the job
    epoch = _trained_past(cluster, 0)
    with cluster.api_outage("refuse", seconds=20):
        time.sleep(21)
    after_refusal = _trained_past(cluster, epoch + 2)
    assert after_refusal > epoch + 1  # trained on meanwhile (it never needed the API)

    # 2. API Priority and Fairness throttling: 429 with Retry-After: 1 for 15 s
    with cluster.api_outage("429", seconds=15, retry_after=1):
        time.sleep(16)
    after_throttle = _trained_past(cluster, after_refusal + 2)

    # 3. the manager's pod killed outright: its Job (backoffLimit 6, exit 137 counted) starts another pod,
    # which adopts the job, the same pods, without touching the training
    first = manager_pod(cluster) or {}
    killed_at = time.monotonic()
    cluster.call(cluster.runtime.kill_pod(first, 0.0, reason="Error", message="killed by the test",
                                          conditions=[]))
    gone = first["metadata"]["uid"]
    second = wait_until(lambda: (p := manager_pod(cluster)) and p["metadata"]["uid"] != gone and p,
                        timeout=120, interval=0.5, what="the manager Job's next pod")
    second_name = second["metadata"]["name"]
    wait_until(lambda: "adopting the job" in cluster.kubectl("logs", second_name).stdout, timeout=180,
               interval=0.5, what="the new manager pod to adopt the job")
    adopted_after = time.monotonic() - killed_at
    print(f"manager SIGKILLed -> next pod adopted the job in {adopted_after:.1f} s")
    assert _trained_past(cluster, after_throttle + 1) > after_throttle

    # the training ends as it would have: the Job completes through its second pod
    pod, log = manager_ended(cluster)
    assert pod["metadata"]["uid"] == second["metadata"]["uid"]
    assert pod["status"]["phase"] == "Succeeded", log
    job = json.loads(cluster.kubectl("get", "job", MANAGER, "-o", "json").stdout)
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    assert job["status"].get("failed") == 1  # the killed pod, counted against backoffLimit, nothing more

    chief_log = _chief_log(cluster)
    assert _epochs(cluster) == list(range(1, EPOCHS + 1)), chief_log[-2000:]  # each epoch once, in order
    assert "resumed_from" not in chief_log  # one run of the training: never relaunched
    assert "final_accuracy=" in chief_log
    first_log = cluster.kubectl("logs", first["metadata"]["name"]).stdout
    assert "the API server has not answered" in first_log  # the outage said as it happened
    assert "deleting all it created" not in first_log
    # nothing left but the kept chief (same pod as before: never replaced)
    left = _job_pods(cluster)
    assert left == {CHIEF: pods[CHIEF]}
    for kind in ("secrets", "configmaps", "networkpolicies", "poddisruptionbudgets"):
        listed = cluster.kubectl("get", kind, "-l", naming.job_selector(JOB), "-o", "name")
        assert listed.stdout.strip() == "", f"{kind} left: {listed.stdout}"
