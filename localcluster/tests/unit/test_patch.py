"""JSON merge patch, strategic merge patch (as kubectl sends it) and JSON patch on whole objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster._internal.apimachinery.patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)


def c(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


POD: dict[str, Any] = {
    "kind": "Pod",
    "metadata": {
        "name": "w-0",
        "labels": {"app": "x", "tier": "y"},
        "finalizers": ["a/one", "a/two"],
        "ownerReferences": [{"uid": "u1", "name": "j", "kind": "ConfigMap", "apiVersion": "v1"}],
    },
    "spec": {
        "containers": [
            c(
                "main",
                image="img:1",
                env=[c("A", value="1"), c("B", value="2")],
                ports=[{"containerPort": 22, "name": "ssh"}],
                volumeMounts=[{"name": "ssh", "mountPath": "/ssh"}],
            ),
            c("side", image="side:1"),
        ],
        "volumes": [{"name": "ssh", "secret": {"secretName": "s"}}],
        "tolerations": [{"key": "a", "operator": "Exists"}],
    },
}


def with_spec(**spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(POD)
    out["spec"].update(spec)
    return out


def with_meta(**meta: Any) -> dict[str, Any]:
    out = copy.deepcopy(POD)
    out["metadata"].update(meta)
    return out


MAIN = POD["spec"]["containers"][0]
SIDE = POD["spec"]["containers"][1]

STRATEGIC: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "container merged by name, others kept",
        {"spec": {"containers": [c("main", image="img:2")]}},
        with_spec(containers=[{**MAIN, "image": "img:2"}, SIDE]),
    ),
    (
        "new container goes before the live-only ones (mergeSortedSlice)",
        {"spec": {"containers": [c("extra", image="e")]}},
        with_spec(containers=[c("extra", image="e"), MAIN, SIDE]),
    ),
    (
        "kubectl apply: $setElementOrder fixes the order",
        {
            "spec": {
                "$setElementOrder/containers": [c("main"), c("side"), c("extra")],
                "containers": [c("extra", image="e")],
            }
        },
        with_spec(containers=[MAIN, SIDE, c("extra", image="e")]),
    ),
    (
        "env merged by name inside a container",
        {"spec": {"containers": [c("main", env=[c("B", value="two"), c("C", value="3")])]}},
        with_spec(
            containers=[{**MAIN, "env": [c("A", value="1"), c("B", value="two"), c("C", value="3")]}, SIDE]
        ),
    ),
    (
        "$patch: delete removes one element",
        {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
        with_spec(containers=[MAIN]),
    ),
    (
        "$patch: replace replaces the whole list",
        {"spec": {"containers": [c("only", image="o"), {"$patch": "replace"}]}},
        with_spec(containers=[c("only", image="o")]),
    ),
    (
        "$patch: replace on a map",
        {"metadata": {"labels": {"$patch": "replace", "new": "1"}}},
        with_meta(labels={"new": "1"}),
    ),
    ("$patch: delete on a map", {"metadata": {"labels": {"$patch": "delete"}}}, with_meta(labels={})),
    ("null deletes a key", {"metadata": {"labels": {"tier": None}}}, with_meta(labels={"app": "x"})),
    (
        "ports merged by containerPort, volumeMounts by mountPath",
        {
            "spec": {
                "containers": [
                    c(
                        "main",
                        ports=[{"containerPort": 22, "protocol": "TCP"}],
                        volumeMounts=[{"name": "hf", "mountPath": "/hf"}],
                    )
                ]
            }
        },
        with_spec(
            containers=[
                {
                    **MAIN,
                    "ports": [{"containerPort": 22, "name": "ssh", "protocol": "TCP"}],
                    "volumeMounts": [
                        {"name": "hf", "mountPath": "/hf"},
                        {"name": "ssh", "mountPath": "/ssh"},
                    ],
                },
                SIDE,
            ]
        ),
    ),
    (
        "tolerations have no merge key: replaced",
        {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}},
        with_spec(tolerations=[{"key": "b", "operator": "Exists"}]),
    ),
    (
        "$retainKeys switches a volume's source",
        {
            "spec": {
                "volumes": [{"name": "ssh", "$retainKeys": ["configMap", "name"], "configMap": {"name": "c"}}]
            }
        },
        with_spec(volumes=[{"name": "ssh", "configMap": {"name": "c"}}]),
    ),
    (
        "finalizers are a set",
        {"metadata": {"finalizers": ["a/two", "a/three"]}},
        with_meta(finalizers=["a/one", "a/two", "a/three"]),
    ),
    (
        "$deleteFromPrimitiveList",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]}},
        with_meta(finalizers=["a/two"]),
    ),
    (
        "ownerReferences merge by uid",
        {"metadata": {"ownerReferences": [{"uid": "u2", "name": "k", "kind": "Secret", "apiVersion": "v1"}]}},
        with_meta(
            ownerReferences=[
                {"uid": "u2", "name": "k", "kind": "Secret", "apiVersion": "v1"},
                POD["metadata"]["ownerReferences"][0],
            ]
        ),
    ),
]


@pytest.mark.parametrize(("patch", "expected"), [c[1:] for c in STRATEGIC], ids=[c[0] for c in STRATEGIC])
def test_strategic_merge_patch(patch: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(POD)
    assert strategic_merge_patch(POD, patch, kind="Pod") == expected
    assert before == POD


def test_strategic_merge_on_unknown_kind_replaces_lists() -> None:
    role = {"kind": "Role", "metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]}
    assert strategic_merge_patch(role, {"rules": [{"verbs": ["*"]}]}, kind="Role") == {
        "kind": "Role",
        "metadata": {"name": "r"},
        "rules": [{"verbs": ["*"]}],
    }


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"spec": {"containers": [{"image": "x"}]}},
            "map: {'image': 'x'} does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"name": "main", "$patch": "merge"}]}},
            "merging lists cannot yet be specified in the patch",
        ),
        ({"metadata": {"$patch": "bogus"}}, "Unknown patch type: bogus in map: {'$patch': 'bogus'}"),
    ],
)
def test_strategic_merge_errors(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch(POD, patch, kind="Pod")
    assert (caught.value.code, str(caught.value)) == (400, message)


def test_merge_patch() -> None:
    patch = {"metadata": {"labels": {"tier": None, "new": "1"}}, "spec": {"tolerations": []}}
    expected = with_meta(labels={"app": "x", "new": "1"})
    expected["spec"]["tolerations"] = []
    assert merge_patch(POD, patch) == expected
    assert merge_patch({"a": 1}, [1, 2]) == [1, 2]


DOC = {"metadata": {"name": "x", "labels": {"a/b": "1"}}, "spec": {"list": [1, 2, 3]}}
JSON_PATCHES = [
    (
        [{"op": "add", "path": "/metadata/labels/new", "value": "2"}],
        {"metadata": {"name": "x", "labels": {"a/b": "1", "new": "2"}}, "spec": {"list": [1, 2, 3]}},
    ),
    (
        [{"op": "remove", "path": "/metadata/labels/a~1b"}],
        {"metadata": {"name": "x", "labels": {}}, "spec": {"list": [1, 2, 3]}},
    ),
    (
        [
            {"op": "replace", "path": "/spec/list/0", "value": 9},
            {"op": "add", "path": "/spec/list/-", "value": 4},
        ],
        {"metadata": {"name": "x", "labels": {"a/b": "1"}}, "spec": {"list": [9, 2, 3, 4]}},
    ),
    (
        [{"op": "move", "from": "/metadata/name", "path": "/spec/name"}],
        {"metadata": {"labels": {"a/b": "1"}}, "spec": {"list": [1, 2, 3], "name": "x"}},
    ),
    (
        [
            {"op": "copy", "from": "/spec/list/1", "path": "/spec/list/0"},
            {"op": "test", "path": "/spec/list/0", "value": 2},
        ],
        {"metadata": {"name": "x", "labels": {"a/b": "1"}}, "spec": {"list": [2, 1, 2, 3]}},
    ),
]


@pytest.mark.parametrize(("patch", "expected"), JSON_PATCHES)
def test_json_patch(patch: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert json_patch(DOC, patch) == expected


@pytest.mark.parametrize(
    ("patch", "detail"),
    [
        (
            [{"op": "test", "path": "/metadata/name", "value": "y"}],
            "testing value /metadata/name failed: test failed",
        ),
        (
            [{"op": "remove", "path": "/metadata/missing"}],
            "Unable to remove nonexistent key: missing: missing value",
        ),
        (
            [{"op": "replace", "path": "/spec/missing", "value": 1}],
            "replace operation does not apply: doc is missing key: /spec/missing: missing value",
        ),
        (
            [{"op": "add", "path": "/nope/deeper", "value": 1}],
            'add operation does not apply: doc is missing path: "/nope/deeper": missing value',
        ),
        (
            [{"op": "add", "path": "/spec/list/7", "value": 1}],
            "Unable to access invalid index: 7: invalid index referenced",
        ),
    ],
)
def test_json_patch_failures_are_422(patch: list[dict[str, Any]], detail: str) -> None:
    with pytest.raises(PatchError) as caught:
        json_patch(DOC, patch)
    assert caught.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid",
        "code": 422,
        "details": {"causes": [{"reason": "UnexpectedServerResponse", "message": detail}]},
    }


def test_json_patch_must_be_a_list() -> None:
    with pytest.raises(PatchError) as caught:
        json_patch(DOC, {"op": "add"})
    assert caught.value.code == 400
