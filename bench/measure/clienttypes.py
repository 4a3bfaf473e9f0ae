"""Where the official client's annotations and its behaviour part, for bench code relying on the behaviour.

Its methods are annotated with model classes (`body: V1Pod`, `-> V1PodList`); they also take a plain dict as
the body and send it as it is, and called with `_preload_content=False` they return the HTTP response unread.
These two functions say so to mypy, in one place, instead of a cast at every call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import urllib3


def raw(answer: object) -> urllib3.BaseHTTPResponse:
    """The answer of a client method called with `_preload_content=False`: the unread HTTP response."""
    return cast(urllib3.BaseHTTPResponse, answer)


def as_body(manifest: Mapping[str, Any]) -> Any:
    """A manifest (a dict, as a user writes it) passed as the body of a client method."""
    return manifest
