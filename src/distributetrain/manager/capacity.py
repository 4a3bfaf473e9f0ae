"""Capacity the manager does not place itself: whether the gang goes to a Kueue queue or waits for a node
pool to scale up, decided before anything is created, and with what shape (placement/pool.py).

- Kueue (`--queue NAME`, else the namespace's LocalQueue `default` when Kueue serves one; `--queue none`:
  never): the whole gang is created at once as one pod group and Kueue admits it against its ClusterQueue's
  quota; the manager's inventory does not race that admission (no plan, no exit 3 when GPUs are busy).
- Scale-up (`--scale-up on`, or `auto` where the cluster says it autoscales: the cluster-autoscaler status
  ConfigMap kube-system/cluster-autoscaler-status, or Karpenter NodePools): when the request does not fit
  the free GPUs - or no node has the GPU resource yet, a pool at zero - the whole gang is created as pending
  pods for the autoscaler, through a ProvisioningRequest (all of its nodes or none) where that API is served.
Reading what the cluster says needs rbac/DistributeTrain_Capacity.yaml; without it the manager says what it
cannot read and goes on as if the cluster did not autoscale or queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distributetrain import naming
from distributetrain.errors import DistributeTrainError, Forbidden, InvalidInput
from distributetrain.kube.gateway import Kube
from distributetrain.observe.joblog import Reporter
from distributetrain.placement import planner, pool
from distributetrain.placement.inventory import NodeGpus
from distributetrain.request.jobspec import JobSpec

MODE_SCALE_UP = "scale-up"
MODE_QUEUE = "queue"
AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")
RBAC_FILE = "rbac/DistributeTrain_Capacity.yaml"


@dataclass(frozen=True)
class GangPlan:
    """A gang the manager creates at once and others place: its shape (pods of no named node), and how it
    gets its GPUs."""

    mode: str                              # MODE_SCALE_UP or MODE_QUEUE
    plan: planner.Plan
    queue: str | None = None               # the LocalQueue
    provisioning_class: str | None = None  # a ProvisioningRequest of this class first (scale-up)
    why: str = ""                          # what the cluster said, for the log


class Chooser:
    """Reads what the cluster says about its capacity, for one job (`survey`: the inventory's rows, the GPU
    resource not required to exist)."""

    def __init__(self, kube: Kube, spec: JobSpec, reporter: Reporter,
                 survey: Callable[[], Sequence[NodeGpus]]) -> None:
        self.kube, self.spec, self.reporter, self.survey = kube, spec, reporter, survey
        self._karpenter: list[dict[str, Any]] | None = None

    # ---- Kueue ---------------------------------------------------------------------------------------------
    def queue(self) -> str | None:
        """The LocalQueue the gang goes to, or None."""
        spec = self.spec
        if spec.queue == naming.QUEUE_NONE:
            return None
        name = spec.queue or naming.DEFAULT_LOCAL_QUEUE
        if not self.kube.serves("localqueues"):
            if spec.queue:
                raise InvalidInput(f"queue: the cluster serves no Kueue API (kueue.x-k8s.io/v1beta1), so "
                                   f"no LocalQueue {spec.namespace}/{name}: install Kueue or drop --queue; "
                                   "nothing was created")
            return None
        try:
            found = self.kube.get("localqueues", spec.namespace, name)
        except Forbidden as err:
            self.reporter.say(f"cannot read LocalQueue {spec.namespace}/{name} "
                              f"({err.reason or 'Forbidden'}); apply {RBAC_FILE} for Kueue")
            return spec.queue
        if found is None and spec.queue:
            raise InvalidInput(f"queue: LocalQueue {spec.namespace}/{name} does not exist (kubectl get "
                               f"localqueues -n {spec.namespace}); nothing was created")
        if found is None:
            return None
        cluster_queue = (found.get("spec") or {}).get("clusterQueue", "?")
        how = "" if spec.queue else " (the namespace's default LocalQueue)"
        self.reporter.say(f"Kueue: the gang waits in LocalQueue {spec.namespace}/{name}{how}, ClusterQueue "
                          f"{cluster_queue}, and is admitted as one pod group")
        return name

    def for_queue(self, queue: str) -> GangPlan:
        if self.spec.recovery:
            raise InvalidInput(f"queue ({queue}): a Kueue pod group is admitted whole and Kueue does not "
                               "replace its pods; run elastic or restart jobs outside a queue (--queue "
                               "none); nothing was created")
        return GangPlan(MODE_QUEUE, self._shape(), queue=queue, why=f"Kueue LocalQueue {queue}")

    # ---- scale-up ------------------------------------------------------------------------------------------
    def for_scale_up(self, refused: DistributeTrainError) -> GangPlan:
        """The gang for the node pool when the request did not fit (`refused`: why); `refused` again when
        scale-up is off, or `auto` and the cluster does not say it autoscales."""
        spec = self.spec
        if spec.scale_up == naming.SCALE_UP_OFF:
            raise refused
        why = "--scale-up on" if spec.scale_up == naming.SCALE_UP_ON else self._autoscales()
        if why is None:
            raise refused
        gang = self._shape()
        self.reporter.say(f"the free GPUs do not cover the request ({str(refused).splitlines()[0]}); the "
                          f"cluster autoscales ({why}): the gang is created as pending pods for the node "
                          "pool")
        return GangPlan(MODE_SCALE_UP, gang, provisioning_class=self._provisioning_class(), why=why)

    def _autoscales(self) -> str | None:
        """What says the cluster autoscales, or None."""
        namespace, name = AUTOSCALER_STATUS
        try:
            if self.kube.get("configmaps", namespace, name) is not None:
                return f"ConfigMap {namespace}/{name}"
        except Forbidden as err:
            self.reporter.say(f"cannot read ConfigMap {namespace}/{name} ({err.reason or 'Forbidden'}) to "
                              f"tell whether the cluster autoscales; apply {RBAC_FILE} or pass --scale-up on")
        names = sorted(str((p.get("metadata") or {}).get("name")) for p in self._node_pools())
        return f"Karpenter NodePools {', '.join(names)}" if names else None

    def _node_pools(self) -> list[dict[str, Any]]:
        if self._karpenter is None:
            self._karpenter = []
            if self.kube.serves("karpenter-nodepools"):
                try:
                    self._karpenter = self.kube.list("karpenter-nodepools")[0]
                except Forbidden as err:
                    self.reporter.say(f"cannot list Karpenter NodePools ({err.reason or 'Forbidden'}); apply "
                                      f"{RBAC_FILE}")
        return self._karpenter

    def _provisioning_class(self) -> str | None:
        """The ProvisioningRequest class to ask with, or None for plain pending pods."""
        wanted = self.spec.provisioning_class
        if wanted == naming.PROVISIONING_NONE:
            return None
        if not self.kube.serves("provisioningrequests"):
            if wanted != naming.PROVISIONING_AUTO:
                raise InvalidInput(f"provisioning_class ({wanted}): the cluster serves no "
                                   "ProvisioningRequest API (autoscaling.x-k8s.io/v1); use "
                                   "--provisioning-class none; nothing was created")
            return None
        try:
            self.kube.list("provisioningrequests", self.spec.namespace, page_size=1)
        except Forbidden as err:
            self.reporter.say(f"cannot use ProvisioningRequests ({err.reason or 'Forbidden'}); apply "
                              f"{RBAC_FILE}; the gang waits as plain pending pods")
            return None
        return naming.BEST_EFFORT_ATOMIC if wanted == naming.PROVISIONING_AUTO else wanted

    # ---- the shape -----------------------------------------------------------------------------------------
    def _shape(self) -> planner.Plan:
        per_node = pool.node_gpus(self.survey(), given=self.spec.gpus_per_node,
                                  karpenter=pool.karpenter_gpus(self._node_pools()))
        return pool.gang_shape(self.spec.gpus, per_node)
