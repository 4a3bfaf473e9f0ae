"""Job pods without Kubernetes, for the tests of what runs inside them: two "worker pods" are
base-image/entrypoint.sh in worker mode (real sshd on 127.0.0.2 and 127.0.0.3), the "chief" is the same
entrypoint in launcher mode on this host (127.0.0.1), with the Secret's files, the hostfile and the
environment the manager's pod specs give them.

Fixtures (conftest.py imports them): `pods`, fresh workers for one test; `trained`, one training over workers
shared by the module's tests that only read what it left (a training with real TensorFlow is the slow part).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from distributetrain import naming
from distributetrain.manager import sshkeys

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "base-image" / "entrypoint.sh"
TRAIN = REPO / "base-image" / "Train.py"
WORKERS = ("127.0.0.2", "127.0.0.3")
SLOTS = {WORKERS[0]: 1, WORKERS[1]: 1}  # one rank in each worker, one in the chief: 3 Horovod ranks
# Measured on this machine: 3 ranks, 3 epochs of the digits reach 0.91-0.92 validation accuracy (see
# docs/images.md); 0.85 leaves room for run-to-run variation while still failing a model that did not learn
# (chance is 0.10, one epoch gives ~0.75).
ACCURACY_THRESHOLD = 0.85
EPOCHS = 3
TRAINING_TIMEOUT = 420.0


def sshd_missing() -> bool:
    return shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists()


def _safe_base() -> Path:
    """sshd's StrictModes refuses key files under a world-writable directory such as /tmp, so the pods' dirs
    live under /run (root) or the user's home, the way a container's /root/.ssh would."""
    for parent in (Path("/run"), Path.home() / ".cache"):
        if os.access(parent, os.W_OK):
            base = Path(tempfile.mkdtemp(prefix="distributetrain-e2e-", dir=parent))
            base.chmod(0o755)
            return base
    pytest.fail("no directory for the pods' ssh files: neither /run nor ~/.cache is writable")


def _free_port(hosts: tuple[str, ...]) -> int:
    """One port free on every worker address: horovodrun's -p is the same for all hosts, as in a cluster."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no common free port")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    for p in [*_descendants(pid), pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


@dataclass
class Pods:
    base: Path
    port: int
    secret: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self, name: str, **extra: str) -> dict[str, str]:
        home = self.base / name / "home"
        home.mkdir(parents=True, exist_ok=True)
        home.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DT_")}
        env.update(HOME=str(home), DT_SSH_DIR=str(self.secret), DT_STATE_DIR=str(self.base / name / "state"),
                   DT_SSH_PORT=str(self.port), DT_PYTHON=sys.executable,
                   # 3 ranks share 2 cores here: one thread each keeps TensorFlow from oversubscribing them
                   TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1", DT_E2E_MARK=str(self.base),
                   **extra)
        return env

    def sshd_log(self, host: str) -> str:
        return (self.base / host / "sshd.log").read_text()


@contextlib.contextmanager
def started_pods() -> Iterator[Pods]:
    """Both workers' sshd running with a fresh job key; everything they started killed on the way out."""
    base = _safe_base()
    secret = base / "secret"  # what the Secret volume holds: root-owned, read-only files
    secret.mkdir()
    keys = sshkeys.generate("e2e-job")
    (secret / naming.SSH_PRIVATE_KEY).write_bytes(keys.private_openssh())
    (secret / naming.SSH_PUBLIC_KEY).write_text(keys.public + "\n")
    (secret / naming.SSH_AUTHORIZED_KEYS).write_text(keys.authorized_keys())
    for f in secret.iterdir():
        f.chmod(0o444)  # deliberately too open: the entrypoint must install private copies
    state = Pods(base=base, port=_free_port(WORKERS), secret=secret)
    try:
        for host in WORKERS:
            (base / host).mkdir()
            with (base / host / "sshd.log").open("wb") as log:
                state.workers[host] = subprocess.Popen(
                    [str(ENTRYPOINT), naming.ENTRYPOINT_WORKER], stdout=log, stderr=subprocess.STDOUT,
                    env=state.env(host, DT_SSHD_LISTEN_ADDRESS=host), start_new_session=True)
        yield state
    finally:
        for proc in state.workers.values():
            kill_tree(proc.pid)
            proc.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


class Launcher:
    """The chief: entrypoint.sh launcher mode, its output collected line by line as it comes."""

    def __init__(self, pods: Pods, epochs: int, *, slots: dict[str, int], **env_extra: str) -> None:
        hostfile = pods.base / "hostfile"
        hostfile.write_text("".join(f"{h} slots={n}\n" for h, n in slots.items()))
        env = pods.env("chief", DT_POD_IP="127.0.0.1", DT_SLOTS="1", DT_HOSTFILE=str(hostfile),
                       DT_NUM_PROCESSES=str(1 + sum(slots.values())), DT_NETWORK_INTERFACE="lo",
                       DT_SSH_TIMEOUT="30", **env_extra)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [str(ENTRYPOINT), naming.ENTRYPOINT_LAUNCHER, "--", sys.executable, str(TRAIN), "--epochs",
             str(epochs)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            cwd=pods.base, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if regex.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._cond.wait(0.5)):
                    raise AssertionError(f"no line matching {pattern!r}; output:\n" + self.output())
                self._cond.wait(min(left, 1.0))

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                kill_tree(self.proc.pid)
                self.proc.wait(timeout=10)
            self._reader.join(timeout=10)
            assert self.proc.stdout is not None
            self.proc.stdout.close()

    def output(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Training:
    """A launcher run to its end over `pods` (still running): its exit code and its whole output."""

    pods: Pods
    exit_code: int
    output: str


@pytest.fixture
def pods() -> Iterator[Pods]:
    with started_pods() as fresh:
        yield fresh


@pytest.fixture(scope="module")
def trained() -> Iterator[Training]:
    """One EPOCHS-epoch training of 3 ranks with the pre-flight check before it, as the manager asks for it
    with --preflight: everything the checks of a finished run read (the ranks' weights, the accuracy, the
    keys the entrypoint installed, the pre-flight's lines, the progress lines) comes from this one run."""
    with started_pods() as shared:
        launcher = Launcher(shared, EPOCHS, slots=SLOTS, DT_PREFLIGHT="true")
        code = launcher.wait(timeout=TRAINING_TIMEOUT)
        yield Training(pods=shared, exit_code=code, output=launcher.output())
