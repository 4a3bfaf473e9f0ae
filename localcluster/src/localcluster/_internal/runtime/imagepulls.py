"""Image pulls as the kubelet's image manager does them (pkg/kubelet/images/image_manager.go
`EnsureImageExists` and `pullImage`, v1.37 with KubeletEnsureSecretPulledImages on, as since v1.35), per
node, for both runtimes: what takes time, what fails, and the events and waiting reasons a user reads.

- A reference that does not parse: `InvalidImageName` (runtime/imageref.py), event InspectFailed, at every
  sync; it never pulls.
- Present on the node and `imagePullPolicy` IfNotPresent or Never: event Pulled `Container image "X" already
  present on machine and can be accessed by the pod`. Absent with Never: `ErrImageNeverPull`.
- Otherwise a pull: event Pulling `Pulling image "X"`, then either Pulled `Successfully pulled image "X" in
  3m2.1s (3m2.1s including waiting). Image size: N bytes.` and the image is on the node from then on, or
  Failed `Failed to pull image "X": ...` and `ErrImagePull`, after which the pod's next tries answer
  `ImagePullBackOff` (event BackOff `Back-off pulling image "X"`; the waiting message adds the last error,
  as since v1.32) until the back-off expires: 10 s, doubling to 300 s (the kubelet's imageBackOff).
  Every failure also records Failed `Error: <reason>`, as kuberuntime does.
- Pulls on one node are serialized (serializeImagePulls, true by default): "including waiting" counts the
  time queued behind other pulls. A pull that starts when the image has arrived meanwhile is instant.

What takes time is configured (`PullSettings`): an image matched by a `PullTime` (fnmatch on its repository
path, registry host, tag and digest dropped, as the image map matches) is on no node at first and its first
pull on each node takes that long; every other image is preloaded on every node (a node image that has it),
so its pulls, if any (policy Always), are instant. An image matched by `missing` is in no registry: its pulls
fail as containerd reports a missing image; the process runtime also fails every image its image map does
not name (`unavailable`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from localcluster._internal.apimachinery.durations import go_duration, parse_duration
from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime.imageref import (
    InvalidReference,
    default_tagged,
    fully_qualified,
    invalid_name_message,
)
from localcluster._internal.runtime.images import image_path, parse_size

KubeletEvent = tuple[str, str, bool]          # (reason, message, warning), as runtime/kubeletevents.py
Record = Callable[[KubeletEvent], Awaitable[None]]
BACKOFF = 10.0           # the kubelet's backOffPeriod
MAX_BACKOFF = 300.0      # MaxImageBackOff


@dataclass(frozen=True)
class PullTime:
    """Images whose repository path matches `pattern` (fnmatch, e.g. `distributetrain/base` or `*trainer*`)
    take `seconds` to pull the first time on each node; `size` is the size the kubelet reports, in bytes."""

    pattern: str
    seconds: float
    size: int = 0

    @staticmethod
    def parse(text: str) -> PullTime:
        """`PATTERN=DURATION[,SIZE]`: `distributetrain/base=180s`, `*trainer*=3m,7Gi`."""
        pattern, equals, rest = text.partition("=")
        if not equals or not pattern.strip():
            raise InvalidInput(f"--pull-time {text!r}: expected IMAGE=DURATION[,SIZE], e.g. "
                               "distributetrain/base=180s or '*trainer*=3m,7Gi'")
        duration, _, size = rest.partition(",")
        seconds = parse_duration(duration, what=f"--pull-time {text!r}")
        size_bytes = parse_size(size.strip(), what=f"--pull-time {text!r}") if size else 0
        return PullTime(pattern.strip(), seconds, size_bytes)


@dataclass(frozen=True)
class PullSettings:
    """What pulls take on this cluster: `times` (first match wins), `missing` (fnmatch patterns of images no
    registry has), and the kubelet's back-off after a failed pull (`backoff` doubling to `max_backoff`)."""

    times: tuple[PullTime, ...] = ()
    missing: tuple[str, ...] = ()
    backoff: float = BACKOFF
    max_backoff: float = MAX_BACKOFF

    def time_for(self, image: str) -> PullTime | None:
        path = image_path(image)
        return next((t for t in self.times if fnmatch.fnmatchcase(path, t.pattern)), None)

    def is_missing(self, image: str) -> bool:
        path = image_path(image)
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.missing)


@dataclass(frozen=True)
class PullOutcome:
    """Whether the container can be created; else the waiting reason and message its status shows."""

    ok: bool
    reason: str = ""
    message: str = ""


OK = PullOutcome(True)


def missing_message(image: str) -> str:
    """containerd's words for an image its registry does not have."""
    try:
        ref = fully_qualified(image)
    except InvalidReference:
        ref = image
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
            f'reference "{ref}": {ref}: not found')


def already_present(image: str) -> KubeletEvent:
    message = f'Container image "{image}" already present on machine and can be accessed by the pod'
    return "Pulled", message, False


def pulling(image: str) -> KubeletEvent:
    return "Pulling", f'Pulling image "{image}"', False


def pulled(image: str, *, pulling_seconds: float, total_seconds: float, size: int) -> KubeletEvent:
    return "Pulled", (f'Successfully pulled image "{image}" in {go_duration(pulling_seconds)} '
                      f"({go_duration(total_seconds)} including waiting). Image size: {size} bytes."), False


def failed(reason: str) -> KubeletEvent:
    """kuberuntime's event for a container that could not be started (`Error: ErrImagePull`)."""
    return "Failed", f"Error: {reason}", True


@dataclass
class _Backoff:
    last: float       # when the last pull failed
    delay: float


class ImageManager:
    """The image managers of every node of one runtime: which images each node has, one pull at a time per
    node, and each pod's back-off per image. `unavailable(image)` says why an image cannot be pulled at all
    (None: it can)."""

    def __init__(self, settings: PullSettings | None = None, *,
                 unavailable: Callable[[str], str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or PullSettings()
        self._unavailable = unavailable or (lambda image: None)
        self._clock = clock
        self._pulled: dict[str, set[str]] = {}     # node -> images pulled there (with their default tag)
        self._locks: dict[str, asyncio.Lock] = {}
        self._backoff: dict[tuple[str, str], _Backoff] = {}  # (pod uid, image) -> back-off
        self._last_error: dict[tuple[str, str], str] = {}

    # ---- what a node has ----------------------------------------------------------------------------------
    def _why_not(self, image: str) -> str | None:
        if self.settings.is_missing(image):
            return missing_message(image)
        return self._unavailable(image)

    def present(self, node: str, image: str) -> bool:
        """Whether the node has the image (preloaded: every pullable image without a pull time)."""
        try:
            tagged = default_tagged(image)
        except InvalidReference:
            return False
        if tagged in self._pulled.get(node, set()):
            return True
        return self.settings.time_for(image) is None and self._why_not(image) is None

    def instant(self, node: str, image: str, policy: str) -> bool:
        """Whether `ensure` would let the container start without waiting for anything."""
        if not self.present(node, image):
            return False
        return policy != "Always" or not self._lock(node).locked()

    def forget_pod(self, pod_uid: str) -> None:
        for key in [k for k in self._backoff if k[0] == pod_uid]:
            self._backoff.pop(key, None)
            self._last_error.pop(key, None)

    def _lock(self, node: str) -> asyncio.Lock:
        return self._locks.setdefault(node, asyncio.Lock())

    def _in_backoff(self, key: tuple[str, str]) -> bool:
        entry = self._backoff.get(key)
        return entry is not None and self._clock() - entry.last < entry.delay

    def _next_backoff(self, key: tuple[str, str]) -> None:
        """flowcontrol.Backoff.Next: the initial delay, or twice the last (at most the maximum); an entry
        untouched for twice the maximum starts over."""
        now = self._clock()
        entry = self._backoff.get(key)
        if entry is None or now - entry.last > 2 * self.settings.max_backoff:
            self._backoff[key] = _Backoff(now, self.settings.backoff)
        else:
            self._backoff[key] = _Backoff(now, min(entry.delay * 2, self.settings.max_backoff))

    # ---- EnsureImageExists --------------------------------------------------------------------------------
    async def ensure(self, *, node: str, pod_uid: str, image: str, policy: str,
                     record: Record) -> PullOutcome:
        """Make the image present on the node for this container, recording the kubelet's events; the
        outcome says whether the container may be created, or its waiting reason and message."""
        outcome = await self._ensure(node=node, pod_uid=pod_uid, image=image, policy=policy, record=record)
        if not outcome.ok:
            await record(failed(outcome.reason))
        return outcome

    async def _ensure(self, *, node: str, pod_uid: str, image: str, policy: str,
                      record: Record) -> PullOutcome:
        try:
            tagged = default_tagged(image)
        except InvalidReference as error:
            message = invalid_name_message(image, error)
            await record(("InspectFailed", message, True))
            return PullOutcome(False, "InvalidImageName", message)
        if policy != "Always" and self.present(node, image):
            await record(already_present(image))
            return OK
        if policy == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            await record(("ErrImageNeverPull", message, True))
            return PullOutcome(False, "ErrImageNeverPull", message)
        key = (pod_uid, image)
        if self._in_backoff(key):
            message = f'Back-off pulling image "{image}"'
            await record(("BackOff", message, False))
            previous = self._last_error.get(key)
            return PullOutcome(False, "ImagePullBackOff", f"{message}: {previous}" if previous else message)
        self._last_error.pop(key, None)
        await record(pulling(image))
        asked = self._clock()
        async with self._lock(node):
            started = self._clock()
            problem = self._why_not(image)
            timing = self.settings.time_for(image)
            if problem is None and not self.present(node, image) and timing is not None:
                await asyncio.sleep(timing.seconds)
            done = self._clock()
            if problem is None:
                self._pulled.setdefault(node, set()).add(tagged)
        if problem is not None:
            await record(("Failed", f'Failed to pull image "{image}": {problem}', True))
            self._next_backoff(key)
            self._last_error[key] = f"ErrImagePull: {problem}"
            return PullOutcome(False, "ErrImagePull", problem)
        self._backoff.pop(key, None)
        await record(pulled(image, pulling_seconds=done - started, total_seconds=done - asked,
                            size=timing.size if timing is not None else 0))
        return OK
