"""A local Kubernetes cluster: an API server over real HTTPS, a scheduler, garbage collection, and pods
run either as real processes or simulated. See docs/local-cluster.md."""
