"""Garbage collection by ownerReferences: what one pass decides, and whole deletions run to the end."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.controllers import gc
from localcluster._internal.controllers.gc import (
    Delete,
    GcActions,
    ObjectKey,
    RemoveFinalizer,
    SetOwnerReferences,
)

NOW = "2026-01-01T00:00:00Z"


def ref(owner: dict[str, Any], *, block: bool = False) -> dict[str, Any]:
    out = {
        "apiVersion": "v1",
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block:
        out["blockOwnerDeletion"] = True
    return out


def obj(
    kind: str,
    name: str,
    namespace: str = "ns",
    *owners: dict[str, Any],
    deleting: str = "",
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{kind}-{name}"}
    if namespace:
        meta["namespace"] = namespace
    if owners:
        meta["ownerReferences"] = list(owners)
    if deleting:
        meta["deletionTimestamp"] = NOW
        meta["finalizers"] = [deleting]
    if finalizers:
        meta["finalizers"] = finalizers
    return {"kind": kind, "metadata": meta}


def key(o: dict[str, Any]) -> ObjectKey:
    return ObjectKey.of(o)


JOB = obj("ConfigMap", "job")
NODE = obj("Node", "node-1", "")
SECRET = obj("Secret", "ssh", "ns", ref(JOB))
POD = obj("Pod", "w-0", "ns", ref(JOB, block=True))


CASES: list[tuple[str, list[dict[str, Any]], GcActions]] = [
    ("owner present: nothing to do", [JOB, SECRET, POD], GcActions()),
    (
        "owner gone: dependents deleted in background",
        [SECRET, POD],
        GcActions(delete=(Delete(key(POD), "Background"), Delete(key(SECRET), "Background"))),
    ),
    (
        "one owner left: only the dangling reference goes",
        [JOB, obj("Pod", "p", "ns", ref(JOB), ref(obj("ConfigMap", "gone")))],
        GcActions(set_owner_references=(SetOwnerReferences(key(obj("Pod", "p")), (ref(JOB),)),)),
    ),
    (
        "owner in another namespace counts as absent",
        [JOB, obj("Pod", "p", "other", ref(JOB))],
        GcActions(delete=(Delete(key(obj("Pod", "p", "other")), "Background"),)),
    ),
    ("cluster-scoped owner of a namespaced dependent", [NODE, obj("Pod", "p", "ns", ref(NODE))], GcActions()),
    (
        "cluster-scoped dependent of a namespaced owner is unresolvable: left alone",
        [obj("ClusterRole", "r", "", ref(JOB))],
        GcActions(),
    ),
    (
        "same uid but another name is not the owner",
        [obj("ConfigMap", "renamed") | {"metadata": {**JOB["metadata"], "name": "renamed"}}, SECRET],
        GcActions(delete=(Delete(key(SECRET), "Background"),)),
    ),
    (
        "orphan: references stripped, then the finalizer removed",
        [obj("ConfigMap", "job", deleting="orphan"), SECRET, POD],
        GcActions(
            set_owner_references=(SetOwnerReferences(key(POD), ()), SetOwnerReferences(key(SECRET), ())),
            remove_finalizers=(RemoveFinalizer(key(JOB), "orphan"),),
        ),
    ),
    (
        "foreground: dependents deleted while a blocking one remains",
        [obj("ConfigMap", "job", deleting="foregroundDeletion"), SECRET, POD],
        GcActions(delete=(Delete(key(POD), "Background"), Delete(key(SECRET), "Background"))),
    ),
    (
        "foreground: no blocking dependent left, the owner goes",
        [obj("ConfigMap", "job", deleting="foregroundDeletion"), obj("Secret", "x", "ns", ref(JOB))],
        GcActions(
            delete=(Delete(key(obj("Secret", "x")), "Background"),),
            remove_finalizers=(RemoveFinalizer(key(JOB), "foregroundDeletion"),),
        ),
    ),
    (
        "foreground cascades: a dependent with dependents is deleted in foreground",
        [obj("ConfigMap", "job", deleting="foregroundDeletion"), POD, obj("Secret", "s", "ns", ref(POD))],
        GcActions(delete=(Delete(key(POD), "Foreground"),)),
    ),
    (
        "a dependent's own orphan finalizer is honoured",
        [obj("Pod", "p", "ns", ref(JOB), finalizers=["orphan"])],
        GcActions(delete=(Delete(key(obj("Pod", "p")), "Orphan"),)),
    ),
    (
        "objects already being deleted are not deleted again",
        [obj("Pod", "p", "ns", ref(JOB), deleting="example.com/hold")],
        GcActions(),
    ),
]


@pytest.mark.parametrize(("objects", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_collect(objects: list[dict[str, Any]], expected: GcActions) -> None:
    assert gc.collect(objects) == expected


BEGIN = [
    ("background without finalizers: gone now", JOB, "Background", gc.DeletePlan(True, JOB)),
    ("default policy is background", JOB, None, gc.DeletePlan(True, JOB)),
    (
        "foreground",
        JOB,
        "Foreground",
        gc.DeletePlan(
            False,
            {
                "kind": "ConfigMap",
                "metadata": {
                    **JOB["metadata"],
                    "finalizers": ["foregroundDeletion"],
                    "deletionTimestamp": NOW,
                    "deletionGracePeriodSeconds": 0,
                },
            },
        ),
    ),
    (
        "orphan replaces foreground",
        obj("ConfigMap", "job", deleting="foregroundDeletion"),
        "Orphan",
        gc.DeletePlan(
            False,
            {
                "kind": "ConfigMap",
                "metadata": {
                    **JOB["metadata"],
                    "finalizers": ["orphan"],
                    "deletionTimestamp": NOW,
                    "deletionGracePeriodSeconds": 0,
                },
            },
        ),
    ),
    (
        "other finalizers keep the object",
        obj("ConfigMap", "job", finalizers=["x/y"]),
        "Background",
        gc.DeletePlan(
            False,
            {
                "kind": "ConfigMap",
                "metadata": {
                    **JOB["metadata"],
                    "finalizers": ["x/y"],
                    "deletionTimestamp": NOW,
                    "deletionGracePeriodSeconds": 0,
                },
            },
        ),
    ),
]


@pytest.mark.parametrize(("the_obj", "policy", "expected"), [c[1:] for c in BEGIN], ids=[c[0] for c in BEGIN])
def test_begin_delete(the_obj: dict[str, Any], policy: str | None, expected: gc.DeletePlan) -> None:
    assert gc.begin_delete(the_obj, policy, now=NOW) == expected


def run(objects: list[dict[str, Any]], name: str, policy: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Drive a deletion the way the API server does, returning the order things vanished and what is left."""
    store = {o["metadata"]["uid"]: o for o in objects}
    gone: list[str] = []

    def delete(uid: str, how: str | None) -> None:
        plan = gc.begin_delete(store[uid], how, now=NOW)
        if plan.remove_now:
            gone.append(store.pop(uid)["metadata"]["name"])
        else:
            store[uid] = plan.obj

    by_name = {o["metadata"]["name"]: o["metadata"]["uid"] for o in objects}
    delete(by_name[name], policy)
    for _ in range(20):
        actions = gc.collect(list(store.values()))
        if not actions:
            break
        for d in actions.delete:
            if d.key.uid in store:
                delete(d.key.uid, d.policy)
        for s in actions.set_owner_references:
            store[s.key.uid]["metadata"]["ownerReferences"] = list(s.owner_references)
        for f in actions.remove_finalizers:
            meta = store[f.key.uid]["metadata"]
            meta["finalizers"] = [x for x in meta["finalizers"] if x != f.finalizer]
            if not meta["finalizers"]:
                gone.append(store.pop(f.key.uid)["metadata"]["name"])
    return gone, sorted(store.values(), key=lambda o: o["metadata"]["name"])


def tree() -> list[dict[str, Any]]:
    owner = obj("ConfigMap", "job")
    pod = obj("Pod", "w-0", "ns", ref(owner, block=True))
    return [
        owner,
        pod,
        obj("Secret", "ssh", "ns", ref(owner)),
        obj("ConfigMap", "grandchild", "ns", ref(pod)),
    ]


@pytest.mark.parametrize(
    ("policy", "gone", "left"),
    [
        ("Background", ["job", "w-0", "ssh", "grandchild"], []),
        ("Foreground", ["ssh", "grandchild", "w-0", "job"], []),
        ("Orphan", ["job"], ["grandchild", "ssh", "w-0"]),
    ],
)
def test_whole_deletion(policy: str, gone: list[str], left: list[str]) -> None:
    vanished, remaining = run(tree(), "job", policy)
    assert (vanished, [o["metadata"]["name"] for o in remaining]) == (gone, left)
    if policy == "Orphan":
        assert [o["metadata"].get("ownerReferences") for o in remaining] == [[ref(remaining[2])], [], []]


def test_owner_of_an_unknown_kind_is_unresolvable() -> None:
    dependent = obj("Pod", "p", "ns", {"apiVersion": "x/v1", "kind": "Widget", "name": "w", "uid": "u"})
    assert gc.collect([dependent], known_kinds=frozenset({"Pod", "ConfigMap"})) == GcActions()
    assert gc.collect([dependent]) == GcActions(delete=(Delete(key(dependent), "Background"),))
