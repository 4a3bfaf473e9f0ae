"""The official client configured for a local cluster (used by the fixtures and by tests that start their own
cluster); a module of its own so tests import it by a name no conftest.py shadows."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client


def make_api_client(url: str, ca_path: Path, token: str) -> client.ApiClient:
    """An official-client ApiClient speaking HTTPS to the cluster, verifying it with the cluster's CA."""
    configuration = client.Configuration()
    configuration.host = url
    configuration.ssl_ca_cert = str(ca_path)
    configuration.verify_ssl = True
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)
