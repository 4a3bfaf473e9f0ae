"""Pod tolerations: the type, Kubernetes' matching rule against a node's taints, what every job pod tolerates,
and the one parser of `--toleration` / DT_TOLERATIONS (`distributetrain run`, `plan` and `inventory` alike).

A pod is built from these (manifests.py) and a node's eligibility is judged by them (inventory.py); neither
reaches into the other for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain import naming
from distributetrain.errors import InvalidInput

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

SYNTAX = """\
KEY[=VALUE][:EFFECT], as `kubectl taint` writes taints. Without =VALUE the key is matched whatever its value
(operator Exists); with =VALUE the value must be equal (operator Equal). Without :EFFECT every effect is
tolerated; EFFECT is NoSchedule, PreferNoSchedule or NoExecute. KEY `*` tolerates every taint.
Examples: dedicated=ml:NoSchedule, example.com/spot, *"""


@dataclass(frozen=True)
class Toleration:
    """A pod toleration (see `tolerates`); `str()` gives it back in the --toleration syntax."""

    key: str = ""
    operator: str = "Exists"  # "Exists" or "Equal"
    value: str = ""
    effect: str = ""  # "" (any), "NoSchedule", "PreferNoSchedule" or "NoExecute"

    def to_dict(self) -> dict[str, str]:
        """The toleration as it goes into a pod spec."""
        out = {"key": self.key} if self.key else {}
        out["operator"] = self.operator
        if self.operator == "Equal":
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out

    def __str__(self) -> str:
        text = self.key or "*"
        if self.operator == "Equal":
            text += f"={self.value}"
        return f"{text}:{self.effect}" if self.effect else text


def tolerates(toleration: Toleration, taint: Mapping[str, Any]) -> bool:
    """Kubernetes' matching rule: an empty key with Exists tolerates every taint, an empty effect any effect,
    Equal compares values (a missing value is "")."""
    if toleration.effect and toleration.effect != taint.get("effect"):
        return False
    if toleration.key and toleration.key != taint.get("key"):
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.value or "") == (taint.get("value") or "")


def default_tolerations(resource: str = naming.DEFAULT_RESOURCE) -> tuple[Toleration, ...]:
    """What every worker tolerates: GPU nodes are usually tainted `nvidia.com/gpu`, and the
    ExtendedResourceToleration admission plugin tolerates a taint named after the requested resource."""
    keys = dict.fromkeys([naming.DEFAULT_RESOURCE, resource])
    return tuple(Toleration(key=key, operator="Exists") for key in keys)


def job_tolerations(resource: str, extra: tuple[Toleration, ...] = ()) -> tuple[Toleration, ...]:
    """What job pods tolerate: the GPU resource's own taints (default_tolerations), then the user's."""
    own = default_tolerations(resource)
    return (*own, *[t for t in extra if t not in own])


def parse_toleration(text: str) -> Toleration:
    """Parse one --toleration value (syntax: SYNTAX); keys and values must be valid label keys and values."""
    spec, _, effect = text.strip().rpartition(":") if ":" in text else (text.strip(), "", "")
    if effect:
        match = [known for known in EFFECTS if known.lower() == effect.lower()]
        if not match:
            raise InvalidInput(f"--toleration {text!r}: effect {effect!r} is not one of {', '.join(EFFECTS)} "
                               f"(syntax: KEY[=VALUE][:EFFECT], e.g. dedicated=ml:NoSchedule)")
        effect = match[0]
    key, equals, value = spec.partition("=")
    key = key.strip()
    if not key:
        raise InvalidInput(f"--toleration {text!r}: the taint key is missing "
                           "(syntax: KEY[=VALUE][:EFFECT]; use * for every key)")
    if key == "*":
        if equals:
            raise InvalidInput(f"--toleration {text!r}: * matches every key, it cannot take a value")
        return Toleration(key="", operator="Exists", effect=effect)
    if any(ch.isspace() for ch in key + value) or ":" in key:
        raise InvalidInput(f"--toleration {text!r}: keys and values cannot contain spaces or ':'")
    if equals:
        return _checked(Toleration(key=key, operator="Equal", value=value.strip(), effect=effect))
    return _checked(Toleration(key=key, operator="Exists", effect=effect))


def _from_dict(item: Any) -> Toleration:
    if not isinstance(item, dict) or set(item) - {"key", "operator", "value", "effect"}:
        raise InvalidInput(f"{item!r} must be an object with key, operator, value, effect")
    operator = item.get("operator", "Equal")
    key, value = str(item.get("key") or ""), str(item.get("value") or "")
    effect = str(item.get("effect") or "")
    if operator not in ("Equal", "Exists"):
        raise InvalidInput(f"{item!r}: operator must be Equal or Exists")
    if effect and effect not in EFFECTS:
        raise InvalidInput(f"{item!r}: effect {effect!r} is not one of {', '.join(EFFECTS)}")
    if not key and operator != "Exists":
        raise InvalidInput(f"{item!r}: an empty key needs operator Exists")
    if operator == "Exists" and value:
        raise InvalidInput(f"{item!r}: operator Exists takes no value")
    return _checked(Toleration(key=key, operator=operator, value=value, effect=effect))


def _checked(toleration: Toleration) -> Toleration:
    if toleration.key:
        naming.check_qualified_name(toleration.key)
    naming.check_label_value(toleration.value)
    return toleration


def parse_tolerations(value: Any) -> tuple[Toleration, ...]:
    """Tolerations from repeated --toleration values (a list), DT_TOLERATIONS (one string: comma-separated
    KEY[=VALUE][:EFFECT], or a JSON list of tolerations), or Toleration objects and dicts."""
    if isinstance(value, list | tuple):
        items: list[Any] = list(value)
    else:
        text = str(value).strip()
        if text.startswith(("[", "{")):
            try:
                loaded = json.loads(text)
            except json.JSONDecodeError as err:
                raise InvalidInput(f"{value!r} is not valid JSON: {err}") from None
            items = loaded if isinstance(loaded, list) else [loaded]
        else:
            items = [part for part in text.split(",") if part.strip()]
    out: list[Toleration] = []
    for item in items:
        if isinstance(item, Toleration):
            out.append(_checked(item))
        elif isinstance(item, dict):
            out.append(_from_dict(item))
        else:
            out.append(parse_toleration(str(item)))
    return tuple(out)
