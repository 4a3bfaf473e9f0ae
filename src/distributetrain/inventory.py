"""GPU accounting per node and whether a worker may go there, from Node and Pod objects as the API gives them.

Input is plain JSON dicts (camelCase, as `kubectl get -o json` or a raw API list gives them), so the same code
serves a live cluster, a file, and the local cluster. Eligibility follows the scheduler's own filters that a
worker pod meets: Ready, not cordoned, taints (NoSchedule/NoExecute only) against the worker's tolerations,
and the worker's node selector.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from distributetrain.errors import InvalidInput, InvalidQuantity
from distributetrain.naming import DEFAULT_RESOURCE
from distributetrain.quantity import parse_count
from distributetrain.resources import holds_resources, pod_requests

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_EXCLUDING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule is only a preference


class TolerationLike(Protocol):
    """Anything shaped like a pod toleration (ours, or config's); None and "" both mean "any"."""

    @property
    def key(self) -> str | None: ...
    @property
    def operator(self) -> str: ...
    @property
    def value(self) -> str | None: ...
    @property
    def effect(self) -> str | None: ...


def tolerates(toleration: TolerationLike, taint: Mapping[str, Any]) -> bool:
    """Kubernetes' matching rule: an empty key with Exists tolerates every taint, an empty effect any effect,
    Equal compares values (a missing value is "")."""
    if toleration.effect and toleration.effect != taint.get("effect"):
        return False
    if toleration.key and toleration.key != taint.get("key"):
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.value or "") == (taint.get("value") or "")


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


def default_tolerations(resource: str = DEFAULT_RESOURCE) -> tuple[Toleration, ...]:
    """What every worker tolerates: GPU nodes are usually tainted `nvidia.com/gpu`, and the
    ExtendedResourceToleration admission plugin tolerates a taint named after the requested resource."""
    keys = dict.fromkeys([DEFAULT_RESOURCE, resource])
    return tuple(Toleration(key=key, operator="Exists") for key in keys)


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPU accounting; `reason` says why a worker may not go there (None when eligible)."""

    node: str
    allocatable: int
    requested: int
    free: int
    eligible: bool
    reason: str | None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "allocatable": self.allocatable, "requested": self.requested,
                "free": self.free, "eligible": self.eligible, "reason": self.reason}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _pod_label(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _ready(node: Mapping[str, Any]) -> str | None:
    """None when Ready is True, else what it is."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            status = condition.get("status")
            return None if status == "True" else f"not Ready (Ready={status})"
    return "not Ready (no Ready condition)"


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def node_exclusions(node: Mapping[str, Any], *, tolerations: Sequence[TolerationLike],
                    node_selector: Mapping[str, str]) -> list[str]:
    """Every reason a worker pod may not be scheduled on `node` (empty when it may)."""
    reasons: list[str] = []
    not_ready = _ready(node)
    if not_ready:
        reasons.append(not_ready)
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        reasons.append("cordoned (spec.unschedulable)")
    for taint in spec.get("taints") or []:
        if taint.get("effect") in _EXCLUDING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            reasons.append(f"untolerated taint {_taint_text(taint)}")
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, wanted in node_selector.items():
        if labels.get(key) != wanted:
            have = f"{key}={labels[key]}" if key in labels else f"no label {key}"
            reasons.append(f"node selector {key}={wanted} does not match ({have})")
    return reasons


def _mentions(pod: Mapping[str, Any], resource: str) -> bool:
    """Whether any container, init container or the overhead names `resource`: most pods in a cluster do not,
    and skipping their exact quantity arithmetic keeps a 100,000-pod inventory fast."""
    spec = pod.get("spec") or {}
    if resource in (spec.get("overhead") or {}):
        return True
    for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
        resources = container.get("resources") or {}
        if resource in (resources.get("limits") or {}) or resource in (resources.get("requests") or {}):
            return True
    return False


def _pod_count(pod: Mapping[str, Any], resource: str, node: str) -> int:
    if not _mentions(pod, resource):
        return 0
    try:
        amount = pod_requests(pod).get(resource)
    except InvalidQuantity as err:
        raise InvalidQuantity(f"pod {_pod_label(pod)} on node {node}: {err}") from None
    if amount is None:
        return 0
    if amount.denominator != 1:
        raise InvalidQuantity(f"pod {_pod_label(pod)} on node {node} requests {float(amount):g} {resource}: "
                              "not a whole number; extended resources such as GPUs cannot be fractional")
    return int(amount)


def inventory(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *,
              resource: str = DEFAULT_RESOURCE, tolerations: Sequence[TolerationLike] | None = None,
              node_selector: Mapping[str, str] | None = None) -> tuple[NodeGpus, ...]:
    """Per node, sorted by name: allocatable, requested by pods holding resources there, free, eligibility.

    `tolerations` are exactly those the worker pods carry (default: `default_tolerations(resource)`); to add
    some, pass them together with the defaults.
    """
    tolerations = default_tolerations(resource) if tolerations is None else tuple(tolerations)
    selector = dict(node_selector or {})
    requested: dict[str, int] = {}
    for pod in pods:
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound and holds_resources(pod):
            count = _pod_count(pod, resource, bound)
            if count:
                requested[bound] = requested.get(bound, 0) + count
    rows: list[NodeGpus] = []
    for node in nodes:
        name = _name(node)
        if not name:
            raise InvalidInput("a Node object has no metadata.name")
        raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)
        allocatable = parse_count(raw, what=f"node {name} status.allocatable.{resource}")
        used = requested.get(name, 0)
        reasons = node_exclusions(node, tolerations=tolerations, node_selector=selector)
        if allocatable == 0:
            reasons.insert(0, f"no {resource} allocatable")
        labels = (node.get("metadata") or {}).get("labels") or {}
        rows.append(NodeGpus(node=name, allocatable=allocatable, requested=used,
                             free=max(0, allocatable - used),
                             eligible=not reasons, reason="; ".join(reasons) or None,
                             labels=MappingProxyType(dict(labels))))
    return tuple(sorted(rows, key=lambda row: row.node))


def free_gpus(rows: Iterable[NodeGpus]) -> dict[str, int]:
    """What the planner takes: eligible node -> free GPUs."""
    return {row.node: row.free for row in rows if row.eligible}


def topology(rows: Iterable[NodeGpus], label: str) -> dict[str, str]:
    """Eligible node -> the value of its `label` (nodes without the label are left out: the planner treats
    each as a domain of its own)."""
    return {row.node: row.labels[label] for row in rows if row.eligible and label in row.labels}


# ---- parsing the CLI's --toleration and --node-selector ------------------------------------------

TOLERATION_SYNTAX = """\
KEY[=VALUE][:EFFECT], as `kubectl taint` writes taints. Without =VALUE the key is matched whatever its value
(operator Exists); with =VALUE the value must be equal (operator Equal). Without :EFFECT every effect is
tolerated; EFFECT is NoSchedule, PreferNoSchedule or NoExecute. KEY `*` tolerates every taint.
Examples: dedicated=ml:NoSchedule, example.com/spot, *"""


def parse_toleration(text: str) -> Toleration:
    """Parse one --toleration value (syntax: TOLERATION_SYNTAX)."""
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
        return Toleration(key=key, operator="Equal", value=value.strip(), effect=effect)
    return Toleration(key=key, operator="Exists", effect=effect)


def parse_node_selector(items: Iterable[str]) -> dict[str, str]:
    """Parse --node-selector values `KEY=VALUE` (several per flag, comma-separated); all must match."""
    selector: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            key, equals, value = part.strip().partition("=")
            if not equals or not key.strip():
                raise InvalidInput(f"--node-selector {item!r}: {part.strip()!r} is not KEY=VALUE "
                                   "(e.g. --node-selector gpu-type=a100)")
            key = key.strip()
            if key in selector and selector[key] != value.strip():
                raise InvalidInput(f"--node-selector: {key} is given twice ({selector[key]!r} and "
                                   f"{value.strip()!r}); a node has one value per label")
            selector[key] = value.strip()
    return selector


# ---- cluster files: what `kubectl get nodes,pods -A -o json` writes ------------------------------

_LIST_KINDS = {"List": None, "NodeList": "Node", "PodList": "Pod"}


def _documents(text: str, source: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        # JSON first: a 10,000-node dump parses in milliseconds with orjson, in seconds as YAML
        import orjson

        try:
            return [orjson.loads(text)]
        except orjson.JSONDecodeError as err:
            raise InvalidInput(f"{source}: not valid JSON: {err}") from None
    import yaml

    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        raise InvalidInput(f"{source}: not valid JSON or YAML: {err}") from None


def parse_cluster_document(text: str, *, source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and pods from one file's text: a v1 List, a NodeList or PodList, or single Node/Pod objects
    (several YAML documents allowed). Objects of other kinds are skipped; `source` names the file in
    errors."""
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []

    def take(obj: Any, kind: str | None, where: str) -> None:
        if not isinstance(obj, dict):
            raise InvalidInput(f"{source}: {where} is not an object but {type(obj).__name__}")
        kind = obj.get("kind") or kind
        if kind not in ("Node", "Pod"):
            return
        if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            raise InvalidInput(f"{source}: {where} ({kind}) has no metadata.name")
        for part in ("spec", "status"):
            if obj.get(part) is not None and not isinstance(obj[part], dict):
                name = obj["metadata"]["name"]
                raise InvalidInput(f"{source}: {where} ({kind} {name}): {part} is not an object")
        (nodes if kind == "Node" else pods).append(obj)

    docs = _documents(text, source)
    for number, doc in enumerate(docs):
        where = f"document {number + 1}" if len(docs) > 1 else "the document"
        if not isinstance(doc, dict):
            raise InvalidInput(f"{source}: {where} is not a Kubernetes object or List "
                               "(write it with: kubectl get nodes,pods -A -o json)")
        kind = doc.get("kind")
        if kind in _LIST_KINDS:
            items = doc.get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise InvalidInput(f"{source}: {where} is a {kind} whose items is not a list")
            for index, item in enumerate(items):
                take(item, _LIST_KINDS[kind], f"items[{index}]")
        elif kind in ("Node", "Pod"):
            take(doc, None, where)
        else:
            raise InvalidInput(f"{source}: {where} has kind {kind!r}; expected a List, NodeList, PodList, "
                               "Node or Pod (write it with: kubectl get nodes,pods -A -o json)")
    return nodes, pods


def read_cluster_files(*, paths: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and pods from every file in `paths` (see parse_cluster_document); at least one Node overall."""
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as err:
            raise InvalidInput(f"{path}: cannot read the cluster file: {err.strerror or err}") from None
        except UnicodeDecodeError as err:
            raise InvalidInput(f"{path}: not a text file ({err.reason})") from None
        more_nodes, more_pods = parse_cluster_document(text, source=path)
        nodes.extend(more_nodes)
        pods.extend(more_pods)
    if not nodes:
        raise InvalidInput(f"no Node objects in {', '.join(paths)}: the cluster file needs the nodes too "
                           "(write it with: kubectl get nodes,pods -A -o json > cluster.json)")
    return nodes, pods
