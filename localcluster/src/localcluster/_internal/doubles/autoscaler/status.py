"""The status ConfigMap cluster-autoscaler writes on every pass, kube-system/cluster-autoscaler-status
(FAQ.md, "How can I check what is going on in CA?"; its YAML form since CA 1.30, clusterstate/api): whether
CA runs, node counts cluster-wide and per node group, each group's target and sizes, scale-up and scale-down
activity. Tools read it to know a cluster autoscales. Abbreviated: no lastTransitionTime, no
backoff details."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

NAMESPACE = "kube-system"
NAME = "cluster-autoscaler-status"
LAST_UPDATED = "cluster-autoscaler.kubernetes.io/last-updated"


@dataclass(frozen=True)
class GroupCounts:
    name: str
    registered: int
    ready: int
    target: int          # cloudProviderTarget: registered plus asked for
    min_size: int
    max_size: int
    empty: int           # nodes a scale-down considers

    @property
    def not_started(self) -> int:
        return self.registered - self.ready


def status_text(groups: Sequence[GroupCounts], *, now: str) -> str:
    def counts(registered: int, ready: int, unregistered: int) -> dict[str, Any]:
        return {"registered": {"total": registered, "ready": ready, "notStarted": registered - ready},
                "longUnregistered": 0, "unregistered": unregistered}

    def activity(up: bool, down: bool) -> dict[str, Any]:
        return {"scaleUp": {"status": "InProgress" if up else "NoActivity", "lastProbeTime": now},
                "scaleDown": {"status": "CandidatesPresent" if down else "NoCandidates",
                              "lastProbeTime": now}}

    registered = sum(g.registered for g in groups)
    ready = sum(g.ready for g in groups)
    coming = sum(g.target - g.registered for g in groups)
    doc: dict[str, Any] = {
        "time": now, "autoscalerStatus": "Running",
        "clusterWide": {"health": {"status": "Healthy", "nodeCounts": counts(registered, ready, coming),
                                   "lastProbeTime": now},
                        **activity(coming > 0 or ready < registered, any(g.empty for g in groups))},
        "nodeGroups": [{"name": g.name,
                        "health": {"status": "Healthy",
                                   "nodeCounts": counts(g.registered, g.ready, g.target - g.registered),
                                   "cloudProviderTarget": g.target, "minSize": g.min_size,
                                   "maxSize": g.max_size, "lastProbeTime": now},
                        **activity(g.target > g.ready, g.empty > 0)} for g in groups],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def config_map(text: str, *, now: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "annotations": {LAST_UPDATED: now}},
            "data": {"status": text}}
