"""What the fault-matrix tests share: a manager run we can break at a chosen moment, what a user checks after
a failure (exit code, the manager's words, objects left, GPUs held), and the measurements every row records.

Each row writes one JSON file to $DT_RELIABILITY_RESULTS (default /tmp/dt-reliability); `python
tests/reliability/collate.py` turns them into the table of docs/reliability.md. Times are recorded, never
asserted: only generous bounds that tell "fails" from "hangs".
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from localcluster import Behavior, TestCluster
from localcluster import wait_until as poll_until

from distributetrain import naming
from distributetrain.kube import gateway
from distributetrain.kube.gateway import Kube
from distributetrain.manager.cleanup import find_job_objects
from distributetrain.manager.orchestrator import Orchestrator
from distributetrain.manager.pretraining import PreTraining
from distributetrain.observe.joblog import Reporter
from distributetrain.placement import inventory
from distributetrain.request.jobspec import JobSpec, ManagerIdentity
from podsecurity import restricted

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("DT_RELIABILITY_RESULTS", "/tmp/dt-reliability"))
IMAGE = "distributetrain/base:0.1.0"
# "fails rather than hangs": far above anything measured, far below pytest's own timeout
HANG = 90.0
RANK_PREFIX = re.compile(r"^\[\d+\]<std(?:out|err)>:")  # horovodrun's, before each line of a rank
Factory = Callable[..., TestCluster]


# ---- the measurement of one row ----------------------------------------------------------------------------
@dataclass
class Row:
    row: str
    test: str
    outcome: str = ""
    exit_code: int | None = None
    detect_s: float | None = None
    cleanup_s: float | None = None
    objects_left: int | None = None
    gpus_held: int | None = None
    runtime: str = "sim"
    notes: str = ""
    module: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{self.test}.json").write_text(json.dumps(asdict(self), indent=1, sort_keys=True))


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Iterator[Callable[..., Row]]:
    """`row("worker killed")` -> a Row saved when the test ends (only if the test passed: a failing test
    records nothing rather than a misleading number)."""
    made: list[Row] = []

    def make(name: str, **fields: Any) -> Row:
        fields.setdefault("test", request.node.name)
        fields.setdefault("module", request.node.module.__name__.rsplit(".", 1)[-1])
        made.append(Row(row=name, **fields))
        return made[-1]

    yield make
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.passed:
        for item in made:
            item.save()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report


# ---- what a user checks ------------------------------------------------------------------------------------
def kube_of(cluster: TestCluster) -> Kube:
    """A connection made exactly as the manager makes it (from the kubeconfig, our own retries only)."""
    return Kube.connect(kubeconfig=str(cluster.kubeconfig))


def leftovers(kube: Kube, job: str, namespace: str = "default") -> dict[str, list[str]]:
    """Every object still carrying the job's labels, by kind."""
    found = find_job_objects(kube, job=job, namespace=namespace)
    return {kind: sorted(i["metadata"]["name"] for i in items) for kind, items in found.items() if items}


def count(objects: dict[str, list[str]]) -> int:
    return sum(len(v) for v in objects.values())


def free_gpus(kube: Kube, resource: str = naming.DEFAULT_RESOURCE) -> dict[str, int]:
    """Every node's free GPUs (allocatable minus what non-terminated pods hold), Ready or not."""
    nodes, pods = gateway.list_nodes_and_pods(kube=kube)
    return {r.node: r.free for r in inventory.inventory(nodes, pods, resource=resource)}


def held(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(before[n] - after.get(n, 0) for n in before)


def wait_until(what: Callable[[], Any], *, timeout: float = 30.0, every: float = 0.1,
               message: str = "") -> Any:
    """The local cluster's poll (localcluster.wait_until), under the names the fault matrix's tests
    use: `every` seconds between checks, `message` saying what was awaited."""
    return poll_until(what, timeout=timeout, interval=every, what=message or str(what))


def pods_of(kube: Kube, job: str, namespace: str = "default") -> dict[str, dict[str, Any]]:
    items, _ = kube.list("pods", namespace, label_selector=naming.job_selector(job))
    return {p["metadata"]["name"]: p for p in items}


def running_job(kube: Kube, job: str, workers: int) -> dict[str, dict[str, Any]] | None:
    """The job's pods once its chief and `workers` workers all run (training is under way)."""
    pods = pods_of(kube, job)
    running = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]
    chief = pods.get(naming.chief_name(job))
    if chief is None or len(running) != workers + 1:
        return None
    return pods


# ---- the training's processes (the process runtime) ------------------------------------------------------
def hostname_of(pid: int) -> str | None:
    """The pod a process runs in: the hostname its UTS namespace carries (the kubelet sets the pod's name)."""
    try:
        root = Path(f"/proc/{pid}/root/etc/hostname")
        return root.read_text().strip() or None
    except OSError:
        return None


def training_processes(pod: str) -> list[int]:
    """The Train.py processes inside `pod` (started there by horovodrun over ssh)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"Train.py" in cmdline and b"horovodrun" not in cmdline and b"sh\x00-c" not in cmdline \
                and hostname_of(int(proc.name)) == pod:
            found.append(int(proc.name))
    return found



# ---- real training (the process runtime) -----------------------------------------------------------------
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root")


def process_cluster(factory: Factory, nodes: list[int]) -> TestCluster:
    """Pods as processes: real sshd, horovodrun and Train.py with TensorFlow on the CPU. Its kubelets refresh
    a running pod's ConfigMap volume as real ones do: every 60 s plus jitter, and at once when the pod is
    updated; the chief of an elastic or restart job sees each new hostfile within a second only because the
    manager annotates its pod after writing it (manager/hostfilepush.py)."""
    return factory(nodes=nodes, runtime="process", runtime_options={"volume_refresh": 60.0})


def training_spec(epochs: int, **fields: str) -> JobSpec:
    """The demo's 6-GPU job running Train.py for `epochs` epochs."""
    return spec(gpus="6", command=["python3", "/opt/distributetrain/Train.py", "--epochs", str(epochs)],
                network_interface="eth0", schedule_timeout="120s", ssh_timeout="60s", **fields)


def chief_epochs(manager: ManagerThread, before: float = float("inf")) -> list[int]:
    """The epochs rank 0 reported done (`epoch=E ...`), before a moment (monotonic)."""
    return [int(found[1]) for t, line in manager.recorder.chief_lines
            if t < before and (found := re.match(r"epoch=(\d+) ", line))]


def said_after(manager: ManagerThread, pattern: str, after: float, timeout: float) -> float:
    """When the manager said (or copied from the chief) a line matching `pattern`, after `after`."""
    def seen() -> float | None:
        said = next((t for t, m in manager.recorder.lines if t >= after and re.search(pattern, m)), None)
        return said or manager.recorder.chief_first(pattern, after)
    found = wait_until(seen, timeout=timeout, every=0.2,
                       message=f"{pattern!r}:\n" + manager.recorder.text[-6000:])
    return float(found)


def final_checksums(manager: ManagerThread, size: int) -> dict[str, str]:
    """Every final rank's weights checksum (`rank=R size=S weights_sha256=...`), by rank."""
    text = manager.recorder.chief_out.getvalue()
    return dict(re.findall(rf"rank=(\d+) size={size} weights_sha256=([0-9a-f]{{64}})", text))


# ---- a manager run in-process -----------------------------------------------------------------------------
class Recorder(Reporter):
    """The manager's log with the monotonic time of every line."""

    def __init__(self) -> None:
        self.out, self.chief_out = io.StringIO(), io.StringIO()
        super().__init__(self.out, self.chief_out)
        self.lines: list[tuple[float, str]] = []
        self.chief_lines: list[tuple[float, str]] = []
        self.plans: list[Any] = []

    def say(self, message: str) -> None:
        self.lines.append((time.monotonic(), message))
        super().say(message)

    def chief_line(self, line: bytes) -> None:
        # as the user reads it: without horovodrun's `[RANK]<stdout>:` prefix
        text = RANK_PREFIX.sub("", line.decode("utf-8", "replace")).rstrip("\n")
        self.chief_lines.append((time.monotonic(), text))
        super().chief_line(line)

    def chief_first(self, pattern: str, after: float = 0.0) -> float | None:
        """When the chief's log first had a line matching `pattern` (after `after`, monotonic)."""
        return next((t for t, line in self.chief_lines if t >= after and re.search(pattern, line)), None)

    def planned(self, plan: object, attempt: int) -> None:
        self.plans.append(plan)

    def first(self, pattern: str) -> float | None:
        return next((t for t, m in self.lines if re.search(pattern, m)), None)

    @property
    def text(self) -> str:
        return self.out.getvalue() + self.chief_out.getvalue()


def spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"gpus": "6", "image": IMAGE, "job_name": "train", "schedule_timeout": "20s",
                              "backoff": "0.2s", **fields}
    return JobSpec.from_sources(values, {})


class ManagerThread:
    """Orchestrator.run() in a thread: the test breaks something meanwhile and then collects the outcome."""

    def __init__(self, kube: Kube, job: JobSpec, *, owner: ManagerIdentity | None = None) -> None:
        self.recorder = Recorder()
        self.orchestrator = Orchestrator(PreTraining(kube, job, owner=owner, reporter=self.recorder))
        self.code: int | None = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"manager-{job.job_name}")

    def _run(self) -> None:
        try:
            self.code = self.orchestrator.run()
        except BaseException as err:  # the test inspects it
            self.error = err
            self.code = getattr(err, "exit_code", 1)
        finally:
            self.ended_at = time.monotonic()

    def start(self) -> ManagerThread:
        self._thread.start()
        return self

    def join(self, timeout: float = HANG) -> int:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the manager hung: still running {timeout:g}s later; its log:\n"
                                 + self.recorder.text)
        assert self.code is not None
        return self.code

    @property
    def message(self) -> str:
        return str(self.error) if self.error is not None else ""


def manager_pod(kube: Kube, name: str = "distributetrain-manager") -> ManagerIdentity:
    """A real pod object standing for the manager, so ownerReferences point at something the GC sees."""
    created = kube.create(restricted({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "default", "labels": {"app.kubernetes.io/name": "distributetrain"}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "manager", "image": "distributetrain/manager:0.1.0"}]}}))
    return ManagerIdentity(name=name, uid=created["metadata"]["uid"], namespace="default")


def chief_runs_forever() -> tuple[Callable[[dict[str, Any]], bool], Behavior]:
    return (lambda p: p["metadata"]["name"].endswith("-chief"), Behavior(log="epoch 1 loss 0.9\n"))


def chief_exits(code: int = 0, after: float = 0.5) -> tuple[Callable[[dict[str, Any]], bool], Behavior]:
    return (lambda p: p["metadata"]["name"].endswith("-chief"),
            Behavior(log="epoch 1 loss 0.9\nfinal_accuracy=0.91\n", exit_code=code, exit_after=after))


# ---- a manager run as a subprocess: `distributetrain run ...` ----------------------------------------------
class ManagerProcess:
    """The real CLI against the cluster's kubeconfig; its stderr lines stamped as they arrive."""

    def __init__(self, cluster: TestCluster, *args: str, env: dict[str, str] | None = None,
                 global_args: tuple[str, ...] = ()) -> None:
        command = [str(Path(sys.executable).parent / "distributetrain"), *global_args, "run", "--kubeconfig",
                   str(cluster.kubeconfig), *args]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("DT_") and k != "KUBECONFIG"}
        full_env.update(env or {})
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=full_env, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> float:
        """When a line matching `pattern` appeared."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for stamp, line in self.lines:
                    if regex.search(line):
                        return stamp
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._cond.wait(0.5)):
                    raise AssertionError(f"no line matching {pattern!r}; output:\n{self.output}")
                self._cond.wait(min(left, 1.0))

    def first(self, pattern: str) -> float | None:
        regex = re.compile(pattern)
        return next((t for t, line in self.lines if regex.search(line)), None)

    def signal(self, sig: int) -> float:
        self.proc.send_signal(sig)
        return time.monotonic()

    def wait(self, timeout: float = HANG) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"the manager hung: still running {timeout:g}s later; "
                                 f"output:\n{self.output}") from None
        finally:
            self._close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        self._reader.join(timeout=10)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)


@pytest.fixture
def managers() -> Iterator[list[ManagerProcess]]:
    """Every manager subprocess a test starts is killed (by its own PID) if the test left it running."""
    started: list[ManagerProcess] = []
    yield started
    for manager in started:
        manager.kill()
