"""Required node affinity as the scheduler reads it: whether a node matches a pod's nodeSelectorTerms.

Terms are ORed; within a term every `matchExpressions` entry (on the node's labels) and every `matchFields`
entry (only `metadata.name` exists) must match; an empty term matches no node. Operators In, NotIn, Exists,
DoesNotExist, Gt, Lt (integers). Pure; the inventory judges a node's eligibility with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Term = Mapping[str, Any]


def _matches(expression: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator = str(expression.get("key", "")), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in values_of
    if operator == "In":
        return present and values_of[key] in values
    if operator == "NotIn":
        return not present or values_of[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def term_matches(term: Term, node: Mapping[str, Any]) -> bool:
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    node_fields = {"metadata.name": str(meta.get("name") or "")}
    return (all(_matches(e, labels) for e in expressions)
            and all(_matches(f, node_fields) for f in fields))


def matches(terms: Sequence[Term], node: Mapping[str, Any]) -> bool:
    """Whether `node` matches required node affinity of `terms` (no terms: every node)."""
    return not terms or any(term_matches(term, node) for term in terms)


def describe(terms: Sequence[Term]) -> str:
    """The terms as a person reads them: `a In [x] and b Exists, or c NotIn [y]`."""
    def one(term: Term) -> str:
        parts = [f"{e.get('key')} {e.get('operator')}" + (f" [{', '.join(map(str, e['values']))}]"
                                                          if e.get("values") else "")
                 for e in [*(term.get("matchExpressions") or []), *(term.get("matchFields") or [])]]
        return " and ".join(parts) or "(empty term)"
    return ", or ".join(one(t) for t in terms)
