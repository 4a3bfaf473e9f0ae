"""The image map this suite's process pods run from (host-images.yaml: busybox and python, the host's own
files), for tests that build a runtime or start `localcluster up` themselves; conftest.py gives it to every
cluster the plugin's fixtures start."""

from __future__ import annotations

from pathlib import Path

from localcluster import ImageMap

HOST_IMAGES_FILE = Path(__file__).resolve().parent / "host-images.yaml"
HOST_IMAGES = ImageMap.load(HOST_IMAGES_FILE)
