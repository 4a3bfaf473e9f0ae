"""When the process runtime's kubelets refresh a running pod's ConfigMap and Secret volumes
(runtime/volumesync.py): every sync period plus the pod worker's jitter, and at once when the pod object is
updated as the kubelet's pod config counts an update (spec, labels, annotations, deletion), not for a change
of its status only."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from localcluster._internal.runtime.volumesync import PodSyncs, differs_semantically, next_sync


def pod(**meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1", "labels": {"app": "a"},
                         "annotations": {"x": "1"}, **meta},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"}}


def test_the_periodic_sync_comes_one_to_one_and_a_half_periods_after_the_last() -> None:
    assert next_sync(60.0, 0.0) == 60.0
    assert next_sync(60.0, 0.999) == pytest.approx(89.97)
    assert next_sync(1.0, 0.5) == 1.25


@pytest.mark.parametrize(("change", "update"), [
    (lambda p: p["metadata"]["annotations"].update(x="2"), True),
    (lambda p: p["metadata"]["annotations"].update(y="new"), True),
    (lambda p: p["metadata"]["labels"].pop("app"), True),
    (lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z",
                                    deletionGracePeriodSeconds=30), True),
    (lambda p: p["spec"]["containers"][0].update(image="busybox:2"), True),
    (lambda p: p["status"].update(phase="Succeeded"), False),
    (lambda p: p["metadata"].update(resourceVersion="99", managedFields=[{"manager": "kubectl"}]), False),
    (lambda p: p["metadata"].pop("annotations"), True),
], ids=["annotation-changed", "annotation-added", "label-removed", "deletion", "spec", "status-only",
       "resource-version-only", "annotations-removed"])
def test_what_the_kubelet_takes_for_an_update_of_the_pod(change: Any, update: bool) -> None:
    before = pod()
    after = copy.deepcopy(before)
    change(after)
    assert differs_semantically(before, after) is update


def test_absent_and_empty_labels_are_the_same() -> None:
    before, after = pod(), pod()
    before["metadata"].pop("labels")
    after["metadata"]["labels"] = {}
    assert not differs_semantically(before, after)


def test_an_update_of_a_tracked_pod_wakes_its_sync_at_once_and_a_status_change_does_not() -> None:
    async def scenario() -> list[bool]:
        syncs = PodSyncs(draw=lambda: 0.0)
        syncs.track("u1")
        woken = []
        # a status change only: the periodic sync (0.05 s here) is what comes
        syncs.pod_changed("pods", pod(), {**pod(), "status": {"phase": "Failed"}})
        woken.append(await syncs.wait("u1", 0.05))
        # an annotation changed: due now, although the period is an hour
        later = pod(annotations={"x": "1", "distributetrain.io/hosts-version": "42"})
        syncs.pod_changed("pods", pod(), later)
        woken.append(await asyncio.wait_for(syncs.wait("u1", 3600.0), 5))
        assert syncs.latest("u1") == later
        # another pod, a creation, a deletion and another resource wake nothing
        syncs.pod_changed("pods", pod(uid="u2"), pod(uid="u2", annotations={}))
        syncs.pod_changed("pods", None, pod())
        syncs.pod_changed("pods", pod(), None)
        syncs.pod_changed("configmaps", pod(), later)
        woken.append(await syncs.wait("u1", 0.05))
        syncs.forget("u1")
        assert syncs.latest("u1") is None
        return woken

    assert asyncio.run(scenario()) == [False, True, False]


def test_without_a_period_only_an_update_syncs() -> None:
    async def scenario() -> bool:
        syncs = PodSyncs()
        syncs.track("u1")
        waiting = asyncio.ensure_future(syncs.wait("u1", 0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        syncs.pod_changed("pods", pod(), pod(labels={"app": "b"}))
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()) is True
