"""The local cluster's own errors (it shares no code with the product it serves).

`LocalClusterError` is what `localcluster up|status|down` reports on one line instead of a traceback;
`InvalidInput` (exit 2) is input the cluster cannot use: its command line, an image that maps to an unusable
Dockerfile, a network mode, a quantity. Errors the API server answers with are Status objects (status.py).
"""

from __future__ import annotations


class LocalClusterError(Exception):
    """Base of every error the local cluster raises on purpose; `exit_code` is what its CLI exits with."""

    exit_code: int = 1


class InvalidInput(LocalClusterError):
    """Input the local cluster cannot use."""

    exit_code = 2


class InvalidQuantity(InvalidInput):
    """A Kubernetes quantity that cannot be parsed, or a fractional count of an integer resource."""


class StartFailed(LocalClusterError):
    """The background server exited while starting, or did not answer /readyz in time."""
