"""Pod status as the kubelet reports it: container states, phase, conditions. Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def waiting(reason: str, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"waiting": state}


def running(started_at: str) -> dict[str, Any]:
    return {"running": {"startedAt": started_at}}


def terminated(exit_code: int, *, started_at: str | None, finished_at: str, reason: str | None = None,
               message: str | None = None, container_id: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": exit_code,
                             "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                             "startedAt": started_at or finished_at, "finishedAt": finished_at}
    if message:
        state["message"] = message
    if container_id:
        state["containerID"] = container_id
    return {"terminated": state}


def exit_code_of(returncode: int) -> int:
    """The shim exits with the command's code (128+N when signal N killed it); a shim killed by signal N
    (the runtime's SIGKILL) counts as the command killed by it."""
    return returncode if returncode >= 0 else 128 - returncode


@dataclass
class ContainerView:
    """What the runtime knows of one container, enough to render its status."""

    name: str
    image: str
    image_id: str
    state: dict[str, Any] = field(default_factory=lambda: waiting("ContainerCreating"))
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    container_id: str | None = None

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "image": self.image, "imageID": self.image_id,
                               "ready": self.ready, "restartCount": self.restart_count,
                               "started": self.started, "state": self.state, "lastState": self.last_state}
        if self.container_id:
            out["containerID"] = self.container_id
        return out

    @property
    def is_terminated(self) -> bool:
        return "terminated" in self.state

    @property
    def exit_code(self) -> int | None:
        return self.state["terminated"]["exitCode"] if self.is_terminated else None


def pod_phase(init: Sequence[ContainerView], app: Sequence[ContainerView], restart_policy: str,
              *, init_done: bool) -> str:
    if any(c.is_terminated and c.exit_code != 0 for c in init) and restart_policy == "Never":
        return "Failed"
    if not init_done or not app:
        return "Pending"
    if all(c.is_terminated for c in app):
        if restart_policy == "Always":
            return "Running"  # every container is about to restart
        if all(c.exit_code == 0 for c in app):
            return "Succeeded"
        # under OnFailure a failed container is about to restart
        return "Failed" if restart_policy == "Never" else "Running"
    if any("running" in c.state or c.restart_count > 0 or c.is_terminated for c in app):
        return "Running"
    return "Pending"


def _condition(kind: str, ok: bool, at: str, reason: str | None = None,
               message: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                           "lastTransitionTime": at}
    if not ok and reason:
        out["reason"] = reason
    if not ok and message:
        out["message"] = message
    return out


def conditions(previous: Sequence[Mapping[str, Any]], *, sandbox_ready: bool, init_done: bool,
               app: Sequence[ContainerView], init_pending: Sequence[str], phase: str) -> list[dict[str, Any]]:
    """Ready and ContainersReady follow the containers' readiness; PodScheduled (the scheduler's) is kept;
    a transition time changes only when the status does."""
    at = now()
    unready = [c.name for c in app if not c.ready]
    done = phase in ("Succeeded", "Failed")
    ready = not unready and bool(app) and not done
    message = f"containers with unready status: [{' '.join(unready)}]" if unready else None
    reason = "PodCompleted" if done else "ContainersNotReady"
    incomplete = f"containers with incomplete status: [{' '.join(init_pending)}]" if init_pending else None
    fresh = [
        _condition("PodReadyToStartContainers", sandbox_ready, at),
        _condition("Initialized", init_done, at, "ContainersNotInitialized" if not done else "PodCompleted",
                   incomplete),
        _condition("Ready", ready, at, reason, message),
        _condition("ContainersReady", ready, at, reason, message),
    ]
    old = {c.get("type"): c for c in previous}
    out = [dict(c) for c in previous if c.get("type") not in {f["type"] for f in fresh}]
    for cond in fresh:
        before = old.get(cond["type"])
        if before is not None and before.get("status") == cond["status"]:
            cond["lastTransitionTime"] = before.get("lastTransitionTime", at)
        out.append(cond)
    return out
