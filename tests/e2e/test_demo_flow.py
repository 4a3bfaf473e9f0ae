"""The whole design, for real: the user's manifests on the local cluster with pods as processes.

`kubectl apply` of rbac/ and manifests/DistributeTrain_Manager.yaml (6 GPUs) on nodes of 5, 3 and 2 GPUs;
the manager pod (its own ServiceAccount, in-cluster config) plans, creates a worker with 5 GPUs and a chief
with 1, the chief runs horovodrun over real sshd and Train.py trains with real Horovod + TensorFlow; while it
does, `kubectl exec` into the chief reads the hostfile it was given.
The only change to the manifest is a shorter training (DT_COMMAND), which a user may set the same way.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from localcluster import TestCluster, wait_until
from user_manifests import JOB, apply, manager_ended, manager_manifest, pod_json, wait_for_phase

from distributetrain import naming
from distributetrain.naming import job_selector

ACCURACY_THRESHOLD = 0.85  # 3 epochs on the digits reach 0.93 here; one epoch only 0.81

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]


def test_manager_manifest_trains_for_real(manifests_cluster: TestCluster) -> None:
    cluster = manifests_cluster
    apply(cluster, manager_manifest(DT_COMMAND="python3 /opt/distributetrain/Train.py --epochs 3"))

    # Where the gang lands, seen while it runs: the worker with 5 GPUs on the 5-GPU node.
    worker = wait_until(lambda: pod_json(cluster, f"{JOB}-worker-0"), timeout=120, interval=0.5,
                        what="the worker pod created by the manager")
    assert worker["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "5"

    # Debugging it as a user would while it trains: exec into the chief and read the hostfile it was given.
    wait_for_phase(cluster, f"{JOB}-chief", ("Running",), timeout=300, what="the chief to run")
    worker_ip = (pod_json(cluster, f"{JOB}-worker-0") or {})["status"]["podIP"]
    hostfile = cluster.kubectl("exec", f"{JOB}-chief", "--", "cat",
                               f"{naming.HOSTFILE_MOUNT_PATH}/{naming.HOSTFILE_KEY}")
    assert (hostfile.returncode, hostfile.stdout) == (0, f"{worker_ip} slots=5\n"), hostfile.stderr

    manager, log = manager_ended(cluster)
    assert manager["status"]["phase"] == "Succeeded", log[-4000:]
    assert manager["spec"]["nodeName"] == "cpu-1"

    # Horovod: 6 ranks across the 2 pods, all ending with the same weights, and the model learned.
    checksums = dict(re.findall(r"rank=(\d+) size=6 weights_sha256=([0-9a-f]{64})", log))
    assert sorted(checksums) == [str(rank) for rank in range(6)], log[-4000:]
    assert len(set(checksums.values())) == 1, checksums
    accuracy = float(re.findall(r"final_accuracy=([0-9.]+)", log)[-1])
    assert accuracy >= ACCURACY_THRESHOLD

    # The log a user follows: the free GPUs per node, the plan, the pods and where, and no stray lines.
    said = re.findall(r"^\S+Z distributetrain: (.*)$", log, flags=re.MULTILINE)
    assert "  node-1  5            0          5     yes" in said
    assert "plan (attempt 1): 6 GPU(s) as 5 on node-1, 1 on node-3; chief 1 on node-3" in said
    assert "worker train-6gpu-worker-0 created on node-1 with 5 GPUs" in said
    assert (f"supervising job {JOB}: chief {JOB}-chief (node-3, 1 GPU), "
            f"workers {JOB}-worker-0 (node-1, 5 GPUs)") in said
    assert JOB not in log.splitlines()
    # the job pods ran as the base image's non-root account: the chief's ssh logged in to the worker as it
    assert re.search(r"ssh trainer@10\.\d+\.\d+\.\d+:2222 accepts the job key", log), log[-4000:]
    # rank 0's, for bench/measure/demo_phases.py
    assert len(re.findall(r"first_step_unix=\d+\.\d+", log)) == 1
    # the image vouches for its Horovod build (its runtime stage's DT_HOROVOD_BUILD_CHECKED reached the
    # chief): horovodrun ran without its per-launch build check, a TensorFlow import less in every start
    assert re.search(r"INFO starting: \S*python3? -m distributetrain\.chief\.horovodrun -np 6 ", log), \
        log[-4000:]

    # The chief ran on the 2-GPU node with 1 GPU, is kept Completed, and its log reads with kubectl.
    chief = pod_json(cluster, f"{JOB}-chief")
    assert chief is not None
    assert chief["status"]["phase"] == "Succeeded"
    assert chief["spec"]["nodeName"] == "node-3"
    assert chief["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert worker["spec"]["nodeName"] == "node-1"
    chief_log = cluster.kubectl("logs", f"{JOB}-chief").stdout
    assert f"final_accuracy={accuracy:.4f}" in chief_log

    # Every GPU given back: nothing of the job is left but the kept chief.
    left = cluster.kubectl("get", "pods,secrets,configmaps,networkpolicies", "-l", job_selector(JOB),
                           "-o", "name").stdout.split()
    assert left == [f"pod/{JOB}-chief"]
    free = cluster.kubectl("get", "pods", "-o", "json")
    running = [p["metadata"]["name"] for p in json.loads(free.stdout)["items"]
               if p["status"].get("phase") not in ("Succeeded", "Failed")]
    assert running == []
