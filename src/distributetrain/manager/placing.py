"""The one path from a request to pods on nodes, for every caller: the first gang (pretraining.py), an elastic
or restart job's replacements (keeper.py), `run --dry-run` and `plan` against the live cluster.

`survey` reads the live cluster and turns it into per-node rows by the shared fit rules (placement/fit.py);
`fit.place` splits GPUs over them; `create_owned` creates an object of the job with the one rule for a name
that is taken (409): this run's own object (a retried POST that had succeeded) is adopted, a conflict that
went away is retried, anything else is refused and never touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distributetrain.errors import ApiError, Conflict, InvalidInput, NotFound
from distributetrain.kube import gateway, requests
from distributetrain.kube.gateway import Kube
from distributetrain.placement import checks, fit
from distributetrain.placement.inventory import NodeGpus, PodDemand
from distributetrain.placement.namespacefit import NamespacePolicies
from distributetrain.request.jobspec import JobSpec, ManagerIdentity

# stamped on every object one manager run creates: a 409 on create is then ours (a retried POST) or not
RUN_ANNOTATION = "distributetrain.io/run"
CREATE_ATTEMPTS = 3


class NameTaken(ApiError):
    """An object of the name exists and this run did not create it."""


def survey(kube: Kube, spec: JobSpec, *, demands: Sequence[PodDemand],
           owner: ManagerIdentity | None, resource_known: bool = True) -> tuple[NodeGpus, ...]:
    """The live cluster's nodes as fit rows for `spec`'s pods (one list of nodes, one of the pods that may
    hold resources). Refused here, before anything is created (exit 2): a resource no node advertises (unless
    not `resource_known`: a pool of such nodes may scale from zero), and a pod network without IPv4 (Horovod
    is IPv4-only)."""
    nodes, pods = gateway.list_nodes_and_pods(kube=kube)
    why = checks.ipv6_only(manager_ips=owner.pod_ips if owner else (), nodes=nodes)
    if why:
        raise InvalidInput(checks.ipv6_message(why))
    with gateway.gc_paused():
        rows = fit.survey(nodes, pods, resource=spec.resource, demands=demands, job_gpus=spec.gpus,
                          resource_known=resource_known, fabric=spec.fabric_resource,
                          claimed=spec.template_resources())
    del nodes, pods  # a cluster's worth of dicts: free them before the job runs for hours
    return rows


def namespace_policies(kube: Kube, namespace: str) -> NamespacePolicies:
    """The namespace's LimitRanges, ResourceQuotas (their status.used: what others hold now) and its own
    labels and annotations (Pod Security, OpenShift's UID range), read before anything is created. RBAC:
    list limitranges and resourcequotas, get namespaces (a Role grants `get` on its own namespace)."""
    ranges, _ = kube.list("limitranges", namespace, from_cache=True)
    quotas, _ = kube.list("resourcequotas", namespace, from_cache=True)
    return NamespacePolicies.of(namespace, kube.get("namespaces", None, namespace), ranges, quotas)


def create_owned(kube: Kube, body: dict[str, Any], *, run_id: str, job: str) -> dict[str, Any]:
    """Create `body` stamped with `run_id`. A 409 is this run's own object when it carries the stamp (a
    retried POST that had succeeded): adopted. A 409 for an object that is not there (a conflict that went
    away) is retried. Anything else with that name: NameTaken, the object untouched. A missing namespace is
    bad input (exit 2)."""
    meta = body["metadata"]
    meta.setdefault("annotations", {})[RUN_ANNOTATION] = run_id
    kind = requests.RESOURCE_OF_KIND[body["kind"]]
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            return kube.create(body)
        except Conflict as err:  # any 409 on a create: the name is taken, or was while the POST raced
            existing = kube.get(kind, meta["namespace"], meta["name"])
            if existing is None and attempt < CREATE_ATTEMPTS:
                continue
            stamp = ((existing or {}).get("metadata", {}).get("annotations") or {}).get(RUN_ANNOTATION)
            if existing and stamp == run_id:
                return existing
            raise NameTaken(f"{body['kind']} {meta['namespace']}/{meta['name']} already exists and was not "
                            f"created by this manager ({err}); delete it (distributetrain delete {job}) or "
                            "choose another --job-name") from err
        except NotFound as err:
            if requests.is_missing_namespace(err, meta["namespace"]):
                raise InvalidInput(f"namespace: {meta['namespace']!r} does not exist ({err}); create it or "
                                   "pass --namespace; nothing was created") from err
            raise
    raise AssertionError("unreachable")
