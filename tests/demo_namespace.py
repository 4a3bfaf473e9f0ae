"""The demo's namespace labels (scripts/demo-namespace.yaml, the one place that says how strict Pod Security
is where the job runs), for the test fixtures where the manager runs: their conftest.py overrides the
`pod_security_labels` fixture of tests/conftest.py with `demo_namespace_labels()`."""

from __future__ import annotations

from pathlib import Path

import yaml

DEMO_NAMESPACE = Path(__file__).resolve().parents[1] / "scripts" / "demo-namespace.yaml"


def demo_namespace_labels() -> dict[str, str]:
    doc = yaml.safe_load(DEMO_NAMESPACE.read_text())
    return {str(k): str(v) for k, v in doc["metadata"]["labels"].items()}
