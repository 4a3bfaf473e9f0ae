"""The project's image map for the local cluster (scripts/local-cluster-images.yaml, the file `make demo`
passes to `localcluster up --images`): every cluster the fixtures start runs our images from it."""

from __future__ import annotations

from pathlib import Path

from localcluster import ImageMap

IMAGE_MAP = Path(__file__).resolve().parents[1] / "scripts" / "local-cluster-images.yaml"


def project_images() -> ImageMap:
    return ImageMap.load(IMAGE_MAP)
