"""`localcluster fault ...` as a user runs it against a cluster that `localcluster up` started: an API outage
started and cleared while kubectl watches, the faults in force in `status`, a node's graceful shutdown, and
`up`'s image pull options."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from localcluster import kubectl_path, wait_until


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = str(Path(sys.executable).parent / "localcluster")
    return subprocess.run([command, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_faults_on_a_cluster_started_by_up(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    up = cli("up", "--nodes", "2,2", "--cpu-nodes", "0", "--dir", str(state), "--pull-time",
             "team/big=1s,1Ki", cwd=tmp_path)
    cache = tempfile.mkdtemp(prefix="kubectl-cache-")

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl_path(), "--cache-dir", cache, "--request-timeout", "10s", *args],
                              input=stdin, env={**os.environ, "KUBECONFIG": str(state / "kubeconfig")},
                              capture_output=True, text=True, timeout=60, check=False)

    def fault(*args: str) -> subprocess.CompletedProcess[str]:
        return cli("fault", *args, "--dir", str(state), cwd=tmp_path)

    try:
        assert up.returncode == 0, up.stderr
        started = fault("api", "--mode", "refuse", "--for", "60s")
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == "API outage (refuse: connections refused), 60 s left of 60 s"
        refused = kubectl("get", "pods")
        assert refused.returncode == 1 and "was refused" in refused.stderr
        status = cli("status", "--dir", str(state), cwd=tmp_path)
        assert status.returncode == 0, status.stdout
        assert "API (not answering)" in status.stdout and "fault: API outage (refuse" in status.stdout
        assert fault("status").stdout.startswith("API outage (refuse: connections refused), ")
        cleared = fault("api", "--clear")
        assert cleared.stdout.strip() == "API outage (refuse) ended; the API answers again"
        assert kubectl("get", "pods").returncode == 0
        assert fault("status").stdout.strip() == "no fault in force"
        assert fault("api", "--clear").stdout.strip() == "no API outage in force"

        storm = fault("api", "--mode", "429", "--retry-after", "2")
        assert storm.stdout.strip() == ("API outage (429: every request answered 429 TooManyRequests, "
                                        "Retry-After 2), until cleared")
        assert fault("api", "--clear").returncode == 0

        pod = ("apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec:\n  nodeName: node-1\n  tolerations: "
               "[{operator: Exists}]\n  containers:\n  - {name: main, image: 'team/big:1'}\n")
        assert kubectl("apply", "-f", "-", stdin=pod).returncode == 0
        wait_until(lambda: kubectl("get", "pod", "big", "-o", "jsonpath={.status.phase}").stdout == "Running",
                   timeout=30, what="big running")
        pulled = kubectl("get", "events", "--field-selector", "reason=Pulled", "-o",
                         "jsonpath={.items[0].message}").stdout
        assert pulled.startswith('Successfully pulled image "team/big:1" in 1')
        assert pulled.endswith("Image size: 1024 bytes.")

        shutdown = fault("shutdown", "node-1", "--grace-period", "2s", "--critical-grace-period", "1s")
        assert shutdown.returncode == 0, shutdown.stderr
        assert shutdown.stdout.splitlines() == [
            "node node-1 shut down gracefully (NotReady: node is shutting down)",
            "pod default/big: SIGTERM, grace period 1 s"]
        assert kubectl("get", "pod", "big", "-o", "jsonpath={.status.reason}").stdout == "Terminated"

        simulated = fault("freeze", "big")
        assert simulated.returncode == 2
        assert "freezing a pod needs pods that are processes (runtime='process'" in simulated.stderr
        assert fault("api").returncode == 2 and "give --mode" in fault("api").stderr
        unknown = fault("shutdown", "node-9")
        assert unknown.returncode == 2 and "node 'node-9' not found; the cluster's nodes: node-1, node-2" in \
            unknown.stderr
    finally:
        assert cli("down", "--dir", str(state), cwd=tmp_path).returncode == 0
    gone = fault("status")
    assert gone.returncode == 1 and "no local cluster answers" in gone.stderr
