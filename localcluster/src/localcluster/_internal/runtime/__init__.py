"""Pod runtimes (kubelets) of the local cluster: `sim` (simulated) and `process` (real processes)."""
