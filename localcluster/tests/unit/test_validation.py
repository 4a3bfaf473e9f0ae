"""What the local API server rejects, in the real server's field paths, words and Status shape."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from localcluster._internal.admission import validation
from localcluster._internal.admission.validation import Cause
from localcluster._internal.apimachinery import names

SUBDOMAIN = names.SUBDOMAIN_MSG
REQ = "FieldValueRequired"
INV = "FieldValueInvalid"
UNS = "FieldValueNotSupported"


def pod(name: str = "w-0", containers: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, **meta},
        "spec": {"containers": containers if containers is not None else [{"name": "main", "image": "i"}]},
    }


def gpu(requests: Any = None, limits: Any = None) -> list[dict[str, Any]]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = {"nvidia.com/gpu": requests}
    if limits is not None:
        resources["limits"] = {"nvidia.com/gpu": limits}
    return [{"name": "main", "image": "i", "resources": resources}]


CASES: list[tuple[str, str, dict[str, Any], list[Cause]]] = [
    ("valid pod", "pods", pod(), []),
    (
        "upper-case name",
        "pods",
        pod("Worker"),
        [Cause("metadata.name", INV, f'Invalid value: "Worker": {SUBDOMAIN}')],
    ),
    (
        "no name",
        "pods",
        pod(""),
        [Cause("metadata.name", REQ, "Required value: name or generateName is required")],
    ),
    ("generateName may end in a dash", "pods", pod("w-abcde", generateName="w-"), []),
    ("name still to be generated", "pods", pod("", generateName="w-"), []),
    (
        "bad generateName",
        "pods",
        pod("W_abcde", generateName="W_"),
        [
            Cause("metadata.generateName", INV, f'Invalid value: "W_": {SUBDOMAIN}'),
            Cause("metadata.name", INV, f'Invalid value: "W_abcde": {SUBDOMAIN}'),
        ],
    ),
    (
        "too long",
        "configmaps",
        {"metadata": {"name": "a" * 254}},
        [Cause("metadata.name", INV, f'Invalid value: "{"a" * 254}": must be no more than 253 characters')],
    ),
    (
        "namespace names are labels",
        "namespaces",
        {"metadata": {"name": "a.b"}},
        [Cause("metadata.name", INV, f'Invalid value: "a.b": {names.LABEL_MSG}')],
    ),
    (
        "service names are DNS-1035",
        "services",
        {"metadata": {"name": "1svc"}, "spec": {"clusterIP": "None"}},
        [Cause("metadata.name", INV, f'Invalid value: "1svc": {names.DNS1035_MSG}')],
    ),
    (
        "RBAC names are path segments",
        "roles",
        {"metadata": {"name": "a/b"}, "rules": []},
        [Cause("metadata.name", INV, "Invalid value: \"a/b\": may not contain '/'")],
    ),
    ("no containers", "pods", pod(containers=[]), [Cause("spec.containers", REQ, "Required value")]),
    (
        "container without name and image",
        "pods",
        pod(containers=[{}]),
        [
            Cause("spec.containers[0].name", REQ, "Required value"),
            Cause("spec.containers[0].image", REQ, "Required value"),
        ],
    ),
    (
        "duplicate container names",
        "pods",
        pod(containers=[{"name": "a", "image": "i"}, {"name": "a", "image": "i"}]),
        [Cause("spec.containers[1].name", "FieldValueDuplicate", 'Duplicate value: "a"')],
    ),
    (
        "GPU request must equal limit",
        "pods",
        pod(containers=gpu("1", "2")),
        [
            Cause(
                "spec.containers[0].resources.requests",
                INV,
                'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2',
            )
        ],
    ),
    (
        "GPUs are whole",
        "pods",
        pod(containers=gpu(limits="0.5")),
        [
            Cause(
                "spec.containers[0].resources.limits[nvidia.com/gpu]",
                INV,
                'Invalid value: "500m": must be an integer',
            )
        ],
    ),
    (
        "GPU request without limit",
        "pods",
        pod(containers=gpu(requests="1")),
        [
            Cause(
                "spec.containers[0].resources.limits",
                REQ,
                "Required value: Limit must be set for non overcommitable resources",
            )
        ],
    ),
    (
        "cpu request above limit",
        "pods",
        pod(
            containers=[
                {"name": "m", "image": "i", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
            ]
        ),
        [
            Cause(
                "spec.containers[0].resources.requests",
                INV,
                'Invalid value: "2": must be less than or equal to cpu limit of 1',
            )
        ],
    ),
    (
        "negative quantity",
        "pods",
        pod(containers=[{"name": "m", "image": "i", "resources": {"limits": {"memory": "-1Gi"}}}]),
        [
            Cause(
                "spec.containers[0].resources.limits[memory]",
                INV,
                'Invalid value: "-1Gi": must be greater than or equal to 0',
            )
        ],
    ),
    (
        "unknown native resource",
        "pods",
        pod(containers=[{"name": "m", "image": "i", "resources": {"limits": {"gpu": "1"}}}]),
        [
            Cause(
                "spec.containers[0].resources.limits[gpu]",
                INV,
                'Invalid value: "gpu": must be a standard resource for containers',
            )
        ],
    ),
    (
        "volumes need a valid name and a source",
        "pods",
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "m", "image": "i"}],
                "volumes": [{"name": "A"}, {"name": "ok", "emptyDir": {}}],
            },
        },
        [
            Cause("spec.volumes[0].name", INV, f'Invalid value: "A": {names.LABEL_MSG}'),
            Cause("spec.volumes[0]", REQ, "Required value: must specify a volume type"),
        ],
    ),
    (
        "mount of an undeclared volume",
        "pods",
        pod(containers=[{"name": "m", "image": "i", "volumeMounts": [{"name": "ssh", "mountPath": "/s"}]}]),
        [Cause("spec.containers[0].volumeMounts[0].name", "FieldValueNotFound", 'Not found: "ssh"')],
    ),
    (
        "bad label key and value",
        "pods",
        pod(labels={"a b": "ok", "k": "-bad"}),
        [
            Cause("metadata.labels", INV, f'Invalid value: "a b": name part {names.QUALIFIED_MSG}'),
            Cause("metadata.labels", INV, f'Invalid value: "-bad": {names.LABEL_VALUE_MSG}'),
        ],
    ),
    (
        "label prefix must be a subdomain",
        "pods",
        pod(labels={"Ex.com/x": "v"}),
        [Cause("metadata.labels", INV, f'Invalid value: "Ex.com/x": prefix part {SUBDOMAIN}')],
    ),
    (
        "owner reference fields",
        "pods",
        pod(ownerReferences=[{"apiVersion": "", "kind": "", "name": "", "uid": ""}]),
        [
            Cause("metadata.ownerReferences.apiVersion", INV, 'Invalid value: "": version must not be empty'),
            Cause("metadata.ownerReferences.kind", INV, 'Invalid value: "": must not be empty'),
            Cause("metadata.ownerReferences.name", INV, 'Invalid value: "": must not be empty'),
            Cause("metadata.ownerReferences.uid", INV, 'Invalid value: "": must not be empty'),
        ],
    ),
    (
        "well-formed owner reference",
        "pods",
        pod(
            ownerReferences=[
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "j", "uid": "u", "controller": True}
            ]
        ),
        [],
    ),
    (
        "configmap keys",
        "configmaps",
        {"metadata": {"name": "c"}, "data": {"ok.key": "", "bad key": "", "..x": ""}},
        [
            Cause("data[bad key]", INV, f'Invalid value: "bad key": {names.CONFIG_KEY_MSG}'),
            Cause("data[..x]", INV, "Invalid value: \"..x\": must not start with '..'"),
        ],
    ),
    (
        "rolebinding to an unknown kind",
        "rolebindings",
        {
            "metadata": {"name": "b"},
            "roleRef": {"kind": "Thing", "name": "r"},
            "subjects": [{"kind": "User"}],
        },
        [
            Cause(
                "roleRef.kind",
                "FieldValueNotSupported",
                'Unsupported value: "Thing": supported values: "Role", "ClusterRole"',
            ),
            Cause("subjects[0].name", REQ, "Required value"),
        ],
    ),
    (
        "clusterrolebinding: ClusterRole only, service accounts need a namespace, apiGroups checked",
        "clusterrolebindings",
        {
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac", "kind": "Role", "name": "r"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "sa", "apiGroup": "v1"},
                {"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"},
                {"kind": "Group", "name": "g", "apiGroup": "x"},
            ],
        },
        [
            Cause(
                "roleRef.apiGroup",
                UNS,
                'Unsupported value: "rbac": supported values: "rbac.authorization.k8s.io"',
            ),
            Cause("roleRef.kind", UNS, 'Unsupported value: "Role": supported values: "ClusterRole"'),
            Cause("subjects[0].apiGroup", UNS, 'Unsupported value: "v1": supported values: ""'),
            Cause("subjects[0].namespace", REQ, "Required value"),
            Cause(
                "subjects[2].apiGroup",
                UNS,
                'Unsupported value: "x": supported values: "rbac.authorization.k8s.io"',
            ),
        ],
    ),
    (
        "policy rules",
        "roles",
        {
            "metadata": {"name": "r"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"resources": ["pods"]},
                {"nonResourceURLs": ["/x"], "resources": ["pods"], "verbs": ["get"]},
            ],
        },
        [
            Cause("rules[1].verbs", REQ, "Required value: verbs must contain at least one value"),
            Cause(
                "rules[1].apiGroups", REQ, "Required value: resource rules must supply at least one api group"
            ),
            Cause(
                "rules[2].nonResourceURLs",
                INV,
                'Invalid value: []string{"/x"}: namespaced rules cannot apply to non-resource URLs',
            ),
            Cause(
                "rules[2].nonResourceURLs",
                INV,
                'Invalid value: []string{"/x"}: rules cannot apply to both regular resources and '
                "non-resource URLs",
            ),
        ],
    ),
    (
        "service ports",
        "services",
        {
            "metadata": {"name": "svc"},
            "spec": {"ports": [{"port": 22}, {"name": "a", "port": 0}, {"name": "a", "port": 80}]},
        },
        [
            Cause("spec.ports[0].name", REQ, "Required value"),
            Cause("spec.ports[1].port", INV, "Invalid value: 0: must be between 1 and 65535, inclusive"),
            Cause("spec.ports[2].name", "FieldValueDuplicate", 'Duplicate value: "a"'),
        ],
    ),
    (
        "a service needs ports",
        "services",
        {"metadata": {"name": "svc"}, "spec": {}},
        [Cause("spec.ports", REQ, "Required value")],
    ),
    (
        "typed secrets need their keys",
        "secrets",
        {"metadata": {"name": "s"}, "type": "kubernetes.io/ssh-auth", "data": {"id": "eA=="}},
        [Cause("data[ssh-privatekey]", REQ, "Required value")],
    ),
    (
        "stringData counts for typed secrets",
        "secrets",
        {
            "metadata": {"name": "s"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "c", "tls.key": "k"},
        },
        [],
    ),
    (
        "annotations are limited to 256 KiB in total",
        "configmaps",
        {"metadata": {"name": "c", "annotations": {"a": "x" * 262144}}},
        [Cause("metadata.annotations", "FieldValueTooLong", "Too long: may not be more than 262144 bytes")],
    ),
]


@pytest.mark.parametrize(("resource", "obj", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate(resource: str, obj: dict[str, Any], expected: list[Cause]) -> None:
    assert validation.validate(resource, obj) == expected


def test_status_invalid_one_cause() -> None:
    causes = validation.validate("pods", pod("x", containers=[{"name": "main"}]))
    assert validation.status_invalid("Pod", "x", causes) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Pod "x" is invalid: spec.containers[0].image: Required value',
        "reason": "Invalid",
        "details": {
            "name": "x",
            "kind": "Pod",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value",
                    "field": "spec.containers[0].image",
                }
            ],
        },
        "code": 422,
    }


def test_status_invalid_several_causes_and_group() -> None:
    causes = [validation.required("roleRef.name"), validation.required("subjects[0].name")]
    body = validation.status_invalid("RoleBinding", "b", causes, group="rbac.authorization.k8s.io")
    assert body["message"] == (
        'RoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.name: Required value, '
        "subjects[0].name: Required value]"
    )
    assert body["details"]["group"] == "rbac.authorization.k8s.io"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (base64.b64encode(b"hello").decode(), None),
        (
            "aGVsbG8",
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 4',
        ),
        (
            "not base64!",
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3',
        ),
        ("aGk=\n", None),
        ("a===", 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 1'),
    ],
)
def test_secret_data_must_be_base64(data: str, expected: str | None) -> None:
    assert validation.decode_error("secrets", {"data": {"k": data}}) == expected


def test_canonical_quantities() -> None:
    assert [validation.canonical_quantity(q) for q in ("2", "0.5", "1.5", "2Gi", "100m", 3)] == [
        "2",
        "500m",
        "1500m",
        "2Gi",
        "100m",
        "3",
    ]
