"""`kubectl drain` of an elastic job's worker's node, for real (the process runtime: real sshd, horovodrun,
Horovod elastic, Train.py with TensorFlow on the CPU), beside test_pull_and_drain_faults.py's drains of
simulated pods. Nodes of 5, 5 and 2 GPUs: the 6-GPU job's worker of 5 on node-1, the chief's 1 on node-3,
room for a replacement on node-2.

`--min-gpus 1 --no-disruption-budget`: nothing refuses the eviction, so the worker gets what a drain gives
a pod - SIGTERM and its grace period, a DisruptionTarget condition - rather than the instant loss of a
deleted pod (test_recovery.py). The manager takes the worker out of the hostfile at once and places a
replacement on node-2; Horovod drops the leaving worker's ranks and grows back to 6 on the replacement. Two
moments: while the job starts (horovodrun launched, no step yet) and mid-training.

What a user checks: `kubectl drain` succeeds, the job exits 0, the training was back at 6 ranks after the
drain and ended there (one weights checksum on 6 ranks), every epoch was reported once, no job pod is left
on the drained node and nothing but the kept chief is left."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from reliability_support import (
    NEEDS_ROOT,
    Factory,
    ManagerThread,
    chief_epochs,
    count,
    final_checksums,
    free_gpus,
    held,
    kube_of,
    leftovers,
    pods_of,
    process_cluster,
    said_after,
    training_spec,
    wait_until,
)

# 6 ranks train ~2 epochs a second on the 2-core machine, the chief's rank alone ~10; growing back takes
# 15-40 s (the replacement's ranks start TensorFlow): the training outlasts the drain and ends at 6 ranks
EPOCHS = 200
MOMENTS = {
    # horovodrun launched: its ranks import TensorFlow and form the first ring
    "start-up": r"INFO starting: .*horovodrun",
    # a step of the third epoch or so is under way when the eviction lands
    "mid-training": r"^epoch=2 ",
}


def _drain(cluster: Any, node: str) -> tuple[int, str]:
    # --force: the job's pods name the manager as owner but not as controller (kubectl drain's "cannot
    # delete Pods that declare no controller"); they are still evicted through the eviction API
    drained = cluster.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                              "--timeout=180s", timeout=240)
    return drained.returncode, drained.stdout + drained.stderr


@pytest.mark.e2e
@pytest.mark.root
@NEEDS_ROOT
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_elastic_job_survives_a_drain_of_its_workers_node(local_cluster_factory: Factory,
                                                          row: Callable[..., Any], moment: str) -> None:
    cluster = process_cluster(local_cluster_factory, [5, 5, 2])
    kube = kube_of(cluster)
    before = free_gpus(kube)
    manager = ManagerThread(kube, training_spec(EPOCHS, min_gpus="1", disruption_budget="false")).start()
    wait_until(lambda: manager.recorder.chief_first(MOMENTS[moment]), timeout=300, every=0.2,
               message=f"{MOMENTS[moment]!r} in the chief's log:\n" + manager.recorder.text[-4000:])
    node = str(pods_of(kube, "train")["train-worker-0"]["spec"]["nodeName"])
    assert node == "node-1"

    drain_at = time.monotonic()
    drained, said = _drain(cluster, node)
    assert drained == 0, said
    assert "pod/train-worker-0 evicted" in said
    detected = said_after(manager, r"worker train-worker-0 on node-1 \(.*\) lost", drain_at, 60)
    joined = said_after(manager, r"worker train-worker-\d+ Ready on node-2 .*the job holds 6 of 6", drain_at,
                        120)
    full = said_after(manager, r"training runs on 6 of 6 GPU\(s\)", joined, 300)

    code = manager.join(timeout=600)
    text = manager.recorder.text
    assert code == 0, text[-8000:]
    checksums = final_checksums(manager, 6)  # ended at 6 ranks, all holding the same weights
    assert sorted(checksums, key=int) == [str(r) for r in range(6)], text[-4000:]
    assert len(set(checksums.values())) == 1, checksums
    epochs = chief_epochs(manager)
    assert epochs == list(range(1, EPOCHS + 1)), epochs  # every epoch once: none lost, none redone
    on_node = [n for n, p in pods_of(kube, "train").items() if p["spec"].get("nodeName") == node]
    assert on_node == []
    left = leftovers(kube, "train")
    assert left == {"pods": ["train-chief"]}, left
    after = free_gpus(kube)
    assert after == before  # the drained node's GPUs too: free, behind its cordon
    sizes = [line for _, line in manager.recorder.chief_lines if line.startswith("elastic size=")]
    relaunches = len(re.findall(r"relaunching the training", text))
    when = "while the job starts" if moment == "start-up" else "mid-training"
    row(f"`kubectl drain` of the worker's node {when}, elastic (--min-gpus 1 --no-disruption-budget)",
        outcome=f"evicted, replaced on node-2, back to 6 ranks; exit {code}", exit_code=code,
        detect_s=round(detected - drain_at, 3), objects_left=count(left) - 1, gpus_held=held(before, after),
        runtime="process",
        notes=(f"replacement Ready {joined - drain_at:.1f} s after the drain began, 6 GPUs training again "
               f"{full - drain_at:.1f} s; every epoch 1-{EPOCHS} once; {relaunches} relaunch(es); "
               "one checksum on 6 ranks"),
        extra={"replacement_ready_s": joined - drain_at, "full_size_s": full - drain_at, "sizes": sizes,
               "relaunches": relaunches})
