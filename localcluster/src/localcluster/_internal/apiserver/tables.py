"""Server-side Table output (`Accept: ...;as=Table;g=meta.k8s.io`), which is what `kubectl get` prints.

Columns follow the real printers (pkg/printers/internalversion) for the resources users look at; the rest get
the generic NAME / AGE. Columns with priority 1 appear only with `-o wide`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from localcluster._internal.storage.registry import Resource

Obj = dict[str, Any]
Column = tuple[str, str, int]  # (name, type, priority)


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def human_duration(seconds: float) -> str:
    """Go's duration.HumanDuration, as kubectl prints AGE."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years = hours // (24 * 365)
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


def age(obj: Obj) -> str:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return human_duration((datetime.datetime.now(datetime.UTC) - created).total_seconds())


def pod_status_text(pod: Obj) -> str:
    """kubectl's STATUS column: the most telling reason among phase, container states and deletion."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            term = state["terminated"]
            reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal") else
                                            f"ExitCode:{term.get('exitCode', 0)}")
    # printPod: a pod whose PodScheduled condition says SchedulingGated shows that (k8s printers.go, 1.27+)
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
           for c in status.get("conditions") or []):
        reason = "SchedulingGated"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod(pod: Obj) -> list[Any]:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    return [f"{ready}/{total}", pod_status_text(pod), str(restarts), age(pod),
            status.get("podIP") or "<none>", (pod.get("spec") or {}).get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>",
            f"{len(gates)}/{len(gates)}" if gates else "<none>"]


def _node(node: Obj) -> list[Any]:
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else ("NotReady" if ready else "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    labels = node.get("metadata", {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [text, ",".join(roles) or "<none>", age(node), info.get("kubeletVersion", ""),
            addresses.get("InternalIP", "<none>"), addresses.get("ExternalIP", "<none>"),
            info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
            info.get("containerRuntimeVersion", "<unknown>")]


def _service(svc: Obj) -> list[Any]:
    spec = svc.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [spec.get("type", "ClusterIP"), spec.get("clusterIP", "<none>"), "<none>", ports or "<none>",
            age(svc), selector or "<none>"]


def _event(ev: Obj) -> list[Any]:
    involved = ev.get("involvedObject") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("metadata", {}).get("creationTimestamp")
    seen = "<unknown>"
    if isinstance(last, str):
        try:
            when = datetime.datetime.strptime(last[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.UTC)
            seen = human_duration((datetime.datetime.now(datetime.UTC) - when).total_seconds())
        except ValueError:
            pass
    return [seen, ev.get("type", ""), ev.get("reason", ""),
            f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}", ev.get("message", "")]


def _quota(q: Obj) -> list[Any]:
    """printResourceQuota: `used/hard` per resource, limits.* in the LIMIT column."""
    status = q.get("status") or {}
    request: list[str] = []
    limit: list[str] = []
    for name in sorted((q.get("spec") or {}).get("hard") or {}):
        used, hard = (status.get("used") or {}).get(name, "0"), (status.get("hard") or {}).get(name, "0")
        column = limit if name.split(".")[0] == "limits" and "." in name else request
        column.append(f"{name}: {used}/{hard}")
    return [age(q), ", ".join(request), ", ".join(limit)]


def _since(start: str | None, end: str | None = None) -> str:
    """HumanDuration between two RFC 3339 stamps (the second one: now)."""
    if not start:
        return ""
    begin = datetime.datetime.strptime(start, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    finish = (datetime.datetime.strptime(end, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC) if end
              else datetime.datetime.now(datetime.UTC))
    return human_duration((finish - begin).total_seconds())


def _label_selector(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), ",".join(expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": str(key), "DoesNotExist": f"!{key}"}.get(str(op), ""))
    return ",".join(parts) or "<none>"


def _job(job: Obj) -> list[Any]:
    """printJob (pkg/printers/internalversion, v1.37)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in true:
        state = "Complete"
    elif "Failed" in true:
        state = "Failed"
    elif (job.get("metadata") or {}).get("deletionTimestamp"):
        state = "Terminating"
    elif "Suspended" in true:
        state = "Suspended"
    elif "FailureTarget" in true:
        state = "FailureTarget"
    else:
        state = "Running"
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [state, completions, _since(status.get("startTime"), status.get("completionTime")), age(job),
            ",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers), _label_selector(spec.get("selector"))]


def _budget(pdb: Obj) -> list[Any]:
    spec = pdb.get("spec") or {}
    low, high = spec.get("minAvailable"), spec.get("maxUnavailable")
    return ["N/A" if low is None else str(low), "N/A" if high is None else str(high),
            int((pdb.get("status") or {}).get("disruptionsAllowed") or 0), age(pdb)]


def _condition_status(obj: Obj, kind: str) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c.get("type") == kind), None)
    return str(found.get("status", "")) if found else ""


def _workload(wl: Obj) -> list[Any]:
    """Kueue's Workload printer columns (config/components/crd, kueue v0.10)."""
    admission = (wl.get("status") or {}).get("admission") or {}
    return [(wl.get("spec") or {}).get("queueName", ""), admission.get("clusterQueue", ""),
            _condition_status(wl, "Admitted"), _condition_status(wl, "Finished"), age(wl)]


def _queue_counts(queue: Obj) -> list[Any]:
    status = queue.get("status") or {}
    return [status.get("pendingWorkloads", 0), status.get("admittedWorkloads", 0)]


_PRINTERS: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "jobs": ([("Status", "string", 0), ("Completions", "string", 0), ("Duration", "string", 0),
              ("Age", "string", 0), ("Containers", "string", 1), ("Images", "string", 1),
              ("Selector", "string", 1)], _job),
    "poddisruptionbudgets": ([("Min Available", "string", 0), ("Max Unavailable", "string", 0),
                              ("Allowed Disruptions", "integer", 0), ("Age", "string", 0)], _budget),
    "priorityclasses": ([("Value", "integer", 0), ("Global-Default", "boolean", 0), ("Age", "string", 0),
                         ("PreemptionPolicy", "string", 0)],
                        lambda o: [int(o.get("value") or 0), bool(o.get("globalDefault")), age(o),
                                   o.get("preemptionPolicy") or ""]),
    "workloads": ([("Queue", "string", 0), ("Reserved in", "string", 0), ("Admitted", "string", 0),
                   ("Finished", "string", 0), ("Age", "string", 0)], _workload),
    "localqueues": ([("ClusterQueue", "string", 0), ("Pending Workloads", "integer", 0),
                     ("Admitted Workloads", "integer", 0)],
                    lambda q: [(q.get("spec") or {}).get("clusterQueue", ""), *_queue_counts(q)]),
    "clusterqueues": ([("Cohort", "string", 0), ("Pending Workloads", "integer", 0),
                       ("Admitted Workloads", "integer", 1)],
                      lambda q: [(q.get("spec") or {}).get("cohort", ""), *_queue_counts(q)]),
    "resourcequotas": ([("Age", "string", 0), ("Request", "string", 0), ("Limit", "string", 0)], _quota),
    "limitranges": ([("Created At", "date", 0)],
                    lambda o: [(o.get("metadata") or {}).get("creationTimestamp", "")]),
    "pods": ([("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0),
              ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1),
              ("Nominated Node", "string", 1),
              ("Readiness Gates", "string", 1)], _pod),
    "nodes": ([("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0),
               ("Version", "string", 0), ("Internal-IP", "string", 1), ("External-IP", "string", 1),
               ("OS-Image", "string", 1),
               ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)], _node),
    "namespaces": ([("Status", "string", 0), ("Age", "string", 0)],
                   lambda o: [(o.get("status") or {}).get("phase", ""), age(o)]),
    "configmaps": ([("Data", "integer", 0), ("Age", "string", 0)],
                   lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {}), age(o)]),
    "secrets": ([("Type", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)],
                lambda o: [o.get("type", ""), len(o.get("data") or {}), age(o)]),
    "serviceaccounts": ([("Secrets", "integer", 0), ("Age", "string", 0)],
                        lambda o: [len(o.get("secrets") or []), age(o)]),
    "services": ([("Type", "string", 0), ("Cluster-IP", "string", 0), ("External-IP", "string", 0),
                  ("Port(s)", "string", 0), ("Age", "string", 0), ("Selector", "string", 1)], _service),
    "events": ([("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
                ("Object", "string", 0), ("Message", "string", 0)], _event),
}


def _column(column: Column) -> Obj:
    name, kind, priority = column
    return {"name": name, "type": kind, "format": "", "description": name, "priority": priority}


def table(resource: Resource, objects: list[Obj], resource_version: int, *,
          include_object: str = "Metadata") -> Obj:
    columns, cells = _PRINTERS.get(resource.plural, ([("Age", "string", 0)], lambda o: [age(o)]))
    if resource.plural == "events":
        columns_out = [_column(c) for c in columns]
        columns_out.insert(0, {"name": "Name", "type": "string", "format": "name", "description": "Name",
                               "priority": 1})
    else:
        columns_out = [{"name": "Name", "type": "string", "format": "name",
                        "description": "Name must be unique within a namespace.", "priority": 0}]
        columns_out += [_column(c) for c in columns]
    rows = []
    for obj in objects:
        row_cells = cells(obj)
        name = obj.get("metadata", {}).get("name", "")
        row: Obj = {"cells": [name, *row_cells]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj.get("metadata", {})}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": str(resource_version)}, "columnDefinitions": columns_out,
            "rows": rows}
