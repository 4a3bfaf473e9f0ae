"""The project's image map (scripts/local-cluster-images.yaml) as the local cluster reads it: our two images
are their Dockerfiles, built from the repository root, with their files, defaults and accounts; busybox and
python are the host's own; anything else fails to pull, as on a node without our registry."""

from __future__ import annotations

import pytest
from localcluster import ImageNotFound

from project_images import IMAGE_MAP, project_images

REPO = IMAGE_MAP.parents[1]


def test_our_images_map_to_their_dockerfiles_built_from_the_repository_root() -> None:
    images = project_images()
    base = images.lookup("registry.example.com/distributetrain/base:0.1.0")
    manager = images.lookup("distributetrain/manager:0.1.0")
    assert base is not None and base.dockerfile == REPO / "base-image" / "Dockerfile"
    assert base.build_context == REPO  # `docker build -f base-image/Dockerfile .`, as the Dockerfile says
    assert manager is not None and manager.dockerfile == REPO / "manager-image" / "Dockerfile"
    assert images.build_contexts == (REPO,)
    assert images.resolve("python:3.11-slim").is_host_image and images.resolve("busybox:1.36").is_host_image
    with pytest.raises(ImageNotFound):
        images.resolve("nvcr.io/nvidia/tensorflow:24.01-tf2-py3")


def test_the_base_image_gives_its_files_defaults_and_account() -> None:
    config = project_images().resolve("distributetrain/base:0.1.0")
    dests = {f.dest: f for f in config.files}
    assert dests["/opt/distributetrain/Train.py"].source == REPO / "base-image" / "Train.py"
    assert dests["/usr/local/bin/distributetrain-entrypoint"].mode == 0o755
    assert not any(d.startswith("/tmp/") for d in dests)  # build inputs a RUN deletes are not exposed
    assert config.entrypoint == ("/usr/local/bin/distributetrain-entrypoint",)
    assert config.cmd == ("worker",)
    assert config.workdir == "/opt/distributetrain"
    assert dict(config.env)["DT_SSH_PORT"] == "2222"
    assert [(u.name, u.uid, u.password) for u in config.users] == [("trainer", 10001, "*")]
    assert config.user == "10001:10001"


def test_the_manager_image_runs_as_its_non_root_user() -> None:
    assert project_images().resolve("distributetrain/manager:0.1.0").user == "65532:65532"
