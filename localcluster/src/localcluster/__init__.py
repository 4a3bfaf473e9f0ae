"""localcluster: a Kubernetes cluster on one machine, for tests and demos. An API server over real HTTPS that
the official clients and real kubectl talk to, with RBAC, admission, a scheduler, garbage collection, and
pods that are either simulated (thousands, steerable by tests) or real processes in their own namespaces.

    from localcluster import ClusterSpec, ImageMap, ImageMapping, start_cluster

    cluster = start_cluster(nodes=[4, 2], runtime="process",
                            images=ImageMap((ImageMapping.host("busybox"),)))
    cluster.kubectl("run", "hello", "--image", "busybox", "--restart", "Never", "--", "echo", "hi")
    cluster.close()

Everything a user needs is exported here (`__all__`); `localcluster._internal` is not an API. The pytest
fixtures are in `localcluster.pytest_plugin` (loaded by pytest on its own); the CLI is `localcluster
up|status|fault|down`. See the package's README.md.
"""

from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.apiserver.faults import Fault
from localcluster._internal.cluster.assembly import LocalCluster
from localcluster._internal.cluster.daemon import serve_command, start_daemon
from localcluster._internal.cluster.spec import ClusterSpec
from localcluster._internal.cluster.testcluster import (
    ApiOutage,
    ClientFactory,
    RawResponse,
    TestCluster,
    kubectl_path,
    start_cluster,
    wait_until,
)
from localcluster._internal.doubles.apioutage import MODES as API_OUTAGE_MODES
from localcluster._internal.doubles.apioutage import Outage
from localcluster._internal.doubles.autoscaler import NodePool, parse_node_pool
from localcluster._internal.doubles.kueue import queue_manifests as kueue_queue_manifests
from localcluster._internal.doubles.nodeshutdown import NodeShutdown, PodKill, ShutdownGroup
from localcluster._internal.errors import InvalidInput, InvalidQuantity, LocalClusterError, StartFailed
from localcluster._internal.podspec.requests import pod_requests
from localcluster._internal.runtime.imagepulls import PullTime
from localcluster._internal.runtime.images import ImageMap, ImageMapping, ImageNotFound
from localcluster._internal.runtime.nodelink import TCP_PAYLOAD_SHARE, NodeLink, parse_node_link
from localcluster._internal.runtime.process import ProcessRuntime
from localcluster._internal.runtime.processfaults import ProcessFault
from localcluster._internal.runtime.sim import Behavior, Predicate, SimRuntime

# What each name is for: a cluster started and stopped (ClusterSpec, LocalCluster, TestCluster, start_cluster,
# wait_until, kubectl_path), or as a background process (serve_command, start_daemon); the pod runtimes and
# their switches (SimRuntime, Behavior, Predicate, ProcessRuntime, NodeLink, parse_node_link); the node pools
# an autoscaled cluster grows and shrinks (NodePool, parse_node_pool: ClusterSpec.node_pools) and the queue a
# Kueue user sets up (kueue_queue_manifests: ClusterSpec.kueue); the images the
# process runtime can run (ImageMap, ImageMapping) and how long pulls take (PullTime); injected API faults
# (Fault) and production faults (API_OUTAGE_MODES, Outage and a test's ApiOutage handle on one; ProcessFault,
# what freeze/throttle did; NodeShutdown, ShutdownGroup, PodKill, what a graceful node shutdown did); the
# errors; and Kubernetes' resource rules as the cluster applies them (pod_requests, parse_quantity), to hold
# other implementations to.
__all__ = [
    "API_OUTAGE_MODES",
    "TCP_PAYLOAD_SHARE",
    "ApiOutage",
    "Behavior",
    "ClientFactory",
    "ClusterSpec",
    "Fault",
    "ImageMap",
    "ImageMapping",
    "ImageNotFound",
    "InvalidInput",
    "InvalidQuantity",
    "LocalCluster",
    "LocalClusterError",
    "NodeLink",
    "NodePool",
    "NodeShutdown",
    "Outage",
    "PodKill",
    "Predicate",
    "ProcessFault",
    "ProcessRuntime",
    "PullTime",
    "RawResponse",
    "ShutdownGroup",
    "SimRuntime",
    "StartFailed",
    "TestCluster",
    "kubectl_path",
    "kueue_queue_manifests",
    "parse_node_link",
    "parse_node_pool",
    "parse_quantity",
    "pod_requests",
    "serve_command",
    "start_cluster",
    "start_daemon",
    "wait_until",
]
