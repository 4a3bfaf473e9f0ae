"""The official Kubernetes client configured for a local cluster: what this suite's conftest.py gives the
plugin's `local_cluster_client_factory`, and what tests that start their own cluster pass as
`client_factory`. The package never imports a client; its tests talk to it through the one its users run.
A module of its own so tests import it by a name no conftest.py shadows.

Also where the client's annotations and its behaviour part, said once for mypy rather than at every call: its
methods are annotated with model classes (`body: V1Pod`) yet send a plain dict body as it is, which is how the
tests write manifests (as a user writes YAML, invalid fields on purpose included); called with
`_preload_content=False` they return the HTTP response unread; its watch module is not annotated; every model
field, and an ApiException's body, is Optional."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import urllib3
from kubernetes import client, watch
from kubernetes.client import ApiException

T = TypeVar("T")


def make_api_client(url: str, ca_path: Path, token: str) -> client.ApiClient:
    """An official-client ApiClient speaking HTTPS to the cluster, verifying it with the cluster's CA."""
    configuration = client.Configuration()
    configuration.host = url
    configuration.ssl_ca_cert = str(ca_path)
    configuration.verify_ssl = True
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def present(value: T | None, what: str = "a field") -> T:
    """`value`, which the API server fills in though the client's models type every field Optional: for reads
    that go on (an index, len(), sorted()) where None would fail less clearly."""
    assert value is not None, f"the API server left {what} empty"
    return value


def as_body(manifest: Mapping[str, Any]) -> Any:
    """A manifest (a dict) passed as the body of a client method, which sends it as it is."""
    return manifest


def raw(answer: object) -> urllib3.BaseHTTPResponse:
    """The answer of a client method called with `_preload_content=False`: the unread HTTP response."""
    return cast(urllib3.BaseHTTPResponse, answer)


def watch_events(lister: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """`watch.Watch().stream(lister, ...)`: each event a dict with type, object (a model) and raw_object."""
    events: Iterator[dict[str, Any]] = watch.Watch().stream(lister, *args, **kwargs)  # type: ignore[no-untyped-call]
    return events


def api_status(error: ApiException) -> Any:
    """The JSON body of an API error (a Status); the test fails here if the error came without one."""
    assert error.body is not None, f"no body in the API error: {error}"
    return json.loads(error.body)
