"""The real `distributetrain` command against the local cluster: exit codes, signals, status/logs/delete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from localcluster import Behavior, TestCluster
from manager_support import IMAGE, chief_behavior, leftovers

from distributetrain import naming
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Watched

Factory = Callable[..., TestCluster]
pytestmark = pytest.mark.timeout(180)
CLI = str(Path(sys.executable).parent / "distributetrain")


def cli(cluster: TestCluster, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DT_", "KUBERNETES_"))}
    return subprocess.run([CLI, *args[:1], "--kubeconfig", str(cluster.kubeconfig), *args[1:]], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def start(cluster: TestCluster, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DT_", "KUBERNETES_"))}
    return subprocess.Popen([CLI, "run", "--kubeconfig", str(cluster.kubeconfig), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_chief_running(cluster: TestCluster, job: str, timeout: float = 60) -> None:
    watched = Watched(Kube(cluster.api_client()), "pods", "default", naming.job_selector(job))
    for pods in watched.changes(deadline=time.monotonic() + timeout):
        chief = pods.get(naming.chief_name(job))
        if chief and (chief.get("status") or {}).get("phase") == "Running":
            return
    raise AssertionError(f"the chief of {job} never ran")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--gpus", "0"], "gpus (--gpus): '0': at least 1 GPU is needed"),
    (["--gpus", "-1"], "gpus (--gpus): '-1' is not a whole number of GPUs"),
    (["--gpus", "abc"], "gpus (--gpus): 'abc' is not a whole number of GPUs"),
    (["--gpus", str(10**9)], "beyond the sane cap"),
    (["--gpus", "6", "--image", "Bad:Image:Ref"], "image (--image)"),
    (["--gpus", "6", "--command", ""], "command (--command): is empty"),
    (["--gpus", "6", "--toleration", "x:Whenever"], "tolerations (--toleration)"),
    (["--gpus", "6", "--node-selector", "novalue"], "node_selector (--node-selector)"),
    (["--gpus", "6", "--job-name", "Not_A_Name"], "job_name (--job-name)"),
])
def test_invalid_request_exits_2_and_creates_nothing(local_cluster: TestCluster, args: list[str],
                                                      fragment: str) -> None:
    options = {"--image": IMAGE, "--job-name": "bad", **dict(zip(args[::2], args[1::2], strict=True))}
    result = cli(local_cluster, "run", *[word for pair in options.items() for word in pair])
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr and "nothing was created" in result.stderr
    assert local_cluster.kubectl("get", "pods,secrets,configmaps", "-l", naming.MANAGED_BY_KEY).stdout == ""


def test_not_enough_gpus_exits_3(local_cluster: TestCluster) -> None:
    result = cli(local_cluster, "run", "--gpus", "11", "--image", IMAGE, "--job-name", "big")
    assert result.returncode == 3, result.stderr
    assert "only 10 out of 11" in result.stderr
    assert leftovers(local_cluster, "big") == {}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signalled_manager_deletes_everything(local_cluster_factory: Factory, sig: signal.Signals) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    manager = start(cluster, "--gpus", "6", "--image", IMAGE, "--job-name", "sig")
    try:
        wait_for_chief_running(cluster, "sig")
        manager.send_signal(sig)
        _, err = manager.communicate(timeout=60)
    finally:
        if manager.poll() is None:
            manager.kill()
    assert manager.returncode == 128 + sig, err
    assert f"received {sig.name}" in err and "deleting all it created" in err
    assert leftovers(cluster, "sig") == {}


def test_run_then_status_logs_delete(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(log="step 1\nstep 2\n", exit_code=0)])
    run = cli(cluster, "run", "--gpus", "6", "--image", IMAGE, "--job-name", "cli", "--", "python3", "t.py")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "step 1\nstep 2\n"  # the chief's log, in the manager's own
    status = cli(cluster, "status", "cli")
    assert status.returncode == 0
    row = status.stdout.splitlines()[1].split()
    assert row[:7] == ["cli-chief", "chief", "node-3", "1", "Succeeded", "no", "0"]
    logs = cli(cluster, "logs", "cli")
    assert logs.stdout == "step 1\nstep 2\n"
    deleted = cli(cluster, "delete", "cli")
    assert deleted.returncode == 0 and "deleted 1 object(s)" in deleted.stdout
    assert leftovers(cluster, "cli") == {}
    assert cli(cluster, "status", "cli").returncode == 1


def test_launch_then_wait(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(log="done\n", exit_code=4, exit_after=2.0)])
    launch = cli(cluster, "launch", "--gpus", "4", "--image", IMAGE, "--job-name", "two-step")
    assert launch.returncode == 0, launch.stderr
    assert launch.stdout.strip() == "two-step"
    waited = cli(cluster, "wait", "two-step")
    assert waited.returncode == 4, waited.stderr
    assert "done" in waited.stdout
    assert leftovers(cluster, "two-step") == {"pods": ["two-step-chief"]}


def test_posttraining_reads_only_the_job_from_the_request_and_the_deadline_from_its_pods(
        local_cluster_factory: Factory) -> None:
    """DistributeTrain_PostTraining.py's command: the rest of the request (even an invalid --gpus) is not
    its to validate; the active deadline counts from DT_MANAGER_STARTED_AT, its length from the chief."""
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    request = ["--gpus", "4", "--image", IMAGE, "--job-name", "post", "--active-deadline", "4s"]
    assert cli(cluster, "launch", "--quiet", *request).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DT_", "KUBERNETES_"))}
    env.update(DT_MANAGER_STARTED_AT=f"{time.time():.0f}", DT_NAMESPACE="default")
    started = time.monotonic()
    done = subprocess.run([CLI, "posttraining", "--kubeconfig", str(cluster.kubeconfig), *request,
                           "--gpus", "not-read", "--", "python3", "x.py", "--job-name", "other"],
                          env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 74, done.stderr
    assert time.monotonic() - started < 30
    assert "supervising job post: chief post-chief" in done.stderr
    assert "deleting all it created" in done.stderr
    assert leftovers(cluster, "post") == {}


MANAGER_SH = Path(__file__).resolve().parents[2] / "manager-image" / "Manager.sh"


def start_manager_sh(cluster: TestCluster, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DT_", "KUBERNETES_"))}
    env["DT_PYTHON"] = sys.executable
    return subprocess.Popen([str(MANAGER_SH), "--kubeconfig", str(cluster.kubeconfig), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_manager_sh_runs_pretraining_then_posttraining(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(log="trained\n", exit_code=5, exit_after=1.0)])
    manager = start_manager_sh(cluster, "--gpus", "6", "--image", IMAGE, "--job-name", "sh")
    out, err = manager.communicate(timeout=120)
    assert manager.returncode == 5, err
    assert "trained" in out and "plan (attempt 1): 6 GPU(s) as 5 on node-1, 1 on node-3" in err
    # PostTraining, a process of its own, reads the worker from the cluster and names it
    assert "supervising job sh: chief sh-chief (node-3, 1 GPU), workers sh-worker-0 (node-1, 5 GPUs)" in err
    # the pod's log is for people: PreTraining does not echo the job's name as `launch` does for scripts
    assert out.splitlines() == ["trained"]
    assert leftovers(cluster, "sh") == {"pods": ["sh-chief"]}


def test_manager_sh_passes_sigterm_to_the_running_phase(local_cluster_factory: Factory) -> None:
    cluster = local_cluster_factory(behaviors=[chief_behavior(exit_code=None)])
    manager = start_manager_sh(cluster, "--gpus", "6", "--image", IMAGE, "--job-name", "sh-term")
    try:
        wait_for_chief_running(cluster, "sh-term")
        manager.send_signal(signal.SIGTERM)
        _, err = manager.communicate(timeout=60)
    finally:
        if manager.poll() is None:
            manager.kill()
    assert manager.returncode == 143, err
    assert leftovers(cluster, "sh-term") == {}, err


def test_manager_sh_signalled_while_waiting_for_the_gang(local_cluster_factory: Factory) -> None:
    never_ready = (lambda p: "-worker-" in p["metadata"]["name"], Behavior(ready=False))
    cluster = local_cluster_factory(behaviors=[never_ready])
    manager = start_manager_sh(cluster, "--gpus", "6", "--image", IMAGE, "--job-name", "sh-pre")
    try:
        watched = Watched(Kube(cluster.api_client()), "pods", "default", naming.job_selector("sh-pre"))
        for pods in watched.changes(deadline=time.monotonic() + 60):
            if "sh-pre-worker-0" in pods:
                break
        manager.send_signal(signal.SIGTERM)
        _, err = manager.communicate(timeout=60)
    finally:
        if manager.poll() is None:
            manager.kill()
    assert manager.returncode == 143, err
    assert "received SIGTERM" in err and "deleting all it created" in err
    assert leftovers(cluster, "sh-pre") == {}
