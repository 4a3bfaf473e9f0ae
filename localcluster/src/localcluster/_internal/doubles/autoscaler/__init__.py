"""A node-pool autoscaler after cluster-autoscaler 1.31 (kubernetes/autoscaler cluster-autoscaler/FAQ.md: "How
does scale-up work?", "How does scale-down work?", "What events are emitted by CA?"; ProvisioningRequest
autoscaling.x-k8s.io/v1): node pools grow from their template for pods the scheduler marked Unschedulable,
their nodes appear NotReady after a delay and turn Ready, empty nodes go after an idle time; it writes its
status ConfigMap and its events. A model for tests, switched on by ClusterSpec.node_pools.

    pools.py         a pool, its text form, its nodes
    planning.py      the scale-up decision (pure): unschedulable pods onto upcoming, then new, nodes
    provisioning.py  ProvisioningRequest classes and conditions (pure)
    status.py        kube-system/cluster-autoscaler-status (pure)
    controller.py    the loop: register nodes, scale up, answer requests, scale down, write the status
"""

from localcluster._internal.doubles.autoscaler.controller import Autoscaler, Timing
from localcluster._internal.doubles.autoscaler.pools import POOL_LABEL, NodePool, parse_node_pool

__all__ = ["POOL_LABEL", "Autoscaler", "NodePool", "Timing", "parse_node_pool"]
