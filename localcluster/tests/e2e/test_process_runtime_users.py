"""Who a container runs as in the process runtime, and what a non-root container can reach: the pod's
securityContext and the image's USER, as a kubelet applies them; and the environment's files (a venv whose
packages are editable installs of a checkout) served to a non-root pod however the checkout's parent
directories are permissioned (a clone under a 0700 home)."""

from __future__ import annotations

import copy
import os
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from test_process_runtime import StandInHost, cluster, phase, pod, read_logs, state

from hostimages import HOST_IMAGES
from localcluster import ImageMap, ImageMapping, ProcessRuntime
from localcluster._internal.runtime.runas import image_directories

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="mount and PID namespaces need root")]

__all__ = ["cluster"]  # the fixture, re-exported for pytest
WHO = "import os; print('ID', os.getuid(), os.getgid(), sorted(os.getgroups()), os.environ['HOME']); " \
      "print('NNP', open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])"


def python_container(name: str, code: str, *, image: str = "python:3.11-slim", **more: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["python3", "-c", code], **more}


@pytest.fixture
def closed_checkout() -> Iterator[Path]:
    """A directory only root may enter (as `mktemp -d` makes one, as /root is), holding a virtual environment
    that reaches this environment's packages, and a private file beside it."""
    parent = Path(tempfile.mkdtemp(prefix="dt-closed-"))
    try:
        assert stat.S_IMODE(parent.stat().st_mode) == 0o700
        venv = parent / "checkout" / ".venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
        # the new environment imports whatever this one has (localcluster, kubernetes, ...)
        (site / "reach.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
        (parent / "private.txt").write_text("not for pods\n")
        yield parent
    finally:
        subprocess.run(["rm", "-rf", str(parent)], check=False)


async def _run(runtime: ProcessRuntime, host: StandInHost, spec: dict[str, Any], *,
               until: str = "Succeeded") -> str:
    host.add(spec, "pods")
    await runtime.run_pod(copy.deepcopy(spec))
    name = spec["metadata"]["name"]
    await host.wait(lambda: phase(host, name) in ("Succeeded", "Failed"), timeout=60)
    out = await read_logs(runtime, name, spec["spec"]["containers"][0]["name"])
    assert phase(host, name) == until, out
    return out


@pytest.mark.asyncio
async def test_run_as_user_group_and_no_new_privileges(cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = cluster
    spec = pod("nonroot", "node-1", [python_container(
        "main", WHO, securityContext={"allowPrivilegeEscalation": False, "runAsGroup": 2000})],
        securityContext={"runAsUser": 65532, "runAsGroup": 1000, "supplementalGroups": [3000],
                         "fsGroup": 4000})
    out = await _run(runtime, host, spec)
    # the container's runAsGroup wins over the pod's; fsGroup joins the supplementary groups; no home: /
    assert "ID 65532 2000 [3000, 4000] /" in out, out
    assert "NNP 1" in out

    spec = pod("default-root", "node-1", [python_container("main", WHO)])
    out = await _run(runtime, host, spec)
    assert "ID 0 0 [] /root" in out and "NNP 0" in out, out


@pytest.mark.asyncio
async def test_an_arbitrary_uid_has_no_account_group_zero_and_home_root(
        user_image_cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    """What OpenShift's restricted-v2 gives a container (doubles/openshift.py assigns the UID): a runAsUser
    with no entry in the image's /etc/passwd runs with group 0 (not the image's USER group: containerd's
    WithUserID) and HOME=/, and has no name."""
    runtime, host = user_image_cluster
    code = WHO + "; import pwd\ntry: pwd.getpwuid(os.getuid())\nexcept KeyError as e: print('NONAME', e)"
    spec = pod("arbitrary", "node-1", [python_container("main", code, image="team/nonroot:0.1.0")],
               securityContext={"runAsUser": 1000680000, "fsGroup": 1000680000})
    out = await _run(runtime, host, spec)
    assert "ID 1000680000 0 [1000680000] /" in out, out
    assert "NONAME 'getpwuid(): uid not found: 1000680000'" in out, out


@pytest_asyncio.fixture
async def user_image_cluster(tmp_path: Path) -> AsyncIterator[tuple[ProcessRuntime, StandInHost]]:
    """A runtime whose images include `team/nonroot`, a Dockerfile whose USER is 65532:65532."""
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\nUSER 65532:65532\n")
    images = ImageMap((ImageMapping("team/nonroot", tmp_path / "Dockerfile"), *HOST_IMAGES.mappings))
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", images=images)
    await runtime.start(host)
    try:
        yield runtime, host
    finally:
        await runtime.shutdown()


@pytest.mark.asyncio
async def test_image_user_applies_and_run_as_non_root_refuses_root(
        user_image_cluster: tuple[ProcessRuntime, StandInHost]) -> None:
    runtime, host = user_image_cluster
    spec = pod("nonroot-image", "node-1", [python_container("main", WHO, image="team/nonroot:0.1.0")],
               securityContext={"runAsNonRoot": True})
    out = await _run(runtime, host, spec)
    assert "ID 65532 65532 [] /" in out, out  # the image's USER

    spec = pod("root-refused", "node-1", [python_container("main", WHO)],
               securityContext={"runAsNonRoot": True})
    host.add(spec, "pods")
    await runtime.run_pod(copy.deepcopy(spec))
    await host.wait(lambda: state(host, "root-refused").get("waiting", {}).get("reason")
                    == "CreateContainerConfigError")
    waiting = state(host, "root-refused")["waiting"]
    assert waiting["message"].startswith("container has runAsNonRoot and image will run as root (pod: "
                                         '"root-refused_default(')
    assert phase(host, "root-refused") == "Pending"


@pytest.mark.asyncio
async def test_non_root_pod_runs_from_a_checkout_under_a_closed_directory(tmp_path: Path,
                                                                          closed_checkout: Path) -> None:
    """The environment every pod's PATH starts with lies under a 0700 directory, and the interpreter it
    links to may too (pyenv under /root): a uid-65532 pod still runs it and imports what it holds (this
    package, an editable install of the checkout; the client), and sees nothing else of that directory."""
    venv_bin = closed_checkout / "checkout" / ".venv" / "bin"
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", venv_bin=str(venv_bin), images=HOST_IMAGES)
    await runtime.start(host)
    try:
        code = ("import os, sys, localcluster, kubernetes; print('PREFIX', sys.prefix); "
                "print('UID', os.getuid()); print('SEES', sorted(os.listdir(os.path.dirname(os.path.dirname("
                "sys.prefix)))))")
        spec = pod("closed", "node-1", [{"name": "main", "image": "busybox:1.36", "command": ["python", "-c",
                                                                                              code]}],
                   securityContext={"runAsUser": 65532, "runAsGroup": 65532})
        out = await _run(runtime, host, spec)
        assert f"PREFIX {venv_bin.parent}" in out and "UID 65532" in out, out
        assert "SEES ['checkout']" in out, out  # private.txt beside the checkout stays hidden

        # the same command as uid 65532 on the host, without the runtime's help, cannot even start (through
        # a shell: setpriv itself would resolve the program before it drops root)
        denied = subprocess.run(["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "/bin/sh",
                                 "-c", 'exec "$0" -c pass', str(venv_bin / "python")],
                                capture_output=True, text=True)
        assert denied.returncode == 126 and "Permission denied" in denied.stderr, denied
        assert (closed_checkout / "private.txt").read_text() == "not for pods\n"  # the host is unchanged
        assert stat.S_IMODE(closed_checkout.stat().st_mode) == 0o700
    finally:
        await runtime.shutdown()


@pytest.mark.asyncio
@pytest.mark.parametrize("uid", [65532, 0])
async def test_a_volume_over_the_checkouts_parent_leaves_the_image_in_place(
        tmp_path: Path, closed_checkout: Path, uid: int) -> None:
    """A pod's emptyDir at /tmp (the manager's, for its state file) while the venv standing in for the
    image lies under /tmp (a clone in mktemp -d): on a node the image sits in /usr and /opt, out of reach,
    so the container still runs its interpreter and imports its packages, and /tmp is the pod's own volume."""
    venv_bin = closed_checkout / "checkout" / ".venv" / "bin"
    top = "/" + closed_checkout.parts[1]  # "/tmp": the directory the volume is mounted on
    # in the volume: what the pod writes, and a directory holding each image directory bound back (the
    # closed checkout's; this project's own too when it is checked out under /tmp); never the host's files
    holders = {path.split("/")[2] for path in image_directories([str(venv_bin.parent)])
               if path.startswith(top + "/")}
    handle, sentinel = tempfile.mkstemp(dir=top, prefix="dt-host-only-")
    os.close(handle)
    host = StandInHost(tmp_path / "state")
    host.state_dir.mkdir()
    runtime = ProcessRuntime(network="netns", venv_bin=str(venv_bin), images=HOST_IMAGES)
    await runtime.start(host)
    try:
        code = (f"import os, sys, localcluster; print('PREFIX', sys.prefix); "
                f"open('{top}/mine', 'w').write('x'); print('VOLUME', sorted(os.listdir('{top}')))")
        spec = pod(f"covered-{uid}", "node-1",
                   [{"name": "main", "image": "busybox:1.36", "command": ["python", "-c", code],
                     "volumeMounts": [{"name": "scratch", "mountPath": top}]}],
                   volumes=[{"name": "scratch", "emptyDir": {}}],
                   securityContext={"runAsUser": uid, "runAsGroup": uid, "fsGroup": 2000})
        out = await _run(runtime, host, spec)
        assert f"PREFIX {venv_bin.parent}" in out, out
        assert f"VOLUME {sorted(holders | {'mine'})}" in out, out  # the pod's own volume, not the host's /tmp
        assert os.path.basename(sentinel) not in out
    finally:
        os.unlink(sentinel)
        await runtime.shutdown()
