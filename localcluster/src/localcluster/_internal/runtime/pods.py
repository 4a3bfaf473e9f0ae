"""The process runtime's record of one pod and its containers, and how it renders as pod status."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster._internal.runtime import podstatus as ps
from localcluster._internal.runtime.images import ImageMap
from localcluster._internal.runtime.netns import PodNetwork
from localcluster._internal.runtime.podenv import hosts_file, pod_hostname


@dataclass
class ContainerRun:
    spec: dict[str, Any]
    init: bool
    view: ps.ContainerView
    directory: Path
    generation: int = 0              # which start of the container this is (one log file each)
    proc: asyncio.subprocess.Process | None = None   # the shim
    pid: int | None = None           # the container's PID 1, as the host sees it
    gpus: list[int] = field(default_factory=list)
    probe_tasks: list[asyncio.Future[None]] = field(default_factory=list)
    killed_by_node_loss: bool = False
    # each start's log line times (logs.LineTimes), fixed when a line is first read
    line_times: dict[int, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.generation}.log"

    @property
    def field_path(self) -> str:
        """How an event names this container (involvedObject.fieldPath)."""
        return f"spec.{'initContainers' if self.init else 'containers'}{{{self.name}}}"

    @property
    def is_running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop_probes(self) -> None:
        tasks, self.probe_tasks = self.probe_tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def image_id(images: ImageMap, image: str) -> str:
    """What a kubelet reports as imageID: the Dockerfile, the host's files, or nothing (a failed pull)."""
    mapping = images.lookup(image)
    if mapping is None:
        return ""
    return f"host://{image}" if mapping.dockerfile is None else f"local://{mapping.dockerfile}"


@dataclass
class PodRun:
    pod: dict[str, Any]
    directory: Path
    init: list[ContainerRun]
    app: list[ContainerRun]
    host_ip: str = ""
    ip: str = ""
    start_time: str | None = None
    net: PodNetwork | None = None
    volumes: dict[str, str] = field(default_factory=dict)
    sandbox_ready: bool = False
    init_done: bool = False
    deleting: bool = False
    lost: bool = False
    # the kubelet ends the pod without it being deleted (graceful node shutdown): its containers are not
    # restarted; once they have ended its phase is `ended_phase` and its conditions include `extra_conditions`
    terminating: bool = False
    ended_phase: str | None = None
    extra_conditions: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    message: str | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @staticmethod
    def of(pod: dict[str, Any], *, directory: Path, images: ImageMap) -> PodRun:
        spec = pod["spec"]

        def runs(containers: Sequence[Mapping[str, Any]], init: bool) -> list[ContainerRun]:
            first = "PodInitializing" if spec.get("initContainers") and not init else "ContainerCreating"
            return [ContainerRun(spec=dict(c), init=init, directory=directory / "containers" / c["name"],
                                 view=ps.ContainerView(name=c["name"], image=c.get("image", ""),
                                                       image_id=image_id(images, c.get("image", "")),
                                                       state=ps.waiting(first)))
                    for c in containers]
        return PodRun(pod=pod, directory=directory, init=runs(spec.get("initContainers") or [], True),
                      app=runs(spec.get("containers") or [], False))

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace", "default"))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def node(self) -> str:
        return str(self.pod["spec"]["nodeName"])

    @property
    def dir(self) -> Path:
        return self.directory

    @property
    def hostname(self) -> str:
        return pod_hostname(self.pod)[0]

    @property
    def service_account(self) -> str:
        spec = self.pod["spec"]
        return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")

    @property
    def restart_policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy") or "Always")

    @property
    def grace(self) -> int:
        return int(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    @property
    def all_containers(self) -> list[ContainerRun]:
        return [*self.init, *self.app]

    def container(self, name: str) -> ContainerRun | None:
        return next((c for c in self.all_containers if c.name == name), None)

    def hosts_file(self) -> str:
        return hosts_file(self.pod, self.ip)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def cancel_setup(self) -> None:
        """Stop the pod's setup (the first task) if it is still going; containers already started go on."""
        if self.tasks and not self.tasks[0].done():
            self.tasks[0].cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.tasks[0]

    async def cancel_all(self) -> None:
        for ctr in self.all_containers:
            await ctr.stop_probes()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks = []

    def phase(self) -> str:
        if self.lost:
            return "Failed"
        if self.ended_phase is not None:
            return self.ended_phase
        return ps.pod_phase([c.view for c in self.init], [c.view for c in self.app], self.restart_policy,
                            init_done=self.init_done)

    def status(self, previous_conditions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        phase = self.phase()
        added = {c.get("type") for c in self.extra_conditions}
        previous_conditions = [*(c for c in previous_conditions if c.get("type") not in added),
                               *self.extra_conditions]
        init_pending = [c.name for c in self.init if c.view.exit_code != 0]
        status: dict[str, Any] = {
            "phase": phase, "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
            "startTime": self.start_time,
            "conditions": ps.conditions(previous_conditions,
                                        sandbox_ready=self.sandbox_ready and not self.lost,
                                        init_done=self.init_done, app=[c.view for c in self.app],
                                        init_pending=init_pending, phase=phase),
            "containerStatuses": [c.view.status() for c in self.app],
        }
        if self.ip:
            status["podIP"], status["podIPs"] = self.ip, [{"ip": self.ip}]
        if self.init:
            status["initContainerStatuses"] = [c.view.status() for c in self.init]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        return status
