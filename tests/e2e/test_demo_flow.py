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
from pathlib import Path
from typing import Any

import pytest
import yaml

from distributetrain import naming
from distributetrain.naming import job_selector
from localcluster import TestCluster, wait_until

REPO = Path(__file__).resolve().parents[2]
JOB = "train-6gpu"  # the job name manifests/DistributeTrain_Manager.yaml gives
ACCURACY_THRESHOLD = 0.85  # 3 epochs on the digits reach 0.93 here; one epoch only 0.81

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")]


def manager_manifest(command: str) -> str:
    pod: dict[str, Any] = yaml.safe_load((REPO / "manifests" / "DistributeTrain_Manager.yaml").read_text())
    container = pod["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "DT_COMMAND", "value": command}]
    return yaml.safe_dump(pod)


def pod_json(cluster: TestCluster, name: str) -> dict[str, Any] | None:
    done = cluster.kubectl("get", "pod", name, "-o", "json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_manager_manifest_trains_for_real(local_cluster_factory: Any) -> None:
    cluster: TestCluster = local_cluster_factory(nodes=[5, 3, 2], cpu_nodes=1, runtime="process")
    applied = cluster.kubectl("apply", "-f", str(REPO / "rbac"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PodTemplate.yaml"))
    assert applied.returncode == 0, applied.stderr
    applied = cluster.kubectl("apply", "-f", "-",
                              input=manager_manifest("python3 /opt/distributetrain/Train.py --epochs 3"))
    assert applied.returncode == 0, applied.stderr

    # Where the gang lands, seen while it runs: the worker with 5 GPUs on the 5-GPU node.
    worker = wait_until(lambda: pod_json(cluster, f"{JOB}-worker-0"), timeout=120, interval=0.5,
                        what="the worker pod created by the manager")
    assert worker["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "5"

    # Debugging it as a user would while it trains: exec into the chief and read the hostfile it was given.
    wait_until(lambda: (p := pod_json(cluster, f"{JOB}-chief")) and p["status"].get("phase") == "Running",
               timeout=300, interval=0.5, what="the chief to run")
    worker_ip = (pod_json(cluster, f"{JOB}-worker-0") or {})["status"]["podIP"]
    hostfile = cluster.kubectl("exec", f"{JOB}-chief", "--", "cat",
                               f"{naming.HOSTFILE_MOUNT_PATH}/{naming.HOSTFILE_KEY}")
    assert (hostfile.returncode, hostfile.stdout) == (0, f"{worker_ip} slots=5\n"), hostfile.stderr

    manager = wait_until(
        lambda: (p := pod_json(cluster, "distributetrain-manager"))
        and p["status"].get("phase") in ("Succeeded", "Failed") and p,
        timeout=900, interval=1.0, what="the manager pod to end")
    log = cluster.kubectl("logs", "distributetrain-manager", timeout=60).stdout
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
    assert len(re.findall(r"first_step_unix=\d+\.\d+", log)) == 1  # rank 0's, for bench/demo_phases.py

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
