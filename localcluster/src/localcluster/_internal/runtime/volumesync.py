"""When the kubelet brings a running pod's Secret, ConfigMap, downwardAPI and projected volumes up to date.

The kubelet remounts those volumes on every sync of the pod (kubernetes/kubernetes: pkg/kubelet/kubelet.go
SyncPod calls volumeManager.WaitForAttachAndMount, which calls desiredStateOfWorldPopulator.ReprocessPod,
"required to enable remounting volumes on pod updates"; the populator then marks the pod's volumes
remount-required and the reconciler runs their SetUp again within 100-200 ms, reading the ConfigMap from
the kubelet's watch-based cache, `configMapAndSecretChangeDetectionStrategy: Watch` by default. Read in
pkg/kubelet/volumemanager/volume_manager.go of a 2025 master, v1.34+ (commit 0001f7ab), and the
populator's interface of v1.17 (commit 00661844): the path has not changed between them.) A running pod
is synced

- periodically: after each sync its pod worker queues the next one `wait.Jitter(syncFrequency, 0.5)` later
  (pkg/kubelet/pod_workers.go, workerResyncIntervalJitterFactor), syncFrequency 1 min by default: 60 to
  90 s after the last sync, whatever caused it;
- at once when the pod object changes in a way the kubelet's pod config calls an UPDATE
  (pkg/kubelet/config/config.go podsDifferSemantically: spec, labels, annotations, deletionTimestamp or
  deletionGracePeriodSeconds differ). A change of status only is a RECONCILE and syncs nothing. This is
  what lets a writer of a ConfigMap make a pod see it within a second: change an annotation of the pod
  (Kyverno's "Refresh Volumes in Pods" policy does the same).

`period` here is the runtime's `volume_refresh` (the kubelet's syncFrequency); 0 turns the periodic sync off,
which a kubelet cannot do, while a pod's update still syncs it. Not modelled: the syncs a container's start
or end (PLEG) and a probe result change also cause; and the watch's own delay (the cache here is the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping
from typing import Any

JITTER = 0.5  # pod_workers.go workerResyncIntervalJitterFactor

# what podsDifferSemantically compares (the kubelet's own config annotations aside, which no API object has)
_SPEC_KEYS = ("spec",)
_META_KEYS = ("labels", "annotations", "deletionTimestamp", "deletionGracePeriodSeconds")


def next_sync(period: float, draw: float) -> float:
    """Seconds to the next periodic sync: wait.Jitter(period, JITTER) with `draw` in [0, 1)."""
    return period * (1.0 + JITTER * draw)


def differs_semantically(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether the kubelet takes this change of a pod as an UPDATE (a sync now), not a RECONCILE."""
    if any(old.get(key) != new.get(key) for key in _SPEC_KEYS):
        return True
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    return any((before.get(key) or None) != (after.get(key) or None) for key in _META_KEYS)


class PodSyncs:
    """The running pods whose volumes are kept current, and whether an update made one due a sync now.

    `pod_changed` is a RuntimeHost.on_change callback (it runs inside the store's write, on the cluster's
    loop: it only sets an event)."""

    def __init__(self, *, draw: Callable[[], float] = random.random) -> None:
        self._due: dict[str, asyncio.Event] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._draw = draw

    def track(self, uid: str) -> None:
        self._due.setdefault(uid, asyncio.Event())

    def forget(self, uid: str) -> None:
        self._due.pop(uid, None)
        self._latest.pop(uid, None)

    def pod_changed(self, resource: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if resource != "pods" or old is None or new is None:
            return  # a pod's creation starts it, its deletion stops it: neither is a volume sync
        uid = str(new.get("metadata", {}).get("uid", ""))
        due = self._due.get(uid)
        if due is not None and differs_semantically(old, new):
            self._latest[uid] = new
            due.set()

    def latest(self, uid: str) -> dict[str, Any] | None:
        """The pod as its last update left it (what a downwardAPI volume shows), None when not updated."""
        return self._latest.get(uid)

    async def wait(self, uid: str, period: float) -> bool:
        """Until the pod's next sync: True when an update of the pod brought it, False for the periodic one.
        Either way the periodic one is next due a jittered period later, as the pod worker re-queues it."""
        due = self._due[uid]
        timeout = next_sync(period, self._draw()) if period > 0 else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(due.wait(), timeout)
        woken = due.is_set()
        due.clear()
        return woken
