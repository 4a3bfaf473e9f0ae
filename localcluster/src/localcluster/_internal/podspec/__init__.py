"""What a pod asks of its node, by Kubernetes' own rules: its effective requests (init containers, sidecars,
overhead), the GPU resource name, and its QoS class. The scheduler, quota, LimitRange and the kubelets all
count a pod this way. Pure."""
