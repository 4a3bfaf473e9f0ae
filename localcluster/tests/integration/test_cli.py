"""`localcluster up|status|down` as a user runs them: a background server, a kubeconfig that real
kubectl uses, and nothing left behind after `down`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from localcluster import kubectl_path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = str(Path(sys.executable).parent / "localcluster")
    return subprocess.run([command, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def server_pids() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"localcluster\x00serve" in cmdline:
            found.add(int(entry.name))
    return found


def test_up_status_down_leaves_nothing_behind(tmp_path: Path) -> None:
    before = server_pids()
    pid = -1
    state = tmp_path / "cluster"
    up = cli("up", "--nodes", "4,2", "--dir", str(state), cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = state / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        pid = int((state / "pid").read_text())
        assert pid in server_pids() - before
        status = cli("status", "--dir", str(state), cwd=tmp_path)
        assert status.returncode == 0 and f"pid {pid}" in status.stdout
        with tempfile.TemporaryDirectory() as cache:
            nodes = subprocess.run(
                [
                    kubectl_path(),
                    "get",
                    "nodes",
                    "--cache-dir",
                    cache,
                    "-o",
                    "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu",
                ],
                env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        assert nodes.returncode == 0, nodes.stderr
        # one CPU node by default (no GPU resource at all), listed in key order as etcd does
        assert [line.split() for line in nodes.stdout.splitlines()] == [
            ["NAME", "GPU"],
            ["cpu-1", "<none>"],
            ["node-1", "4"],
            ["node-2", "2"],
        ]
        again = cli("up", "--dir", str(state), cwd=tmp_path)
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = cli("down", "--dir", str(state), cwd=tmp_path)
    assert down.returncode == 0 and "stopped" in down.stdout
    # other work on the machine may start its own servers meanwhile: ours is what must be gone
    assert pid not in server_pids()  # (a zombie awaiting its reaper has no command line)
    assert not state.exists()
    status = cli("status", "--dir", str(state), cwd=tmp_path)
    assert status.returncode == 1 and "no local cluster running" in status.stdout


def test_up_with_pod_security_defaults_and_a_hostname_label_suffix(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    bad = cli("up", "--pod-security", "enforce=strict", "--dir", str(state), cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("error: --pod-security 'enforce=strict': pod security default "
                                  "enforce=strict: expected privileged, baseline or restricted")
    up = cli("up", "--nodes", "1", "--cpu-nodes", "0", "--dir", str(state), "--pod-security",
             "enforce=baseline,audit=restricted", "--hostname-label-suffix", ".ec2.internal", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        with tempfile.TemporaryDirectory() as cache:
            def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
                return subprocess.run([kubectl_path(), "--cache-dir", cache, *args], input=stdin,
                                      env={**os.environ, "KUBECONFIG": str(state / "kubeconfig")},
                                      capture_output=True, text=True, timeout=60, check=False)
            hostname = "jsonpath={.metadata.labels.kubernetes\\.io/hostname}"
            label = kubectl("get", "node", "node-1", "-o", hostname)
            assert label.stdout == "node-1.ec2.internal"
            root = ("apiVersion: v1\nkind: Pod\nmetadata: {name: root}\nspec:\n  containers:\n"
                    "  - {name: main, image: busybox:1.36}\n")
            assert kubectl("apply", "-f", "-", stdin=root).returncode == 0  # baseline admits it
            privileged = root.replace("name: root", "name: priv").replace(
                "busybox:1.36}", "busybox:1.36, securityContext: {privileged: true}}")
            refused = kubectl("apply", "-f", "-", stdin=privileged)
            assert 'violates PodSecurity "baseline:latest": privileged' in refused.stderr
        log = (state / "server.log").read_text()
        audit = 'audit: pods "root" in namespace default: would violate PodSecurity "restricted:latest": '
        assert audit in log
    finally:
        assert cli("down", "--dir", str(state), cwd=tmp_path).returncode == 0


def test_default_dir_and_bad_nodes(tmp_path: Path) -> None:
    bad = cli("up", "--nodes", "4,x", cwd=tmp_path)
    assert bad.returncode == 2 and "--nodes" in bad.stderr
    assert not (tmp_path / ".local-cluster").exists()
    bad = cli("up", "--cpu-nodes", "-1", cwd=tmp_path)
    assert bad.returncode == 2 and "--cpu-nodes" in bad.stderr
    assert not (tmp_path / ".local-cluster").exists()
