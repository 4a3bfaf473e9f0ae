"""Models of systems other than the Kubernetes API server core, which a cluster can include: e.g. API outages,
batch Jobs, PodDisruptionBudgets and eviction, a node-pool autoscaler, Kueue, fabric devices.

One module (or subpackage) per system. Its docstring names the upstream behaviour it follows and the version
(`cluster-autoscaler 1.31: scale-up when a pod is Unschedulable ...`), and says what it leaves out. A double
watches and writes through the store like the controllers do (storage/, controllers/), is switched on by a
`ClusterSpec` field (off by default, so a cluster without it behaves as before), and has its own tests under
localcluster/tests.

    apioutage.py     API outages: refused, hung, 429, 503 (switched on by a call: LocalCluster.api_outage)
    autoscaler/      a node-pool autoscaler after cluster-autoscaler 1.31, and ProvisioningRequests
                     (ClusterSpec.node_pools, .provisioning_requests)
    kueue/           Kueue v0.10's plain-pod protocol: gating webhook, pod-group Workloads, ClusterQueue quota
                     (ClusterSpec.kueue)
    nodeshutdown.py  the kubelet's graceful node shutdown (a call: LocalCluster.shutdown_node)
    openshift.py     OpenShift's restricted-v2 SCC admission in namespaces that carry a UID range
                     (ClusterSpec.openshift)
"""
