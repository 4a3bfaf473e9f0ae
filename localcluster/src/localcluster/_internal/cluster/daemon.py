"""The local cluster as a background process: start `python -m localcluster serve` in its own
session and return once /readyz answers over HTTPS, verified with the cluster's CA.

Used by `localcluster up` (cli.py) and by whoever measures the server as its own process (`start_daemon`).
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from localcluster._internal.errors import StartFailed

MODULE = "localcluster"
DEFAULT_DIR = Path(".local-cluster")   # where `localcluster up` keeps a cluster's files
# what `serve` writes into its directory; removed before a start so a stale file never passes for readiness
STATE_FILES = ("url", "pid", "kubeconfig", "notices", "control.sock")


def ready_url(directory: Path) -> str | None:
    """The server URL when /readyz answers ok over verified HTTPS, else None."""
    try:
        url = (directory / "url").read_text().strip()
        if not url:  # read between the file's creation and its write
            return None
        context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
        with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=2) as response:
            return url if response.status == 200 else None
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return None


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def serve_command(directory: Path, *, nodes: Sequence[int], cpu_nodes: int = 0, runtime: str = "sim",
                  port: int = 0, gpu_taint: bool = True, pod_security: str = "",
                  hostname_label_suffix: str = "", network_policy: bool = True,
                  volume_refresh: float | None = None, node_link: str = "",
                  images: Path | None = None, pull_times: Sequence[str] = (),
                  missing_images: Sequence[str] = (), openshift: bool = False,
                  node_pools: Sequence[str] = (), autoscaler_delay: float | None = None,
                  scale_down_unneeded_time: float | None = None, provisioning_requests: bool = False,
                  kueue: bool = False, kueue_manage_all: bool = False, fabric: str = "") -> list[str]:
    command = [sys.executable, "-m", MODULE, "serve", "--dir", str(directory), "--nodes",
               ",".join(map(str, nodes)), "--cpu-nodes", str(cpu_nodes), "--runtime", runtime,
               "--port", str(port)]
    if pod_security:
        command += ["--pod-security", pod_security]
    if hostname_label_suffix:
        command += ["--hostname-label-suffix", hostname_label_suffix]
    if node_link:
        command += ["--node-link", node_link]
    if images is not None:
        command += ["--images", str(images)]
    for pull_time in pull_times:
        command += ["--pull-time", pull_time]
    for pattern in missing_images:
        command += ["--missing-image", pattern]
    if fabric:
        command += ["--fabric", fabric]
    command += [] if gpu_taint else ["--no-gpu-taint"]
    command += ["--openshift"] if openshift else []
    if volume_refresh is not None:
        command += ["--volume-refresh", f"{volume_refresh:g}"]
    command += [arg for pool in node_pools for arg in ("--node-pool", pool)]
    if autoscaler_delay is not None:
        command += ["--autoscaler-delay", f"{autoscaler_delay:g}"]
    if scale_down_unneeded_time is not None:
        command += ["--scale-down-unneeded-time", f"{scale_down_unneeded_time:g}"]
    command += ["--provisioning-requests"] if provisioning_requests else []
    command += ["--kueue"] if kueue else []
    command += ["--kueue-manage-jobs-without-queue-name"] if kueue_manage_all else []
    return command if network_policy else [*command, "--no-network-policy"]


def start_daemon(command: Sequence[str], *, directory: Path, log: Path,
          timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """Start `command` (from serve_command) in its own session, its output appended to `log`; return the
    process and the server URL once it is ready. A server that exits or stays unready is stopped and reported
    with the end of its log."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in STATE_FILES:
        with contextlib.suppress(FileNotFoundError):
            (directory / stale).unlink()
    with log.open("ab") as out:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StartFailed(f"the local cluster exited with code {process.returncode} while "
                                       f"starting; last lines of {log}:\n{tail(log)}")
        url = ready_url(directory) if (directory / "kubeconfig").exists() else None
        if url:
            return process, url
        time.sleep(0.2)
    process.terminate()
    raise StartFailed(f"the local cluster did not answer /readyz within {timeout:.0f} s; "
                               f"last lines of {log}:\n{tail(log)}")
