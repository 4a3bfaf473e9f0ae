"""`distributetrain run --dry-run`: plan against the live cluster and show every object the job would create,
creating nothing, as `kubectl create --dry-run=client -o yaml` shows what it would send.

It reads only (the nodes and pods, the volume claim: the same checks as a real run, exit 2 or 3 alike) and
prints the Secret with a placeholder instead of key material, the NetworkPolicy, the workers, the hostfile
ConfigMap with placeholders where the workers' pod IPs go, and the chief, in the order they would be created.
The manager's own lines (the inventory, the plan) go to its log (stderr), the objects to stdout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from distributetrain.kube.gateway import Kube
from distributetrain.manager import manifests
from distributetrain.manager.pretraining import PreTraining
from distributetrain.observe.joblog import Reporter
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

OUTPUTS = ("yaml", "json")


def preview(kube: Kube, spec: JobSpec, *, owner: ManagerIdentity | None,
            reporter: Reporter | None = None) -> list[dict[str, Any]]:
    """Every object the job would create, in creation order, planned against the live cluster now."""
    phase = PreTraining(kube, spec, owner=owner, reporter=reporter)
    plan = phase.plan(attempt=0, wait=False)
    gang = phase.gang(plan)  # shaped to the namespace, as the run would create them
    objects = [manifests.placeholder_secret(spec, owner=owner)]
    if spec.network_policy:
        objects.append(manifests.network_policy(spec, owner=owner))
    workers = [pod for _, pod in gang[:-1]]
    objects += workers
    names = [(pod["metadata"]["name"], entry.gpus) for pod, entry in zip(workers, plan.workers, strict=True)]
    objects.append(manifests.placeholder_hostfile(spec, names, owner=owner))
    objects.append(gang[-1][1])
    return objects


def render(objects: Sequence[dict[str, Any]], output: str) -> str:
    """YAML documents separated by `---` (each one `kubectl apply -f` takes), or a JSON v1 List."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(objects)},
                          indent=2) + "\n"
    return "---\n".join(yaml.safe_dump(obj, sort_keys=False, width=1000) for obj in objects)
