"""Cluster files: the nodes and pods of a cluster as `kubectl get nodes,pods -A -o json` writes them (a v1
List), or NodeList/PodList files, JSON or YAML; what `distributetrain inventory|plan --cluster FILE` reads
instead of a live cluster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distributetrain.errors import InvalidInput

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
