"""Garbage collection by ownerReferences: background, foreground and orphan deletion, as pure decisions.

How the API server calls this:
    On DELETE of an object (query/body propagationPolicy, default "Background"):
        plan = begin_delete(obj, policy, now=now_rfc3339)
        if plan.remove_now: remove it from the store
        else: store plan.obj (deletionTimestamp + finalizers set); it stays until its finalizers are empty
    After every delete or finalizer change, and periodically (the real GC is eventually consistent):
        actions = collect(all_objects)              # every object of every kind, each dict with "kind"
        for d in actions.delete: delete d.key with propagation policy d.policy (through begin_delete again)
        for p in actions.set_owner_references: set metadata.ownerReferences of p.key to p.owner_references
        for f in actions.remove_finalizers: remove finalizer f.finalizer from f.key
        ...then any object with deletionTimestamp and no finalizers left must be removed from the store.
    Call collect() again until it returns no actions (each round is one step of the real controller).
Owners are found by uid: in the dependent's namespace for namespaced kinds, at cluster scope for
cluster-scoped kinds. A cluster-scoped dependent naming a namespaced owner is left alone (unresolvable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

BACKGROUND = "Background"
FOREGROUND = "Foreground"
ORPHAN = "Orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
CLUSTER_SCOPED_KINDS = frozenset({"Namespace", "Node", "ClusterRole", "ClusterRoleBinding",
                                  "PersistentVolume",
                                  "StorageClass", "CustomResourceDefinition", "PriorityClass"})


@dataclass(frozen=True, order=True)
class ObjectKey:
    kind: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                   str(meta.get("uid") or ""))


@dataclass(frozen=True)
class Delete:
    key: ObjectKey
    policy: str


@dataclass(frozen=True)
class SetOwnerReferences:
    key: ObjectKey
    owner_references: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class RemoveFinalizer:
    key: ObjectKey
    finalizer: str


Action = Delete | SetOwnerReferences | RemoveFinalizer


@dataclass(frozen=True)
class GcActions:
    delete: tuple[Delete, ...] = ()
    set_owner_references: tuple[SetOwnerReferences, ...] = ()
    remove_finalizers: tuple[RemoveFinalizer, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.delete or self.set_owner_references or self.remove_finalizers)


@dataclass(frozen=True)
class DeletePlan:
    """`remove_now`: delete from the store now; else store `obj` (deletionTimestamp and finalizers set)."""

    remove_now: bool
    obj: dict[str, Any] = field(default_factory=dict)


def begin_delete(obj: Mapping[str, Any], policy: str | None, *, now: str) -> DeletePlan:
    """What a DELETE does to the object itself (the registry's deletionFinalizersForGarbageCollection)."""
    meta = dict(obj.get("metadata") or {})
    finalizers = [f for f in meta.get("finalizers") or []
                  if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    if policy == ORPHAN:
        finalizers.append(ORPHAN_FINALIZER)
    elif policy == FOREGROUND:
        finalizers.append(FOREGROUND_FINALIZER)
    elif policy is None and meta.get("deletionTimestamp"):
        # a repeated delete without a policy keeps the one already chosen
        finalizers = list(meta.get("finalizers") or [])
    if not finalizers:
        return DeletePlan(True, dict(obj))
    meta["finalizers"] = finalizers
    meta.setdefault("deletionTimestamp", now)
    meta.setdefault("deletionGracePeriodSeconds", 0)
    return DeletePlan(False, {**obj, "metadata": meta})


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _deleting(obj: Mapping[str, Any], finalizer: str) -> bool:
    meta = _meta(obj)
    return bool(meta.get("deletionTimestamp")) and finalizer in (meta.get("finalizers") or [])


class _Graph:
    def __init__(self, objects: Iterable[Mapping[str, Any]], cluster_scoped: frozenset[str],
                 known_kinds: frozenset[str] | None) -> None:
        self.objects = list(objects)
        self.cluster_scoped = cluster_scoped
        self.known_kinds = known_kinds
        # (namespace or "" for cluster-scoped owners, uid) -> owner
        self.by_scope_uid: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.dependents: dict[str, list[Mapping[str, Any]]] = {}
        for obj in self.objects:
            meta = _meta(obj)
            self.by_scope_uid[(str(meta.get("namespace") or ""), str(meta.get("uid") or ""))] = obj
        for obj in self.objects:
            for ref in _meta(obj).get("ownerReferences") or []:
                if self.owner(obj, ref) is not None:
                    self.dependents.setdefault(str(ref.get("uid")), []).append(obj)

    def resolvable(self, dependent: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
        # an owner kind the server does not serve cannot be looked up: the real collector retries forever
        if self.known_kinds is not None and ref.get("kind") not in self.known_kinds:
            return False
        namespaced_owner = ref.get("kind") not in self.cluster_scoped
        return not (namespaced_owner and not _meta(dependent).get("namespace"))

    def owner(self, dependent: Mapping[str, Any], ref: Mapping[str, Any]) -> Mapping[str, Any] | None:
        cluster = ref.get("kind") in self.cluster_scoped
        namespace = "" if cluster else str(_meta(dependent).get("namespace") or "")
        found = self.by_scope_uid.get((namespace, str(ref.get("uid") or "")))
        if found is None or found.get("kind") != ref.get("kind"):
            return None
        if _meta(found).get("name") != ref.get("name"):
            return None
        return found


def _owner_finalizer_actions(graph: _Graph, obj: Mapping[str, Any]) -> list[Action]:
    key, uid = ObjectKey.of(obj), str(_meta(obj).get("uid") or "")
    dependents = graph.dependents.get(uid, [])
    if _deleting(obj, ORPHAN_FINALIZER):
        actions: list[Action] = []
        for dep in dependents:
            kept = tuple(r for r in _meta(dep).get("ownerReferences") or [] if r.get("uid") != uid)
            actions.append(SetOwnerReferences(ObjectKey.of(dep), kept))
        return [*actions, RemoveFinalizer(key, ORPHAN_FINALIZER)]
    if _deleting(obj, FOREGROUND_FINALIZER):
        blocking = [d for d in dependents for r in _meta(d).get("ownerReferences") or []
                    if r.get("uid") == uid and r.get("blockOwnerDeletion")]
        if not blocking:
            return [RemoveFinalizer(key, FOREGROUND_FINALIZER)]
    return []


def _dependent_actions(graph: _Graph, obj: Mapping[str, Any]) -> list[Action]:
    """attemptToDeleteItem: classify the owners as solid, dangling or waiting for dependents' deletion."""
    meta = _meta(obj)
    refs = list(meta.get("ownerReferences") or [])
    if not refs or meta.get("deletionTimestamp"):
        return []
    if not all(graph.resolvable(obj, r) for r in refs):
        return []
    solid, dangling, waiting = [], [], []
    for ref in refs:
        owner = graph.owner(obj, ref)
        if owner is None:
            dangling.append(ref)
        elif _deleting(owner, FOREGROUND_FINALIZER):
            waiting.append(ref)
        else:
            solid.append(ref)
    key = ObjectKey.of(obj)
    if solid:
        if not dangling and not waiting:
            return []
        gone = {r.get("uid") for r in dangling + waiting}
        return [SetOwnerReferences(key, tuple(r for r in refs if r.get("uid") not in gone))]
    if waiting and graph.dependents.get(str(meta.get("uid") or "")):
        return [Delete(key, FOREGROUND)]
    finalizers = meta.get("finalizers") or []
    if ORPHAN_FINALIZER in finalizers:
        return [Delete(key, ORPHAN)]
    if FOREGROUND_FINALIZER in finalizers:
        return [Delete(key, FOREGROUND)]
    return [Delete(key, BACKGROUND)]


def collect(objects: Iterable[Mapping[str, Any]], *,
            cluster_scoped_kinds: frozenset[str] = CLUSTER_SCOPED_KINDS,
            known_kinds: frozenset[str] | None = None) -> GcActions:
    """One pass of the garbage collector over every object; apply the actions, then call again until empty.

    `objects` may be a subset (an owner's neighbourhood) as long as it holds, for every object in it, all its
    owners and, for every owner being deleted with finalizers, all its dependents. With `known_kinds`, a
    dependent naming an owner of another kind is left alone, as the real collector cannot resolve it."""
    graph = _Graph(objects, cluster_scoped_kinds, known_kinds)
    found: list[Action] = []
    for obj in graph.objects:
        found += _owner_finalizer_actions(graph, obj)
        found += _dependent_actions(graph, obj)
    rewrites = [a for a in found if isinstance(a, SetOwnerReferences)]
    owner_refs = {a.key: a for a in rewrites}
    # an orphaning owner and a dangling owner may both rewrite one dependent: drop every uid either drops
    for action in rewrites:
        earlier = owner_refs[action.key]
        keep = ({r.get("uid") for r in action.owner_references}
                & {r.get("uid") for r in earlier.owner_references})
        owner_refs[action.key] = SetOwnerReferences(
            action.key, tuple(r for r in earlier.owner_references if r.get("uid") in keep))
    deletes = {a.key: a for a in found if isinstance(a, Delete) and a.key not in owner_refs}
    return GcActions(
        delete=tuple(sorted(deletes.values(), key=lambda a: a.key)),
        set_owner_references=tuple(sorted(owner_refs.values(), key=lambda a: a.key)),
        remove_finalizers=tuple(sorted({a for a in found if isinstance(a, RemoveFinalizer)},
                                       key=lambda a: (a.key, a.finalizer))))
