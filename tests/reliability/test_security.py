"""Security: the job's private key is nowhere but its Secret (which goes with the job); sshd takes that key
and nothing else; a NetworkPolicy per job admits only the job's own pods; containers drop privileges; the
manager runs as non-root."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml
from localcluster import TestCluster
from reliability_support import (
    IMAGE,
    REPO,
    Factory,
    ManagerProcess,
    chief_runs_forever,
    kube_of,
    leftovers,
    running_job,
    wait_until,
)

import podsecurity
from distributetrain import naming
from distributetrain.manager import sshkeys

ARGS = ("--gpus", "6", "--image", IMAGE, "--job-name", "train", "--schedule-timeout", "20s")


# ---- everything the API serves --------------------------------------------------------------------------
def _get(cluster: TestCluster, path: str) -> Any:
    context = ssl.create_default_context(cafile=str(cluster.ca_path))
    request = urllib.request.Request(cluster.url + path,
                                     headers={"Authorization": f"Bearer {cluster.admin_token}",
                                              "Accept": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return response.read()


def _served(cluster: TestCluster) -> dict[str, bytes]:
    """Every listable resource of every group version the server advertises, listed cluster-wide, raw; and
    every container log of every pod."""
    versions = ["/api/v1"]
    groups = json.loads(_get(cluster, "/apis"))
    versions += [f"/apis/{g['preferredVersion']['groupVersion']}" for g in groups.get("groups", [])]
    out: dict[str, bytes] = {}
    for version in versions:
        for resource in json.loads(_get(cluster, version)).get("resources", []):
            if "/" in resource["name"] or "list" not in resource.get("verbs", []):
                continue
            out[f"{version}/{resource['name']}"] = _get(cluster, f"{version}/{resource['name']}")
    pods = json.loads(out["/api/v1/pods"])["items"]
    for pod in pods:
        meta = pod["metadata"]
        for container in pod["spec"]["containers"]:
            path = (f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log"
                    f"?container={container['name']}")
            with contextlib.suppress(Exception):
                out[path] = _get(cluster, path)
    return out


def _markers(private_pem: bytes) -> list[bytes]:
    """Fragments that betray the private key in any form we would write it: the PEM body's lines and the
    base64 of the PEM as a Secret stores it."""
    body = [line for line in private_pem.splitlines() if line and not line.startswith(b"-----")]
    stored = base64.b64encode(private_pem)
    return [*body, stored[:64], stored[64:128]]


def _secret_key(kube: Any) -> bytes:
    secret = kube.get("secrets", "default", naming.ssh_secret_name("train"))
    assert secret is not None
    return base64.b64decode(secret["data"][naming.SSH_PRIVATE_KEY])


def _where(served: dict[str, bytes], markers: list[bytes]) -> list[str]:
    found = []
    for path, data in served.items():
        if any(m in data for m in markers):
            found.append(path)
    return found


def _only_in_the_secret(served: dict[str, bytes], markers: list[bytes]) -> list[str]:
    """Paths holding the key, after taking the job's Secret out of the secrets list."""
    found = []
    for path, data in served.items():
        if path.endswith("/secrets"):
            items = [i for i in json.loads(data)["items"]
                     if i["metadata"]["name"] != naming.ssh_secret_name("train")]
            data = json.dumps(items).encode()
        if any(m in data for m in markers):
            found.append(path)
    return found


def test_private_key_only_in_its_secret_and_gone_with_the_job(local_cluster_factory: Factory,
                                                              managers: list[ManagerProcess],
                                                              row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    kube = kube_of(cluster)
    # the manager at its most talkative (-vv: debug logging of every library) is still silent about the key
    manager = ManagerProcess(cluster, *ARGS, global_args=("-vv",))
    managers.append(manager)
    wait_until(lambda: running_job(kube, "train", workers=1), timeout=60, message="the job to run")
    manager.wait_for("supervising job train", timeout=30)
    private = _secret_key(kube)
    assert private.startswith(b"-----BEGIN OPENSSH " b"PRIVATE KEY-----")  # split: key scanners
    markers = _markers(private)

    during = _served(cluster)
    assert _where(during, markers) == ["/api/v1/secrets"]  # the job's Secret, and only there
    assert _only_in_the_secret(during, markers) == []
    # nor in any pod spec, annotation, env or event: the pods mount the Secret, they do not copy it
    for pod in json.loads(during["/api/v1/pods"])["items"]:
        text = json.dumps(pod).encode()
        assert not any(m in text for m in markers), pod["metadata"]["name"]

    cluster.call(cluster.runtime.exit_container("default", "train-chief", 0))  # type: ignore[attr-defined]
    assert manager.wait() == 0, manager.output
    after = _served(cluster)
    assert _where(after, markers) == []  # the Secret went with the job
    assert leftovers(kube, "train") == {"pods": ["train-chief"]}
    output = manager.output.encode()
    assert len(output) > 2000  # debug logging was on
    assert not any(m in output for m in markers)
    row("private key: only in its Secret, deleted with the job", outcome="0 copies elsewhere", exit_code=0,
        objects_left=0, notes=f"scanned {len(during)} resources and logs during and after the job, "
                              f"and {len(output)} bytes of -vv manager output")


# ---- sshd: the job key, no other key, no password, no other user ------------------------------------------
def _safe_base() -> Path:
    """sshd's StrictModes refuses keys under world-writable /tmp: use /run (root) or ~/.cache."""
    for parent in (Path("/run"), Path.home() / ".cache"):
        if os.access(parent, os.W_OK):
            base = Path(tempfile.mkdtemp(prefix="distributetrain-reliability-", dir=parent))
            base.chmod(0o755)
            return base
    pytest.fail("no directory for the worker's ssh files")


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def worker_sshd() -> Iterator[tuple[str, int, sshkeys.KeyPair, Path]]:
    """base-image/entrypoint.sh in worker mode: real sshd on 127.0.0.5 with a fresh job key."""
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.fail("openssh-server is not installed (make system-deps)")
    host = "127.0.0.5"
    base = _safe_base()
    secret = base / "secret"
    secret.mkdir()
    keys = sshkeys.generate("reliability-job")
    (secret / naming.SSH_PRIVATE_KEY).write_bytes(keys.private_openssh())
    (secret / naming.SSH_PUBLIC_KEY).write_text(keys.public + "\n")
    (secret / naming.SSH_AUTHORIZED_KEYS).write_text(keys.authorized_keys())
    home = base / "home"
    home.mkdir()
    port = _free_port(host)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DT_")}, "HOME": str(home),
           "DT_SSH_DIR": str(secret), "DT_STATE_DIR": str(base / "state"), "DT_SSH_PORT": str(port),
           "DT_SSHD_LISTEN_ADDRESS": host}
    log = (base / "sshd.log").open("wb")
    proc = subprocess.Popen([str(REPO / "base-image" / "entrypoint.sh"), naming.ENTRYPOINT_WORKER],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex((host, port)) == 0

        wait_until(listening, timeout=20, message="sshd to listen")
        yield host, port, keys, base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def _connect(host: str, port: int, user: str, **auth: Any) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(host, port=port, username=user, timeout=10, banner_timeout=10, auth_timeout=10,
                   allow_agent=False, look_for_keys=False, **auth)
    return client


def test_sshd_accepts_only_the_job_key(worker_sshd: tuple[str, int, sshkeys.KeyPair, Path],
                                       row: Callable[..., object]) -> None:
    host, port, keys, base = worker_sshd
    user = pwd.getpwuid(os.getuid()).pw_name
    job_key = paramiko.Ed25519Key.from_private_key(io.StringIO(keys.private_openssh().decode()))
    with _connect(host, port, user, pkey=job_key) as client:
        _, stdout, _ = client.exec_command("echo accepted")
        assert stdout.read().strip() == b"accepted"

    other = sshkeys.generate("someone-else")
    other_key = paramiko.Ed25519Key.from_private_key(io.StringIO(other.private_openssh().decode()))
    with pytest.raises(paramiko.AuthenticationException):
        _connect(host, port, user, pkey=other_key)
    # no password is even offered: the server's only method is publickey
    with pytest.raises(paramiko.BadAuthenticationType) as refused:
        _connect(host, port, user, password="root")
    assert refused.value.allowed_types == ["publickey"]
    # the job key for another account: AllowUsers admits the pod's user only
    with pytest.raises(paramiko.AuthenticationException):
        _connect(host, port, "nobody", pkey=job_key)
    log = (base / "sshd.log").read_text()
    assert "Accepted publickey for" in log
    row("sshd: another key, a password, another user", outcome="all refused; the job key accepted",
        runtime="real sshd", notes="base-image/entrypoint.sh worker mode, paramiko client")


# ---- NetworkPolicy, container privileges, the manager's user ---------------------------------------------
def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes' LabelSelector semantics (matchLabels and matchExpressions; empty selects everything)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[operator]
        if not ok:
            return False
    return True


def _job_objects(cluster: TestCluster, **extra: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    from reliability_support import ManagerThread, spec

    kube = kube_of(cluster)
    manager = ManagerThread(kube_of(cluster), spec(job_name="train", **extra)).start()
    wait_until(lambda: running_job(kube, "train", workers=1), timeout=30, message="the job to run")
    pods = list(kube.list("pods", "default", label_selector=naming.job_selector("train"))[0])
    policy = kube.get("networkpolicies", "default", naming.network_policy_name("train"))
    cluster.call(cluster.runtime.exit_container("default", "train-chief", 0))  # type: ignore[attr-defined]
    assert manager.join() == 0
    return pods, policy


def test_network_policy_admits_only_the_jobs_own_pods(local_cluster_factory: Factory,
                                                      row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    pods, policy = _job_objects(cluster)
    assert policy is not None
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    # it applies to every pod of the job...
    target = spec["podSelector"]
    assert all(_selects(target, p["metadata"]["labels"]) for p in pods)
    # ...and not to the pods of another job or anyone else's
    other_job = naming.job_labels("other", naming.ROLE_WORKER)
    assert not _selects(target, other_job)
    assert not _selects(target, {"app": "web"})
    # one rule, every port (ssh and Horovod's run-time ports), from pods of the same job only: no namespace
    # selector (other namespaces), no ipBlock (anything outside the cluster)
    assert len(spec["ingress"]) == 1
    sources = spec["ingress"][0]["from"]
    assert len(sources) == 1 and set(sources[0]) == {"podSelector"}
    peer = sources[0]["podSelector"]
    assert all(_selects(peer, p["metadata"]["labels"]) for p in pods)
    assert not _selects(peer, other_job)
    assert not _selects(peer, {naming.MANAGED_BY_KEY: naming.MANAGED_BY})
    assert "ports" not in spec["ingress"][0]  # Horovod's Gloo ports are chosen at run time
    # egress: open by default (one empty rule: a namespace's default-deny egress does not cut the job, and a
    # first run reaches its data); --restrict-egress: the job's own pods on every port, and DNS
    assert spec["egress"] == [{}]
    _, restricted = _job_objects(cluster, restrict_egress="true")
    assert restricted is not None
    to_job, to_dns, to_openshift_dns = restricted["spec"]["egress"]
    assert to_job == {"to": [{"podSelector": peer}]}
    dns, node_local = to_dns["to"]
    assert dns["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert _selects(dns["podSelector"], {"k8s-app": "kube-dns"})
    assert node_local == {"ipBlock": {"cidr": "169.254.20.10/32"}}
    assert sorted(p["protocol"] for p in to_dns["ports"]) == ["TCP", "UDP"]
    assert {p["port"] for p in to_dns["ports"]} == {53}
    assert {p["port"] for p in to_openshift_dns["ports"]} == {5353}

    # switchable: --no-network-policy makes none
    pods_off, policy_off = _job_objects(cluster, network_policy="false")
    assert policy_off is None
    assert len(pods_off) == 2
    row("NetworkPolicy per job (on by default, switchable)",
        outcome="ingress only from the job's pods; egress open, or (--restrict-egress) to them and DNS",
        notes="object content checked; the local cluster does not enforce it")


def test_containers_drop_privileges(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    cluster = local_cluster_factory(behaviors=[chief_runs_forever()])
    pods, _ = _job_objects(cluster)
    roles = {}
    for pod in pods:
        spec = pod["spec"]
        role = pod["metadata"]["labels"][naming.ROLE_LABEL]
        roles[pod["metadata"]["name"]] = role
        assert spec["automountServiceAccountToken"] is False  # job pods never talk to the API
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        # the base image's non-root account, sshd included: no capability at all, in either role
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == naming.IMAGE_UID != 0
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert not context.get("privileged")
            assert context["capabilities"] == {"drop": ["ALL"]}
        for volume in spec["volumes"]:
            if "secret" in volume:
                # readable by the pods' group (fsGroup) only: never by others
                assert volume["secret"]["defaultMode"] & 0o007 == 0
        assert podsecurity.violations(pod) == []
    assert sorted(roles.values()) == ["chief", "worker"]
    row("containers drop privileges", outcome="non-root (uid 10001); no escalation; ALL dropped, none added",
        notes="Pod Security restricted")


def _process_status(pid: int) -> dict[str, str]:
    with contextlib.suppress(OSError):
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return {}


def test_manager_runs_as_non_root(local_cluster_factory: Factory, row: Callable[..., object]) -> None:
    manifest = yaml.safe_load((REPO / "manifests" / "DistributeTrain_Manager.yaml").read_text())
    pod_spec = manifest["spec"]["template"]["spec"]  # the manager Job's pod
    pod_context = pod_spec["securityContext"]
    # no fixed uid (a namespace may assign one: OpenShift): runAsNonRoot checks the image's numeric USER
    assert pod_context["runAsNonRoot"] is True and "runAsUser" not in pod_context
    container = pod_spec["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    dockerfile = (REPO / "manager-image" / "Dockerfile").read_text()
    user_lines = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert user_lines and user_lines[-1].split(":")[0] not in ("0", "root")

    # and it works so: the shipped manifest's Job's pod, run by the process runtime as the kubelet would (its
    # securityContext applied; the project's files served however the checkout's parents are permissioned),
    # runs a whole one-GPU job
    if os.geteuid() != 0:
        pytest.fail("this check needs root: the process runtime runs pods in their own namespaces")
    cluster = local_cluster_factory(nodes=[1], cpu_nodes=1, runtime="process")
    applied = cluster.kubectl("apply", "-f", str(REPO / "rbac"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PodTemplate.yaml"), "-f",
                              str(REPO / "manifests" / "DistributeTrain_PriorityClass.yaml"))
    assert applied.returncode == 0, applied.stderr
    container["args"] = ["--gpus", "1", "--image", IMAGE, "--job-name", "nonroot"]
    container["env"].append({"name": "DT_COMMAND", "value": "python3 -c 'print(\"trained\")'"})
    applied = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    assert applied.returncode == 0, applied.stderr

    def manager_process() -> dict[str, str]:
        runs = [r for r in getattr(cluster.runtime, "pods", {}).values()
                if r.name.startswith("distributetrain-manager-")]
        pids = [c.pid for r in runs for c in r.app if c.pid is not None]
        return _process_status(pids[0]) if pids else {}

    status = wait_until(manager_process, timeout=60, every=0.2)
    assert status["Uid"].split() == ["65532"] * 4, status  # real, effective, saved, filesystem
    assert status["Gid"].split()[0] == "65532"
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    selector = "batch.kubernetes.io/job-name=distributetrain-manager"
    phase = wait_until(lambda: (p := json.loads(cluster.kubectl("get", "pod", "-l", selector, "-o", "json")
                                                .stdout)["items"][-1]["status"]["phase"])
                       in ("Succeeded", "Failed") and p, timeout=300, every=1.0)
    log = cluster.kubectl("logs", "job/distributetrain-manager").stdout
    assert phase == "Succeeded", log[-3000:]
    assert "chief nonroot-chief ended with exit code 0" in log
    assert leftovers(kube_of(cluster), "nonroot") == {"pods": ["nonroot-chief"]}
    row("manager runs as non-root", outcome="uid 65532, no capabilities, no_new_privs: job exit 0",
        exit_code=0, runtime="process",
        notes="the shipped manifest's Job's pod, its securityContext applied by the process runtime")
