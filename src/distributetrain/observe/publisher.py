"""What the manager publishes about a job, sent in the background so it can never fail or slow the job:
Events, the manager pod's labels and annotations, and the state file the metrics server reads.

One daemon thread sends, in order: Events at once (a bounded queue: beyond it they are dropped and counted);
the state file at most once a second; the pod's metadata patch at most every `patch_interval` seconds — both
at once when marked urgent (a phase change). A write the API refuses or fails is logged once in the
manager's log and ignored; after a Forbidden (RBAC grants no such right) that kind of write stops. `close`
flushes what is pending, for at most its timeout: the last phase reaches the pod before the process ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from distributetrain.errors import ApiError, Forbidden, NotFound
from distributetrain.kube.gateway import Kube

EVENT_QUEUE = 200
STATE_INTERVAL = 1.0


class Publisher(threading.Thread):
    """Sends Events and the manager pod's metadata, and writes the state file, off the job's threads."""

    def __init__(self, kube: Kube | None, *, say: Callable[[str], None],
                 target: tuple[str, str, str] | None,
                 state_file: Path | None, patch_interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`target`: (kind, namespace, name) of what stands for the manager - its Job, or its own pod - whose
        labels and annotations show the job; None outside a cluster (nothing to patch)."""
        super().__init__(name="publisher", daemon=True)
        # fewer, shorter retries than the job's own requests: an Event is worth little once late
        self.kube = None if kube is None else Kube(kube.api_client, attempts=3, backoff=0.25, max_backoff=2.0,
                                                   request_timeout=10.0)
        self.say, self.target, self.state_file = say, target, state_file
        self.patch_interval = patch_interval
        self._clock = clock
        self._cond = threading.Condition()
        self._events: deque[dict[str, Any]] = deque()
        self.dropped = 0
        self._meta: dict[str, Any] | None = None
        self._meta_sent: dict[str, Any] | None = None
        self._meta_urgent = False
        self._meta_at = float("-inf")
        self._state: str | None = None
        self._state_written: str | None = None
        self._state_urgent = False
        self._state_at = float("-inf")
        self._closing = False
        self._failed: set[str] = set()   # kinds of write whose failure was logged
        self._off: set[str] = set()      # kinds of write that stopped (Forbidden, no pod, no file)
        self.sent = {"events": 0, "patches": 0, "states": 0}

    # ---- what the observer hands over (any thread) ---------------------------------------------------------
    def event(self, body: dict[str, Any]) -> None:
        with self._cond:
            if len(self._events) >= EVENT_QUEUE:
                self.dropped += 1
                return
            self._events.append(body)
            self._cond.notify()

    def metadata(self, meta: Mapping[str, Any], *, urgent: bool) -> None:
        with self._cond:
            self._meta = dict(meta)
            self._meta_urgent = self._meta_urgent or urgent
            self._cond.notify()

    def state(self, text: str, *, urgent: bool) -> None:
        with self._cond:
            self._state = text
            self._state_urgent = self._state_urgent or urgent
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending (for at most `timeout` seconds), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self.is_alive():
            self.join(timeout)
        with self._cond:  # what is still pending is dropped: the thread ends after its current request
            self.dropped += len(self._events)
            self._events.clear()
            self._meta_sent = self._meta
            self._state_written = self._state

    # ---- the thread ---------------------------------------------------------------------------------------
    def run(self) -> None:
        # signals belong to the main thread, whose blocking calls they interrupt to start the cleanup
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        while True:
            with self._cond:
                while True:
                    state, work = self._due(self._clock())
                    if state is not None or work is not None:
                        break
                    if self._closing:
                        return
                    self._cond.wait(self._wait(self._clock()))
            # the state file first, and one API write at a time: a slow or failing API server never holds
            # back the metrics
            if state is not None:
                self._write_state(state)
            if work is not None:
                work()

    def _due(self, now: float) -> tuple[str | None, Callable[[], None] | None]:
        """The state to write and the one API write to make now, if any (under the lock; marks them taken)."""
        state = None
        if self._state is not None and self._state != self._state_written and (
                self._state_urgent or self._closing or now >= self._state_at + STATE_INTERVAL):
            state = self._state_written = self._state
            self._state_urgent, self._state_at = False, now
        if self._events:
            body = self._events.popleft()
            return state, lambda: self._send_event(body)
        if self._meta is not None and self._meta != self._meta_sent and (
                self._meta_urgent or self._closing or now >= self._meta_at + self.patch_interval):
            meta = self._meta_sent = self._meta
            self._meta_urgent, self._meta_at = False, now
            return state, lambda: self._patch(meta)
        return state, None

    def _wait(self, now: float) -> float | None:
        """How long nothing is due: until a pending patch or state write may go, or forever."""
        due = []
        if self._meta is not None and self._meta != self._meta_sent:
            due.append(self._meta_at + self.patch_interval - now)
        if self._state is not None and self._state != self._state_written:
            due.append(self._state_at + STATE_INTERVAL - now)
        return max(0.01, min(due)) if due else None

    def _send_event(self, body: dict[str, Any]) -> None:
        if self.kube is None or "events" in self._off:
            return
        try:
            self.kube.create(body)
            self.sent["events"] += 1
        except ApiError as err:
            self._refused("events", f"Event {body.get('reason')} not recorded: {err}",
                          stop=isinstance(err, Forbidden))

    def _patch(self, meta: dict[str, Any]) -> None:
        if self.kube is None or self.target is None or "patch" in self._off:
            return
        kind, namespace, name = self.target
        try:
            self.kube.patch("jobs" if kind == "Job" else "pods", namespace, name, {"metadata": meta})
            self.sent["patches"] += 1
        except ApiError as err:
            where = f"{kind.lower()} {namespace}/{name}"
            self._refused("patch", f"the phase and progress are not shown on {where}: {err}",
                          stop=isinstance(err, Forbidden | NotFound))

    def _write_state(self, text: str) -> None:
        if self.state_file is None or "state" in self._off:
            return
        partial = self.state_file.with_name(self.state_file.name + ".new")
        try:
            partial.write_text(text)
            os.replace(partial, self.state_file)  # the metrics server never reads half a file
            self.sent["states"] += 1
        except OSError as err:
            self._refused("state", f"the job's state is not written for the metrics server: {err}", stop=True)

    def _refused(self, kind: str, message: str, *, stop: bool) -> None:
        """Log a write's failure once per kind; the job goes on without it."""
        if stop:
            self._off.add(kind)
        if kind not in self._failed:
            self._failed.add(kind)
            self.say(f"{message} (the job goes on; further failures of this kind are not logged)")
