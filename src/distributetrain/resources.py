"""Compatibility for the local cluster only, which imports this module by its old name until it moves out of
the package (branch `split` removes those imports). The product reads podrequests.py and podstatus.py."""

from __future__ import annotations

from distributetrain.podrequests import holds_resources, pod_requests
from distributetrain.podstatus import TERMINAL_PHASES

__all__ = ["TERMINAL_PHASES", "holds_resources", "pod_requests"]
