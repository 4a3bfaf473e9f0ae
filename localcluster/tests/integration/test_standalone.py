"""localcluster used as a tool by someone else's project: a script in a scratch directory outside any
checkout, run there by the environment's interpreter, imports only the public API, starts a cluster, runs a
pod to its end and reads its log through the real kubectl, then stops the cluster, leaving nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import localcluster

SCRIPT = """\
import json, os, sys
import localcluster
from localcluster import Behavior, ImageMap, ImageMapping, start_cluster, wait_until

runtime = sys.argv[1]
cluster = start_cluster(
    nodes=[1], runtime=runtime, gpu_taint=False,
    images=ImageMap((ImageMapping.host("busybox"),)),    # this script's own image map: busybox is the host's
    behaviors=[(lambda pod: True, Behavior(log="hello from hello\\n", exit_code=0, exit_after=0.2))])
try:
    ran = cluster.kubectl("run", "hello", "--image", "busybox:1.36", "--restart", "Never", "--",
                          "/bin/sh", "-c", "echo hello from $(hostname)")
    assert ran.returncode == 0, ran.stderr
    def ended():
        phase = cluster.kubectl("get", "pod", "hello", "-o", "jsonpath={.status.phase}").stdout
        return phase if phase in ("Succeeded", "Failed") else None
    phase = wait_until(ended, timeout=60, what="the pod to end")
    log = cluster.kubectl("logs", "hello").stdout
    state = cluster.cluster.dir
finally:
    cluster.close()
print(json.dumps({"module": localcluster.__file__, "cwd": os.getcwd(), "phase": phase, "log": log,
                  "state_left": os.path.exists(state)}))
"""


@pytest.mark.parametrize("runtime", [
    "sim",
    pytest.param("process", marks=[pytest.mark.e2e, pytest.mark.root, pytest.mark.skipif(
        os.geteuid() != 0, reason="network, mount and PID namespaces need root")]),
])
def test_a_script_outside_any_checkout_runs_a_pod_on_its_own_cluster(tmp_path: Path, runtime: str) -> None:
    scratch = tmp_path / "elsewhere"
    scratch.mkdir()
    (scratch / "try_localcluster.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KUBECONFIG")}
    done = subprocess.run([sys.executable, "try_localcluster.py", runtime], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    # the installed package, found by the interpreter from a directory that holds nothing of it
    assert Path(result["module"]) == Path(localcluster.__file__)
    assert result["cwd"] == str(scratch)
    assert (result["phase"], result["log"]) == ("Succeeded", "hello from hello\n")
    assert result["state_left"] is False  # stopped: its state directory is gone
    assert [p.name for p in scratch.iterdir()] == ["try_localcluster.py"]  # nothing written where it ran
