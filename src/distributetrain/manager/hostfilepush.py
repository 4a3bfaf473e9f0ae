"""The hostfile written while the chief runs (a gang made at once, groupstart.py; a worker lost or joined,
keeper.py), and the chief made to see it within a second.

The chief reads the hostfile ConfigMap through a volume, which its kubelet refreshes only when it syncs the
pod: periodically, every `syncFrequency` (1 min) plus up to half of it as jitter (pkg/kubelet/pod_workers.go,
workerResyncIntervalJitterFactor 0.5), so 60-90 s; or at once when the pod object changes. A change of the
pod's spec, labels or annotations is an UPDATE to the kubelet (pkg/kubelet/config/config.go,
podsDifferSemantically), which syncs the pod now; each sync remounts its ConfigMap volumes (kubelet.go SyncPod
-> volumeManager.WaitForAttachAndMount -> desiredStateOfWorldPopulator.ReprocessPod, "required to enable
remounting volumes on pod updates"), reading the ConfigMap from the kubelet's watch-based cache
(`configMapAndSecretChangeDetectionStrategy: Watch`, the default). Read in kubernetes/kubernetes at a 2025
master (v1.34+); the path is the same since v1.17 at least.

So after each write the manager sets one annotation on the chief's pod, naming.HOSTS_VERSION_ANNOTATION = the
ConfigMap's new resourceVersion, and the chief's launcher and discovery script (chief/relaunch.py,
chief/discovery.py) read the new hostfile about a second later instead of up to 90 s. The ConfigMap stays what
people read (`kubectl get configmap JOB-hostfile`). What is left: the kubelet's ConfigMap cache is fed by its
own watch, so in the rare case where that watch delivers the ConfigMap after the pod's update, the volume
gets the new hostfile at the next periodic sync, as without the annotation.

Permissions: `patch` on pods (the Role, rbac/DistributeTrain_ClusterRole.yaml); rbac/'s admission policy lets
the manager's ServiceAccount change nothing of a pod but this annotation, and only on its job's chief.
Refused (a Role or policy from before), the job goes on as before, each update waiting for the periodic sync,
and the manager says so once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distributetrain import naming
from distributetrain.errors import ApiError, ApiUnreachable, NotFound
from distributetrain.kube.gateway import Kube
from distributetrain.observe.joblog import Reporter


def hosts_version_patch(version: str) -> dict[str, Any]:
    """The merge patch of the chief's pod that has its kubelet sync it: this one annotation, nothing else."""
    return {"metadata": {"annotations": {naming.HOSTS_VERSION_ANNOTATION: version}}}


class HostfilePush:
    """Writes a job's hostfile ConfigMap and has the chief's kubelet refresh its volume at once."""

    def __init__(self, kube: Kube, *, namespace: str, job: str, reporter: Reporter) -> None:
        self.kube, self.namespace, self.reporter = kube, namespace, reporter
        self.configmap = naming.hostfile_configmap_name(job)
        self.chief = naming.chief_name(job)
        self.refused: str | None = None  # why the chief could not be annotated, once it could not

    def write(self, data: Mapping[str, str]) -> dict[str, Any]:
        """Merge `data` into the ConfigMap's (a key it does not name stays), then nudge the chief; the
        ConfigMap as written."""
        written = self.kube.patch("configmaps", self.namespace, self.configmap, {"data": dict(data)})
        self.nudge(str((written.get("metadata") or {}).get("resourceVersion") or ""))
        return written

    def nudge(self, version: str) -> None:
        """Annotate the chief's pod with the hostfile's version. Never fails the job: without it the chief
        sees the hostfile at its kubelet's next periodic sync."""
        try:
            self.kube.patch("pods", self.namespace, self.chief, hosts_version_patch(version))
        except NotFound:
            return  # the chief is gone: its end, not its hostfile, decides what happens next
        except ApiUnreachable:
            raise
        except ApiError as err:
            if self.refused is None:
                self.reporter.say(
                    f"the chief's pod {self.chief} could not be annotated with "
                    f"{naming.HOSTS_VERSION_ANNOTATION} ({err}): it sees each hostfile update when its "
                    "kubelet next syncs the pod, up to 90 s later. Grant the manager `patch` on pods and "
                    "apply this version's admission policy (rbac/) to have it within a second")
            self.refused = str(err)
