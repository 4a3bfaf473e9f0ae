"""Tolerations: Kubernetes' matching rule and the one parser of --toleration / DT_TOLERATIONS."""

from __future__ import annotations

import pytest

from distributetrain.errors import InvalidInput
from distributetrain.placement.tolerations import (
    Toleration,
    job_tolerations,
    parse_toleration,
    parse_tolerations,
    tolerates,
)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        # an empty key with Exists tolerates every taint; a missing value is ""; an effect must match if set
        (Toleration("", "Exists"), {"key": "x", "effect": "NoExecute"}, True),
        (Toleration("x", "Equal", "1", "NoSchedule"), {"key": "x", "value": "1", "effect": "NoSchedule"},
         True),
        (Toleration("x", "Equal", "1"), {"key": "x", "value": "2", "effect": "NoSchedule"}, False),
        (Toleration("x", "Equal", ""), {"key": "x", "effect": "NoSchedule"}, True),
        (Toleration("x", "Equal", ""), {"key": "x", "value": "v", "effect": "NoSchedule"}, False),
        (Toleration("y", "Exists"), {"key": "x", "effect": "NoSchedule"}, False),
        (Toleration("x", "Exists", "", "NoExecute"), {"key": "x", "effect": "NoSchedule"}, False),
    ],
)
def test_tolerates_follows_kubernetes_matching_rule(toleration: Toleration, taint: dict[str, str],
                                                    expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


@pytest.mark.parametrize(
    ("text", "expected", "pod_spec"),
    [
        (
            "dedicated=ml:NoSchedule",
            Toleration("dedicated", "Equal", "ml", "NoSchedule"),
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        ),
        (
            "dedicated=ml",
            Toleration("dedicated", "Equal", "ml"),
            {"key": "dedicated", "operator": "Equal", "value": "ml"},
        ),
        (
            "example.com/spot",
            Toleration("example.com/spot", "Exists"),
            {"key": "example.com/spot", "operator": "Exists"},
        ),
        (
            "example.com/spot:noexecute",
            Toleration("example.com/spot", "Exists", effect="NoExecute"),
            {"key": "example.com/spot", "operator": "Exists", "effect": "NoExecute"},
        ),
        (
            "empty=:PreferNoSchedule",
            Toleration("empty", "Equal", "", "PreferNoSchedule"),
            {"key": "empty", "operator": "Equal", "value": "", "effect": "PreferNoSchedule"},
        ),
        ("*", Toleration("", "Exists"), {"operator": "Exists"}),
        (
            "*:NoSchedule",
            Toleration("", "Exists", effect="NoSchedule"),
            {"operator": "Exists", "effect": "NoSchedule"},
        ),
    ],
)
def test_parse_toleration(text: str, expected: Toleration, pod_spec: dict[str, str]) -> None:
    parsed = parse_toleration(text)
    assert parsed == expected
    assert parsed.to_dict() == pod_spec
    assert parse_toleration(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the taint key is missing"),
        ("=ml:NoSchedule", "the taint key is missing"),
        ("dedicated:Exists", "effect 'Exists' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
        ("dedicated=ml:Never", "effect 'Never'"),
        ("*=x", "cannot take a value"),
        ("my key=1", "cannot contain spaces"),
    ],
)
def test_parse_toleration_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        parse_toleration(text)
    assert f"--toleration {text!r}" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["dedicated=ml:NoSchedule", "*"], (Toleration("dedicated", "Equal", "ml", "NoSchedule"),
                                            Toleration())),
        ("dedicated=ml:NoSchedule,example.com/spot", (Toleration("dedicated", "Equal", "ml", "NoSchedule"),
                                                      Toleration("example.com/spot"))),
        ('[{"key": "dedicated", "operator": "Equal", "value": "ml"}]',
         (Toleration("dedicated", "Equal", "ml"),)),
        ('{"operator": "Exists"}', (Toleration(),)),
        ([], ()),
    ],
)
def test_parse_tolerations_from_flags_env_and_json(value: object, expected: tuple[Toleration, ...]) -> None:
    assert parse_tolerations(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["bad!key"], "name 'bad!key' must be 1-63 characters"),  # the same rule for run, plan and inventory
        (["key=bad value!"], "cannot contain spaces"),
        ('[{"key": "k", "operator": "Maybe"}]', "operator must be Equal or Exists"),
        ('[{"operator": "Equal"}]', "an empty key needs operator Exists"),
        ("[", "is not valid JSON"),
    ],
)
def test_parse_tolerations_errors(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_tolerations(value)


def test_job_tolerations_put_the_resources_own_first_once() -> None:
    user = (Toleration("nvidia.com/gpu"), Toleration("dedicated", "Equal", "ml"))
    assert job_tolerations("amd.com/gpu", user) == (
        Toleration("nvidia.com/gpu"), Toleration("amd.com/gpu"), Toleration("dedicated", "Equal", "ml"))
