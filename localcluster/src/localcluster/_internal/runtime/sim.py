"""The simulated kubelet: pods "run" without processes. Cheap enough for 10,000+ pods (no task per pod: timers
only for pods told to exit later), and steerable by tests.

- A bound pod becomes Running at once with a pod IP from its node's 10.244.N.0/24 (never contacted) and Ready,
  unless a Behavior says otherwise.
- Test hooks (all coroutines, run them on the cluster loop, e.g. `cluster.call(rt.exit_container(...))`):
  `exit_container`, `set_ready`, `append_log`, `rotate_log`, `fail_node`.
- Events as a kubelet records them: Pulled, Created, Started per container when a pod starts (and when a
  container restarts), Killing when it is deleted.
- `behaviors`: `[(predicate(pod) -> bool, Behavior(...)), ...]`; the first match applies when the pod starts.
  `Behavior(log="hello\n", exit_code=0, exit_after=0.5)` prints the log then exits 0 after half a second.
  An exit is applied to the first run only: a restarted container (restartPolicy OnFailure/Always) keeps
  running until a test exits it again.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.runtime import kubeletevents as ke
from localcluster._internal.runtime import podenv
from localcluster._internal.runtime.base import RuntimeHost
from localcluster._internal.runtime.logs import MemoryLog as _Log

Obj = dict[str, Any]
_KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
Predicate = Callable[[Obj], bool]


@dataclass(frozen=True)
class Behavior:
    ready: bool = True
    exit_code: int | None = None
    exit_after: float | None = None
    log: str | None = None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Container:
    name: str
    image: str
    started_at: str
    state: Obj
    ready: bool
    restart_count: int = 0
    last_state: Obj = field(default_factory=dict)

    def status(self, index: int, uid: str) -> Obj:
        return {"name": self.name, "image": self.image, "imageID": f"sim://{self.image}",
                "containerID": f"sim://{uid[:8]}-{index}-{self.restart_count}",
                "ready": self.ready, "started": "running" in self.state, "restartCount": self.restart_count,
                "state": self.state, "lastState": self.last_state}


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    node: str
    ip: str
    restart_policy: str
    containers: list[_Container]
    conditions_base: list[Obj]
    ready: bool
    timer: asyncio.TimerHandle | None = None
    phase: str = "Running"
    pod: Obj = field(default_factory=dict)   # as it was given, for the events about it
    reason: str | None = None


class SimRuntime:
    """A PodRuntime whose pods are bookkeeping only."""

    def __init__(self, *, behaviors: list[tuple[Predicate, Behavior]] | None = None) -> None:
        self.behaviors: list[tuple[Predicate, Behavior]] = list(behaviors or [])
        self.host: RuntimeHost | None = None
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._logs: dict[tuple[str, str, str], _Log] = {}
        self._node_index: dict[str, int] = {}
        self._free_ips: dict[str, list[int]] = {}
        self._node_ips: dict[str, str] = {}
        self._failed_nodes: set[str] = set()

    async def start(self, host: RuntimeHost) -> None:
        self.host = host

    async def _events(self, pod: Obj, container: str, *events: ke.KubeletEvent) -> None:
        assert self.host is not None
        for reason, message, warning in events:
            await self.host.record_event(pod, reason=reason, message=message,
                                         type="Warning" if warning else "Normal",
                                         field_path=f"spec.containers{{{container}}}")

    async def _started(self, pod: Obj, container: _Container) -> None:
        await self._events(pod, container.name, ke.pulled(container.image), ke.created(container.name),
                           ke.started(container.name))

    # ---- addresses -----------------------------------------------------------------------------------------
    def _index(self, node: str) -> int:
        if node not in self._node_index:
            wanted = self._cidr_index(node)
            taken = set(self._node_index.values())
            index = wanted if wanted and wanted not in taken else max(taken | {0}) + 1
            self._node_index[node] = index
            self._free_ips[node] = list(range(254, 1, -1))
        return self._node_index[node]

    def _cidr_index(self, node: str) -> int:
        """The node's number from its podCIDR 10.<244 + n // 256>.<n % 256>.0/24 (cpu-1 has one too)."""
        obj = self.host.get("nodes", None, node) if self.host is not None else None
        cidr = str(((obj or {}).get("spec") or {}).get("podCIDR") or "")
        match = re.fullmatch(r"10\.(\d+)\.(\d+)\.0/24", cidr)
        if match and int(match.group(1)) >= 244:
            return (int(match.group(1)) - 244) * 256 + int(match.group(2))
        match = re.fullmatch(r"node-(\d+)", node)
        return int(match.group(1)) if match else 0

    def _allocate_ip(self, node: str) -> str:
        index = self._index(node)
        free = self._free_ips[node]
        host = free.pop() if free else 255
        return f"10.{244 + index // 256}.{index % 256}.{host}"

    def _release_ip(self, node: str, ip: str) -> None:
        last = int(ip.rsplit(".", 1)[1])
        if node in self._free_ips and 1 < last < 255:
            self._free_ips[node].append(last)

    def _host_ip(self, node: str) -> str:
        if node not in self._node_ips:
            assert self.host is not None
            obj = self.host.get("nodes", None, node) or {}
            address = next((a.get("address") for a in (obj.get("status") or {}).get("addresses") or []
                            if a.get("type") == "InternalIP"), "127.0.0.1")
            self._node_ips[node] = str(address)
        return self._node_ips[node]

    # ---- PodRuntime ----------------------------------------------------------------------------------------
    async def run_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        key = (meta["namespace"], meta["name"])
        if key in self._pods:
            return
        behavior = next((b for match, b in self.behaviors if match(pod)), Behavior())
        node = spec["nodeName"]
        now = _now()
        containers = [_Container(c.get("name", ""), c.get("image", ""), now, {"running": {"startedAt": now}},
                                 behavior.ready) for c in spec.get("containers") or []]
        base = [c for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"]
        sim = _Pod(meta["namespace"], meta["name"], meta.get("uid", ""), node, self._allocate_ip(node),
                   spec.get("restartPolicy", "Always"), containers, base, behavior.ready)
        self._pods[key] = sim
        sim.pod = pod
        for c in containers:
            await self._started(pod, c)
        if behavior.log:
            for c in containers:
                self._log(key, c.name).append(behavior.log.encode())
        await self._report(sim, start=True)
        if behavior.exit_code is not None:
            code = behavior.exit_code
            if behavior.exit_after:
                loop = asyncio.get_running_loop()
                sim.timer = loop.call_later(behavior.exit_after, lambda: asyncio.ensure_future(
                    self.exit_container(key[0], key[1], code)))
            else:
                await self.exit_container(key[0], key[1], code)

    async def stop_pod(self, pod: Obj, grace_seconds: float) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        sim = self._pods.get(key)
        if sim is None or sim.uid != meta.get("uid", sim.uid):
            return
        del self._pods[key]
        for c in sim.containers:
            if "running" in c.state:
                await self._events(sim.pod, c.name, ke.stopping(c.name))
        await self._report_stopped(sim, grace_seconds)
        if sim.timer is not None:
            sim.timer.cancel()
        self._release_ip(sim.node, sim.ip)
        for c in sim.containers:
            log = self._logs.pop((key[0], key[1], c.name), None)
            if log is not None:
                log.close()

    async def _report_stopped(self, sim: _Pod, grace_seconds: float) -> None:
        """A pod that finalizers keep in the store ends as the kubelet reports a deleted pod (terminal phase
        before removal, kubelet 1.27+): each running container dies of the SIGTERM (143), or of the SIGKILL
        (137) without a grace period."""
        assert self.host is not None
        current = self.host.get("pods", sim.namespace, sim.name)
        if current is None or current["metadata"].get("uid") != sim.uid or not current["metadata"].get(
                "finalizers") or sim.phase in ("Succeeded", "Failed"):
            return
        now = _now()
        for c in sim.containers:
            if "running" in c.state:
                c.state = {"terminated": {"exitCode": 143 if grace_seconds > 0 else 137, "reason": "Error",
                                          "startedAt": c.started_at, "finishedAt": now}}
            c.ready = False
        codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in sim.containers]
        sim.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        # conditions the kubelet does not own (PodScheduled, DisruptionTarget) stay as they are
        keep = [c for c in (current.get("status") or {}).get("conditions") or []
                if c.get("type") not in _KUBELET_CONDITIONS]
        await self._report(sim, keep=keep)

    async def logs(self, namespace: str, name: str, container: str, *, follow: bool,
                   tail_lines: int | None, timestamps: bool = False,
                   since: int | None = None) -> AsyncIterator[bytes]:
        log = self._logs.get((namespace, name, container))
        if log is None:
            return
        async for chunk in log.read(follow=follow, tail_lines=tail_lines, timestamps=timestamps, since=since):
            yield chunk

    async def fail_node(self, node: str) -> None:
        assert self.host is not None
        self._failed_nodes.add(node)
        now = _now()
        for sim in [p for p in self._pods.values() if p.node == node]:
            if sim.phase in ("Succeeded", "Failed"):
                continue
            for c in sim.containers:
                if "running" in c.state:
                    c.state = {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": c.started_at,
                                              "finishedAt": now}}
                c.ready = False
                self._close_log(sim, c.name)
            sim.phase, sim.reason = "Failed", "NodeLost"
            await self._report(sim)
        await self.host.set_node_ready(node, False, reason="NodeStatusUnknown",
                                       message="Kubelet stopped posting node status.")

    async def shutdown(self) -> None:
        for sim in self._pods.values():
            if sim.timer is not None:
                sim.timer.cancel()
        for log in self._logs.values():
            log.close()
        self._pods.clear()
        self._logs.clear()

    # ---- test hooks ----------------------------------------------------------------------------------------
    async def exit_container(self, namespace: str, name: str, code: int,
                             container: str | None = None) -> None:
        """The container (default: every running one) exits with `code`; restartPolicy decides the rest."""
        sim = self._pods.get((namespace, name))
        if sim is None or sim.phase in ("Succeeded", "Failed"):
            return
        now = _now()
        for c in sim.containers:
            if (container is not None and c.name != container) or "running" not in c.state:
                continue
            terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                          "startedAt": c.started_at, "finishedAt": now}
            restart = sim.restart_policy == "Always" or (sim.restart_policy == "OnFailure" and code != 0)
            if restart:
                c.last_state = {"terminated": terminated}
                c.restart_count += 1
                c.started_at = now
                c.state = {"running": {"startedAt": now}}
                await self._started(sim.pod, c)
            else:
                c.state = {"terminated": terminated}
                c.ready = False
                self._close_log(sim, c.name)
        if all("terminated" in c.state for c in sim.containers):
            codes = [c.state["terminated"]["exitCode"] for c in sim.containers]
            sim.phase = "Succeeded" if all(x == 0 for x in codes) else "Failed"
        await self._report(sim)

    async def set_ready(self, namespace: str, name: str, ready: bool) -> None:
        sim = self._pods.get((namespace, name))
        if sim is None:
            return
        sim.ready = ready
        for c in sim.containers:
            if "running" in c.state:
                c.ready = ready
        await self._report(sim)

    async def append_log(self, namespace: str, name: str, text: str, container: str | None = None) -> None:
        sim = self._pods.get((namespace, name))
        if sim is None:
            return
        for c in sim.containers:
            if container is None or c.name == container:
                self._log((namespace, name), c.name).append(text.encode())

    async def rotate_log(self, namespace: str, name: str, container: str | None = None) -> None:
        """Test hook: the kubelet rotates the container's log; readers from now on see only later lines."""
        for (ns, pod, ctr), log in self._logs.items():
            if (ns, pod) == (namespace, name) and container in (None, ctr):
                log.rotate()

    async def container_env(self, namespace: str, name: str, container: str | None = None) -> dict[str, str]:
        """Test hook: the environment the kubelet would give the container as it started (HOSTNAME, the API
        server's KUBERNETES_SERVICE_*, envFrom, env with $(VAR) expansion and the downward API), computed as
        the process runtime computes it; the simulated runtime starts no process to read it from. Raises
        podenv.NotReadyYet for a Secret or ConfigMap key that is missing."""
        sim = self._pods[(namespace, name)]
        spec = sim.pod.get("spec") or {}
        ctr = next(c for c in spec.get("containers") or [] if container in (None, c.get("name")))
        assert self.host is not None
        node = self.host.get("nodes", None, sim.node) or {}
        base = {"HOSTNAME": podenv.pod_hostname(sim.pod)[0], "KUBERNETES_SERVICE_HOST": self.host.api_host,
                "KUBERNETES_SERVICE_PORT": str(self.host.api_port)}
        return podenv.container_env(pod=sim.pod, container=ctr, get=self.host.get, image_env=(), base=base,
                                    pod_ip=sim.ip, host_ip=self._host_ip(sim.node),
                                    allocatable=(node.get("status") or {}).get("allocatable") or {})

    def running(self) -> list[tuple[str, str]]:
        """(namespace, name) of every pod the runtime holds."""
        return sorted(self._pods)

    # ---- internals -----------------------------------------------------------------------------------------
    def _log(self, key: tuple[str, str], container: str) -> _Log:
        full = (key[0], key[1], container)
        if full not in self._logs:
            self._logs[full] = _Log()
        return self._logs[full]

    def _close_log(self, sim: _Pod, container: str) -> None:
        log = self._logs.get((sim.namespace, sim.name, container))
        if log is not None:
            log.close()

    async def _report(self, sim: _Pod, *, start: bool = False, keep: list[Obj] | None = None) -> None:
        """`keep`: the conditions that are not the kubelet's to report (default: PodScheduled)."""
        assert self.host is not None
        now = _now()
        others = sim.conditions_base if keep is None else keep
        all_ready = all(c.ready for c in sim.containers) and sim.phase == "Running"
        running = sim.phase == "Running"
        flag = "True" if all_ready else "False"
        conditions = [
            {"type": "PodReadyToStartContainers", "status": "True" if running else "False",
             "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "lastProbeTime": None, "lastTransitionTime": now},
            *others]
        if not all_ready:
            for cond in conditions[2:4]:
                cond["reason"] = "PodCompleted" if sim.phase == "Succeeded" else "ContainersNotReady"
        status: Obj = {"phase": sim.phase, "conditions": conditions,
                       "containerStatuses": [c.status(i, sim.uid) for i, c in enumerate(sim.containers)]}
        if sim.reason:
            status["reason"] = sim.reason
            status["message"] = f"Node {sim.node} which was running pod {sim.name} is unresponsive"
        if start:
            host_ip = self._host_ip(sim.node)
            status.update({"podIP": sim.ip, "podIPs": [{"ip": sim.ip}], "hostIP": host_ip,
                           "hostIPs": [{"ip": host_ip}], "startTime": now})
        await self.host.update_pod_status(sim.namespace, sim.name, status)
