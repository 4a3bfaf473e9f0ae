"""Label and field selectors: parsing, matching, and the errors that become 400 BadRequest."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.apimachinery import selectors
from localcluster._internal.apimachinery.selectors import (
    FieldRequirement,
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectorError,
)

PARSED = [
    ("", LabelSelector()),
    ("app=web", LabelSelector((Requirement("app", "=", ("web",)),))),
    (
        "app==web,tier!=db",
        LabelSelector((Requirement("app", "==", ("web",)), Requirement("tier", "!=", ("db",)))),
    ),
    (
        "env in (prod, staging),team notin (x)",
        LabelSelector((Requirement("env", "in", ("prod", "staging")), Requirement("team", "notin", ("x",)))),
    ),
    (
        "distributetrain.io/job,!canary",
        LabelSelector((Requirement("distributetrain.io/job", "exists"), Requirement("canary", "!"))),
    ),
    ("gen>3,gen<10", LabelSelector((Requirement("gen", "gt", ("3",)), Requirement("gen", "lt", ("10",))))),
    ("empty=", LabelSelector((Requirement("empty", "=", ("",)),))),
    ("x in (b,a,b)", LabelSelector((Requirement("x", "in", ("a", "b")),))),
    ("x in ()", LabelSelector((Requirement("x", "in", ("",)),))),
    ("x notin (a,)", LabelSelector((Requirement("x", "notin", ("", "a")),))),
]


@pytest.mark.parametrize(("text", "expected"), PARSED)
def test_parse_label_selector(text: str, expected: LabelSelector) -> None:
    assert selectors.parse_label_selector(text) == expected


LABELS = {"app": "web", "env": "prod", "gen": "4"}
MATCHES = [
    ("", True),
    ("app=web", True),
    ("app=db", False),
    ("app!=db", True),
    ("missing!=x", True),
    ("env in (prod,dev)", True),
    ("env notin (prod)", False),
    ("missing notin (a)", True),
    ("missing in (a)", False),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("gen>3", True),
    ("gen<4", False),
    ("app>1", False),
    ("app=web,env=dev", False),
]


@pytest.mark.parametrize(("text", "expected"), MATCHES)
def test_label_matching(text: str, expected: bool) -> None:
    assert selectors.parse_label_selector(text).matches(LABELS) is expected


ERRORS = [
    ("app=web,", "found '', expected: identifier after ','"),
    ("a b=c", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("app in (a", "found '', expected: ',' or ')'"),
    ("app in (a b)", "found 'b', expected: ',' or ')'"),
    ("app in a", "found 'a' expected: '('"),
    ("=x", "found '=', expected: !, identifier, or 'end of string'"),
    ("app=a=b", "found '=', expected: ',' or 'end of string'"),
    (
        "gen>x",
        "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value "
        "must be an integer",
    ),
    (
        "-bad=x",
        'unable to parse requirement: key: Invalid value: "-bad": name part must consist of alphanumeric '
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  "
        "or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_label_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        selectors.parse_label_selector(text)
    assert str(caught.value) == message


def test_parse_field_selector() -> None:
    assert selectors.parse_field_selector(
        r"metadata.name=a\,b,status.phase!=Running,spec.nodeName=="
    ) == FieldSelector(
        (
            FieldRequirement("metadata.name", "=", "a,b"),
            FieldRequirement("status.phase", "!=", "Running"),
            FieldRequirement("spec.nodeName", "=", ""),
        )
    )
    with pytest.raises(SelectorError) as caught:
        selectors.parse_field_selector("metadata.name")
    assert str(caught.value) == "invalid selector: 'metadata.name'; can't understand 'metadata.name'"


POD: dict[str, Any] = {
    "metadata": {"name": "w-0", "namespace": "team"},
    "spec": {"nodeName": "node-2", "hostNetwork": False},
    "status": {"phase": "Running"},
}
FIELD_MATCHES = [
    ("metadata.name=w-0", True),
    ("metadata.namespace=team,spec.nodeName=node-2", True),
    ("spec.nodeName!=node-2", False),
    ("status.phase==Running", True),
    ("status.podIP=", True),
    ("spec.hostNetwork=false", True),
    ("status.phase!=Pending,metadata.name=w-1", False),
]


@pytest.mark.parametrize(("text", "expected"), FIELD_MATCHES)
def test_field_matching(text: str, expected: bool) -> None:
    selector = selectors.parse_field_selector(text)
    selectors.check_field_labels("pods", selector)
    assert selector.matches(selectors.field_values("pods", POD)) is expected


def test_events_select_on_involved_object_like_kubectl_describe() -> None:
    event = {
        "metadata": {"name": "e", "namespace": "team"},
        "type": "Warning",
        "reason": "FailedScheduling",
        "involvedObject": {"kind": "Pod", "name": "w-0", "namespace": "team", "uid": "u1"},
        "source": {"component": "default-scheduler"},
    }
    selector = selectors.parse_field_selector(
        "involvedObject.name=w-0,involvedObject.namespace=team,involvedObject.uid=u1,source=default-scheduler"
    )
    selectors.check_field_labels("events", selector)
    assert selector.matches(selectors.field_values("events", event))


def test_unsupported_field_label() -> None:
    selector = selectors.parse_field_selector("spec.foo=bar")
    with pytest.raises(SelectorError) as caught:
        selectors.check_field_labels("pods", selector)
    assert selectors.list_error_message("", "v1", "pods", "", "spec.foo=bar", caught.value) == (
        'Unable to find "/v1, Resource=pods" that match label selector "", field selector "spec.foo=bar": '
        "field label not supported: spec.foo"
    )
    with pytest.raises(SelectorError, match=r"field label not supported: metadata\.namespace"):
        selectors.check_field_labels("nodes", selectors.parse_field_selector("metadata.namespace=x"))
