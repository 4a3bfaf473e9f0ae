"""DistributeTrain: Horovod data-parallel training on Kubernetes GPU clusters, without an operator."""

__version__ = "0.1.0"
