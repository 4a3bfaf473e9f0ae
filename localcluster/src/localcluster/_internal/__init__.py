"""The local cluster's internals; the public face is `localcluster` (its `__all__`). Nothing here is promised.

The folders are the map, each importing only from those listed after it (import-linter,
localcluster/pyproject.toml):

    cluster/       a cluster put together and run: LocalCluster, ClusterSpec, the test handle, serve, CLI
    apiserver/     the HTTP face: routing, verbs, list/watch, bodies, discovery, tables, subresources, faults
    streams/       exec, attach and port-forward protocols: WebSocket channels, SPDY/3.1, the sessions
    controllers/   what happens after a write: scheduler, node fit, garbage collector, quota status, events
    doubles/       models of other systems the cluster can include (each names what it follows)
    admission/     the write path's rules: validation, defaulting, Pod Security, LimitRange, ResourceQuota
    auth/          who is asking and may they: tokens, certificates, RBAC, escalation, identities
    runtime/       the kubelets: simulated pods, or pods as real processes (and images as local files)
    storage/       the object store (etcd and the watch cache) and the resources served
    podspec/       what a pod asks of its node: effective requests, the GPU resource, the QoS class
    apimachinery/  the shared vocabulary: quantities, names, selectors, patches, field errors, Status
    errors.py      the cluster's own exceptions (exported by `localcluster`)
"""
