"""The smallest queue set-up a Kueue user writes before submitting (kueue v0.10's
site/content/en/docs/tasks/manage/administer_cluster_quotas.md: a ResourceFlavor, a ClusterQueue with a
nominal quota per flavor, a LocalQueue pointing at it), as YAML for `kubectl apply -f -`. Pure."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

Obj = dict[str, object]


def queue_manifests(gpus: int, *, queue: str = "team-queue", namespace: str = "default",
                    cluster_queue: str = "team", flavor: str = "gpus", cpu: int = 64, memory: str = "512Gi",
                    node_labels: Mapping[str, str] | None = None) -> str:
    """A ResourceFlavor `flavor` (with `node_labels` if given), a ClusterQueue `cluster_queue` for every
    namespace with `gpus` nvidia.com/gpu (and `cpu`, `memory`) of nominal quota, and a LocalQueue `queue` in
    `namespace` onto it."""
    flavor_obj: Obj = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                       "metadata": {"name": flavor}}
    if node_labels:
        flavor_obj["spec"] = {"nodeLabels": dict(node_labels)}
    quota = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory},
             {"name": "nvidia.com/gpu", "nominalQuota": gpus}]
    cluster_queue_obj: Obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": flavor, "resources": quota}]}]}}
    local_queue: Obj = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                        "metadata": {"name": queue, "namespace": namespace},
                        "spec": {"clusterQueue": cluster_queue}}
    return yaml.safe_dump_all([flavor_obj, cluster_queue_obj, local_queue], sort_keys=False)
