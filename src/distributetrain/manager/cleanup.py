"""Cleanup: the one way a job's objects are deleted, and the one guard every entry point runs under.

`delete_job` deletes every object carrying the job's labels (and only those: it selects on
`app.kubernetes.io/managed-by=distributetrain,distributetrain.io/job=JOB`; the Secret, read by its name, must
carry them too) and waits until its pods are gone,
so their GPUs are free when it returns. It ends a job that succeeded (posttraining.py, keeping the chief for
its log), clears an earlier run's leftovers (pretraining.py) and serves `distributetrain delete`.

`guard` wraps a phase: SIGTERM/SIGINT raise Interrupted wherever the phase blocks (signals.py), and any
failure deletes the whole job, once, with further signals ignored, before it propagates.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from distributetrain import naming
from distributetrain.errors import ApiUnreachable, DistributeTrainError, Forbidden, Interrupted, NotFound
from distributetrain.kube.gateway import Kube
from distributetrain.kube.watch import Watched
from distributetrain.manager import signals
from distributetrain.observe.joblog import Reporter

log = logging.getLogger(__name__)

# What a job may own, in the order cleanup deletes them: pods first, so GPUs are released soonest. The last
# two only a scale-up through a ProvisioningRequest makes (capacity.py): where that API is not served, or the
# manager may not read them (rbac/DistributeTrain_Capacity.yaml), the job has none.
JOB_KINDS = ("pods", "poddisruptionbudgets", "networkpolicies", "configmaps", "secrets",
             "provisioningrequests", "podtemplates")
CAPACITY_KINDS = frozenset({"provisioningrequests", "podtemplates"})
CLEANUP_WAIT = 90.0


def find_job_objects(kube: Kube, *, job: str, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """Every object of the job by kind, found by its labels. The job's one Secret is read by its name, not
    listed: `list secrets` would let the manager read every Secret of the namespace; it is taken only if it
    carries the job's labels (never touch what is not ours)."""
    selector = naming.job_selector(job)
    found: dict[str, list[dict[str, Any]]] = {}
    for kind in JOB_KINDS:
        if kind == "secrets":
            secret = kube.get(kind, namespace, naming.ssh_secret_name(job))
            labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
            ours = (labels.get(naming.MANAGED_BY_KEY) == naming.MANAGED_BY
                    and labels.get(naming.JOB_LABEL) == job)
            found[kind] = [secret] if secret is not None and ours else []
        elif kind in CAPACITY_KINDS:
            try:
                found[kind] = kube.list(kind, namespace, label_selector=selector)[0]
            except (NotFound, Forbidden):
                found[kind] = []
        else:
            found[kind] = kube.list(kind, namespace, label_selector=selector)[0]
    return found


def delete_job(kube: Kube, *, job: str, namespace: str, keep_chief: bool, reporter: Reporter | None = None,
               wait: float = CLEANUP_WAIT, clock: Callable[[], float] = time.monotonic) -> int:
    """Delete every object with the job's labels (the chief too unless `keep_chief`) and wait until its pods
    are gone, so their GPUs are free when this returns. Returns how many objects were deleted."""
    selector = naming.job_selector(job)
    chief_name = naming.chief_name(job)
    deleted = 0
    for kind, items in find_job_objects(kube, job=job, namespace=namespace).items():
        for item in items:
            meta = item.get("metadata") or {}
            if kind == "pods" and keep_chief and meta.get("name") == chief_name:
                continue
            if kube.delete(kind, namespace, str(meta.get("name")), uid=meta.get("uid")):
                deleted += 1
    watched = Watched(kube, "pods", namespace, selector)
    until = clock() + wait
    for snapshot in watched.changes(deadline=until):
        left = [n for n in snapshot if not (keep_chief and n == chief_name)]
        if not left:
            break
    else:
        left = [n for n in watched.objects if not (keep_chief and n == chief_name)]
        if left:
            message = f"job {job}: pods {', '.join(sorted(left))} were deleted but still terminate"
            if reporter:
                reporter.say(message)
            log.warning(message)
    if reporter and deleted:
        kept = f"; kept {chief_name} for its log" if keep_chief else ""
        reporter.say(f"deleted {deleted} object(s) of job {job}{kept}")
    if reporter:
        reporter.cleaned_up(deleted, chief_name if keep_chief else None)
    return deleted


@contextlib.contextmanager
def guard(kube: Kube, *, job: str, namespace: str, reporter: Reporter,
          armed: Callable[[], bool] = lambda: True, durable: bool = False) -> Iterator[None]:
    """Run the body with SIGTERM/SIGINT raised as Interrupted; on any failure (or signal) delete the whole job
    before the error propagates, if `armed()` says this run created or adopted something. A cleanup that
    fails is reported, and never hides the failure that caused it. Left alone: a job the API no longer
    answers for (ApiUnreachable), and, when `durable` (a Job owns the job's objects), a job whose manager pod
    was told to stop - a drain, an eviction, a deleted pod: the Job's next manager pod adopts it, and
    deleting the Job deletes everything."""
    # the try encloses the signal handling: a held signal fires the moment it is unblocked, on entry
    try:
        with signals.raising_interrupted():
            yield
    except BaseException as err:
        reporter.failed(err)
        if isinstance(err, ApiUnreachable):
            # nothing can be deleted through an API that does not answer, and half a cleanup would be worse
            # than none: the job's objects stay with their owner, whose garbage collection or successor
            # (a new manager pod of the manager's Job adopts a running job) takes them
            reporter.say(f"job {job}: {err}; its pods are left running with their owner: a new manager pod "
                         f"of the manager's Job adopts them, or delete the job with: distributetrain delete "
                         f"{job} -n {namespace}")
        elif durable and isinstance(err, Interrupted):
            reporter.say(f"job {job}: this manager pod was stopped ({err}); the job goes on, owned by the "
                         "manager's Job, whose next pod adopts it (to stop the job, delete the Job)")
        elif getattr(err, "cleaned_up", False):
            pass  # the phase already ended the job as it asked (errors.Hung: the chief kept for its log)
        elif armed():
            why = (str(err) or type(err).__name__).splitlines()[0]
            reporter.say(f"job {job} failed ({why}); deleting all it created")
            with signals.ignored():
                try:
                    delete_job(kube, job=job, namespace=namespace, keep_chief=False, reporter=reporter)
                except DistributeTrainError as cleanup_err:
                    reporter.say(f"cleanup of job {job} failed: {cleanup_err}; delete it with: "
                                 f"distributetrain delete {job} -n {namespace}")
        raise
