"""Kueue's plain-pod protocol after kueue v0.10 (kubernetes-sigs/kueue
site/content/en/docs/tasks/run/plain_pods.md; pkg/controller/jobs/pod; pkg/scheduler/flavorassigner): a
webhook gates queued pods, a pod group becomes one Workload once all its members exist, a ClusterQueue
admits it against its nominal quota per ResourceFlavor, and its pods get the flavor's node labels and lose
their gate. ResourceFlavors, ClusterQueues, LocalQueues and Workloads (kueue.x-k8s.io/v1beta1) are served so
kubectl reads and writes them. A model for tests, switched on by ClusterSpec.kueue.

    webhook.py     the pod webhook: managed label, admission gate, role hash; group metadata refused
    workloads.py   a pod's or a group's Workload, and when it is finished (pure)
    quota.py       flavor assignment against nominal quota, the scheduler's messages (pure)
    controller.py  the loop: make workloads, admit, ungate, finish, queue status
    setup.py       a flavor, ClusterQueue and LocalQueue as a user applies them (pure; exported)
"""

from localcluster._internal.doubles.kueue.controller import Kueue
from localcluster._internal.doubles.kueue.setup import queue_manifests

__all__ = ["Kueue", "queue_manifests"]
