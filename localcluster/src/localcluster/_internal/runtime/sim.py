"""The simulated kubelet: pods "run" without processes. Cheap enough for 10,000+ pods (no task per pod: timers
only for pods told to exit later), and steerable by tests.

- A bound pod becomes Running at once with a pod IP from its node's 10.244.N.0/24 (never contacted) and Ready,
  unless a Behavior says otherwise.
- Test hooks (all coroutines, run them on the cluster loop, e.g. `cluster.call(rt.exit_container(...))`):
  `exit_container`, `set_ready`, `append_log`, `rotate_log`, `fail_node`.
- Events as a kubelet records them: the image manager's (runtime/imagepulls.py: Pulled, or Pulling then
  Pulled, or the failures: ErrImagePull, ImagePullBackOff, InvalidImageName), Created, Started per container
  when a pod starts (and when a container restarts), Killing when it is deleted.
- Images are simulated too: every image pulls (the simulated registry has them all) unless `PullSettings`
  says otherwise: a pull time (the pod waits, ContainerCreating, then starts), or missing (ErrImagePull,
  then ImagePullBackOff, for as long as the pod lives). A container whose environment names a Secret or
  ConfigMap (key) that does not exist waits in CreateContainerConfigError, as on a real node, until it does.
  Only a pod that has to wait costs a task; the others start at once.
- `behaviors`: `[(predicate(pod) -> bool, Behavior(...)), ...]`; the first match applies when the pod starts.
  `Behavior(log="hello\n", exit_code=0, exit_after=0.5)` prints the log then exits 0 after half a second.
  An exit is applied to the first run only: a restarted container (restartPolicy OnFailure/Always) keeps
  running until a test exits it again.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.runtime import kubeletevents as ke
from localcluster._internal.runtime import podenv
from localcluster._internal.runtime.base import RuntimeHost
from localcluster._internal.runtime.imagepulls import ImageManager, PullSettings
from localcluster._internal.runtime.logs import MemoryLog as _Log
from localcluster._internal.runtime.podenv import NotReadyYet, container_env
from localcluster._internal.runtime.runas import ContainerConfigError

RETRY_SECONDS = 1.0      # how soon a pod worker syncs a pod again after an error
LOST_MESSAGE = "The container could not be located when the pod was terminated"

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
    spec: Obj = field(default_factory=dict)
    created: bool = False          # it has run (a container ID)

    def status(self, index: int, uid: str) -> Obj:
        out: Obj = {"name": self.name, "image": self.image, "imageID": f"sim://{self.image}" if self.created
                    else "", "ready": self.ready, "started": "running" in self.state,
                    "restartCount": self.restart_count, "state": self.state, "lastState": self.last_state}
        if self.created:
            out["containerID"] = f"sim://{uid[:8]}-{index}-{self.restart_count}"
        return out


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
    phase: str = "Pending"   # until a container runs; then what its containers say
    pod: Obj = field(default_factory=dict)   # as it was given, for the events about it
    reason: str | None = None
    message: str | None = None
    task: asyncio.Task[None] | None = None   # only for a pod that waits to start (a pull, a missing Secret)
    behavior: Behavior = field(default_factory=Behavior)
    extra_conditions: list[Obj] = field(default_factory=list)   # DisruptionTarget, from the kubelet
    started_at: str = field(default_factory=_now)                # the pod's startTime

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class SimRuntime:
    """A PodRuntime whose pods are bookkeeping only."""

    def __init__(self, *, behaviors: list[tuple[Predicate, Behavior]] | None = None,
                 pulls: PullSettings | None = None) -> None:
        self.behaviors: list[tuple[Predicate, Behavior]] = list(behaviors or [])
        self.image_manager = ImageManager(pulls)
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

    def _recorder(self, sim: _Pod, container: _Container) -> Callable[[ke.KubeletEvent], Awaitable[None]]:
        async def record(event: ke.KubeletEvent) -> None:
            await self._events(sim.pod, container.name, event)

        return record

    async def _restarted(self, sim: _Pod, container: _Container) -> None:
        """A container restarts: the kubelet ensures its image again, then creates and starts it."""
        await self.image_manager.ensure(node=sim.node, pod_uid=sim.uid, image=container.image,
                                        policy=_policy(container.spec), record=self._recorder(sim, container))
        await self._events(sim.pod, container.name, ke.created(container.name), ke.started(container.name))

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
        creating = _waiting("ContainerCreating", "")
        containers = [_Container(c.get("name", ""), c.get("image", ""), now, dict(creating), False,
                                 spec=dict(c)) for c in spec.get("containers") or []]
        base = [c for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"]
        sim = _Pod(meta["namespace"], meta["name"], meta.get("uid", ""), node, self._allocate_ip(node),
                   spec.get("restartPolicy", "Always"), containers, base, behavior.ready)
        self._pods[key] = sim
        sim.pod, sim.behavior = pod, behavior
        if self._can_start_now(sim):
            await self._sync(sim)
            return
        await self._report(sim, start=True)   # the sandbox is up (an IP); its containers wait
        sim.task = asyncio.ensure_future(self._sync_until_started(sim))

    def _can_start_now(self, sim: _Pod) -> bool:
        return all(self.image_manager.instant(sim.node, c.image, _policy(c.spec))
                   and self._config_error(sim, c) is None for c in sim.containers)

    def _config_error(self, sim: _Pod, container: _Container) -> Exception | None:
        """Why the kubelet cannot make the container's configuration yet: a Secret or ConfigMap (key) its
        environment names does not exist (runtime/podenv.py, the kubelet's words)."""
        assert self.host is not None
        try:
            container_env(pod=sim.pod, container=container.spec, get=self.host.get, image_env=(), base={},
                          pod_ip=sim.ip, host_ip=self._host_ip(sim.node), allocatable={})
        except (NotReadyYet, ContainerConfigError, ValueError, KeyError) as error:
            return error
        return None

    async def _sync_until_started(self, sim: _Pod) -> None:
        """A pod worker's syncs of a pod that could not start at once: every RETRY_SECONDS until its every
        container has started (a pull may take its time inside one sync)."""
        while self._pods.get((sim.namespace, sim.name)) is sim:
            if await self._sync(sim):
                return
            await asyncio.sleep(RETRY_SECONDS)

    async def _sync(self, sim: _Pod) -> bool:
        """One sync: each container not started yet gets its image, its configuration, then starts; one that
        cannot waits with the kubelet's reason. True once every container has started."""
        waiting = False
        for container in sim.containers:
            if container.created:
                continue
            outcome = await self.image_manager.ensure(
                node=sim.node, pod_uid=sim.uid, image=container.image, policy=_policy(container.spec),
                record=self._recorder(sim, container))
            if self._pods.get((sim.namespace, sim.name)) is not sim:
                return True   # deleted while pulling
            if not outcome.ok:
                container.state, waiting = _waiting(outcome.reason, outcome.message), True
                continue
            error = self._config_error(sim, container)
            if error is not None:
                reason, events = ke.setup_failure(error, container.image)
                container.state, waiting = _waiting(reason, str(error)), True
                await self._events(sim.pod, container.name, *events)
                continue
            now = _now()
            container.state, container.started_at = {"running": {"startedAt": now}}, now
            container.created, container.ready = True, sim.ready
            await self._events(sim.pod, container.name, ke.created(container.name),
                               ke.started(container.name))
            if sim.behavior.log:
                self._log((sim.namespace, sim.name), container.name).append(sim.behavior.log.encode())
        if any(c.created for c in sim.containers):
            sim.phase = "Running"
        await self._report(sim, start=True)
        if waiting:
            return False
        await self._exit_later(sim)
        return True

    async def _exit_later(self, sim: _Pod) -> None:
        behavior, key = sim.behavior, (sim.namespace, sim.name)
        if behavior.exit_code is None:
            return
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
        sim.cancel()
        self.image_manager.forget_pod(sim.uid)
        for c in sim.containers:
            if "running" in c.state:
                await self._events(sim.pod, c.name, ke.stopping(c.name))
        await self._report_stopped(sim, grace_seconds)
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
            sim.cancel()
            for c in sim.containers:
                if "running" in c.state:
                    c.state = {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": c.started_at,
                                              "finishedAt": now}}
                c.ready = False
                self._close_log(sim, c.name)
            sim.phase, sim.reason = "Failed", "NodeLost"
            sim.message = f"Node {sim.node} which was running pod {sim.name} is unresponsive"
            await self._report(sim)
        await self.host.set_node_ready(node, False, reason="NodeStatusUnknown",
                                       message="Kubelet stopped posting node status.")

    async def kill_pod(self, pod: Obj, grace_seconds: float, *, reason: str, message: str,
                       conditions: list[Obj]) -> None:
        """The kubelet ends the pod without its deletion (runtime/base.py): its running containers end as
        SIGTERM ends a process that does not catch it (143), at once; the others never ran."""
        meta = pod["metadata"]
        sim = self._pods.get((meta["namespace"], meta["name"]))
        if sim is None or sim.uid != meta.get("uid", sim.uid) or sim.phase in ("Succeeded", "Failed"):
            return
        sim.cancel()
        now = _now()
        for c in sim.containers:
            if "running" in c.state:
                await self._events(sim.pod, c.name, ke.stopping(c.name))
                c.state = {"terminated": {"exitCode": 143, "reason": "Error", "startedAt": c.started_at,
                                          "finishedAt": now}}
            elif "terminated" not in c.state:
                c.state = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                          "message": LOST_MESSAGE, "startedAt": now, "finishedAt": now}}
            c.ready = False
            self._close_log(sim, c.name)
        codes = [c.state["terminated"]["exitCode"] for c in sim.containers]
        sim.phase = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
        sim.reason, sim.message = reason, message
        sim.extra_conditions = [dict(c, lastTransitionTime=now) for c in conditions]
        await self._report(sim)

    async def shutdown(self) -> None:
        for sim in self._pods.values():
            sim.cancel()
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
                await self._restarted(sim, c)
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
        sandbox = sim.phase in ("Pending", "Running")
        flag = "True" if all_ready else "False"
        conditions = [
            {"type": "PodReadyToStartContainers", "status": "True" if sandbox else "False",
             "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "lastProbeTime": None, "lastTransitionTime": now},
            # the kubelet's own (DisruptionTarget on a node shutdown) win over a kept one of the same type
            *[c for c in others if c.get("type") not in {x.get("type") for x in sim.extra_conditions}],
            *sim.extra_conditions]
        if not all_ready:
            done = sim.phase in ("Succeeded", "Failed")
            unready = [c.name for c in sim.containers if not c.ready]
            for cond in conditions[2:4]:
                cond["reason"] = "PodCompleted" if done else "ContainersNotReady"
                if not done and unready:
                    cond["message"] = f"containers with unready status: [{' '.join(unready)}]"
        status: Obj = {"phase": sim.phase, "conditions": conditions,
                       "containerStatuses": [c.status(i, sim.uid) for i, c in enumerate(sim.containers)]}
        if sim.reason:
            status["reason"] = sim.reason
            status["message"] = sim.message
        if start:
            host_ip = self._host_ip(sim.node)
            status.update({"podIP": sim.ip, "podIPs": [{"ip": sim.ip}], "hostIP": host_ip,
                           "hostIPs": [{"ip": host_ip}], "startTime": sim.started_at})
        await self.host.update_pod_status(sim.namespace, sim.name, status)


def _policy(container: Obj) -> str:
    return str(container.get("imagePullPolicy") or "IfNotPresent")


def _waiting(reason: str, message: str) -> Obj:
    return {"waiting": {"reason": reason, "message": message} if message else {"reason": reason}}
