"""Kubernetes Events the manager records for each step of a job (pure builders; observer.py sends them).

core/v1 Events, as client-go's recorder writes them, so `kubectl describe pod` lists them under the object
and `kubectl get events` shows them: the object concerned (`involvedObject`: kind, namespace, name, uid), a
CamelCase reason, a message, the type (Normal or Warning), the manager as the source and reporting
component (`distributetrain-manager`), its pod as the reporting instance. Which object: the manager pod for
the job's own steps (planned, re-planned, finished, failed, cleaned up), the worker or chief pod for its own
(created, ready, started, failed), the hostfile ConfigMap for the hostfile.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distributetrain import naming

NORMAL = "Normal"
WARNING = "Warning"
MESSAGE_MAX = 1024  # what events.k8s.io/v1 allows a note; core/v1 readers cut long ones anyway

# the reasons, one per step (docs/observability.md lists them with their objects)
PLANNED = "Planned"
REPLANNED = "Replanned"
GANG_FAILED = "GangNotStarted"
PREFLIGHT_EXCLUDED = "PreflightExcludedNode"
WORKER_CREATED = "WorkerCreated"
WORKER_READY = "WorkerReady"
HOSTFILE_WRITTEN = "HostfileWritten"
CHIEF_CREATED = "ChiefCreated"
CHIEF_STARTED = "ChiefStarted"
TRAINING_STARTED = "TrainingStarted"
WORKER_FAILED = "WorkerFailed"
TRAINING_SUCCEEDED = "TrainingSucceeded"
TRAINING_FAILED = "TrainingFailed"
JOB_FAILED = "JobFailed"
CLEANED_UP = "CleanedUp"
RESTARTED = "Restarted"
NCCL_TRANSPORT = "NcclTransport"
TRAINING_HUNG = "TrainingHung"
STRAGGLER = "Straggler"


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"

    @staticmethod
    def of(obj: Mapping[str, Any]) -> ObjectRef:
        """The reference to an object as the API returned it."""
        meta = obj.get("metadata") or {}
        return ObjectRef(kind=str(obj.get("kind") or "Pod"), namespace=str(meta.get("namespace") or ""),
                         name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
                         api_version=str(obj.get("apiVersion") or "v1"))


def event(ref: ObjectRef, *, reason: str, message: str, type: str = NORMAL, instance: str,
          now: datetime.datetime, sequence: int = 0) -> dict[str, Any]:
    """A core/v1 Event about `ref`. `instance`: the reporting instance (the manager's pod name, or its host
    outside a cluster); `sequence` keeps the names of events made in the same nanosecond apart."""
    if type not in (NORMAL, WARNING):
        raise ValueError(f"event type {type!r} is neither {NORMAL} nor {WARNING}")
    stamp = now.astimezone(datetime.UTC)
    at = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    nanos = int(stamp.timestamp() * 1_000_000) * 1000 + sequence
    involved = {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "apiVersion": ref.api_version}
    if ref.uid:
        involved["uid"] = ref.uid
    text = message if len(message) <= MESSAGE_MAX else message[:MESSAGE_MAX - 3] + "..."
    return {
        "apiVersion": "v1", "kind": "Event",
        # as client-go names them: the object's name and the time in hex, unique enough and sortable
        "metadata": {"name": f"{ref.name}.{nanos:x}", "namespace": ref.namespace},
        "involvedObject": involved,
        "reason": reason, "message": text, "type": type,
        "source": {"component": naming.EVENT_COMPONENT},
        "reportingComponent": naming.EVENT_COMPONENT, "reportingInstance": instance[:128],
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    }
