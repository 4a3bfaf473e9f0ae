"""What happens after a write, as kube-scheduler and kube-controller-manager do it: scheduling (with the
kubelet's admission check), graceful pod deletion, namespace cleanup and finalizers, garbage collection by
ownerReferences, ResourceQuota status, and events as the recorders write them. The decisions are pure
modules (scheduler, nodefit, gc); loops.py and collector.py watch the store and apply them."""
