"""`python -m distributetrain.chief.horovodrun ARGS`: horovodrun itself, without its per-launch build check.

horovodrun (horovod/runner/launch.py, Horovod 0.28.1: `run_controller` for a static job, `_run_elastic` for
an elastic one) asks `gloo_built()` (horovod/common/util.py) before it starts any rank: a forked process
that imports horovod.tensorflow, and so TensorFlow, only to answer whether the extension was built with
Gloo. That is ~1.5 s of CPU on every launch and relaunch, spent on a fact fixed when the image was built.
The base image checks it once, when it is built (base-image/Dockerfile: `horovodrun --check-build`), and
says so in its environment: DT_HOROVOD_BUILD_CHECKED, the controllers it found (`gloo`, or `gloo,mpi`).

This module runs horovodrun's own entry point (`run_commandline`, the console script's) with the check of
each controller the image vouches for answered from that line; everything else - arguments, ssh, the
rendezvous, elastic mode, exit codes - is horovodrun's, unchanged. It replaces nothing when the image names
no controller or Horovod is not the version read above (another version may check elsewhere): then
horovodrun checks as it always does. The launcher runs it instead of `horovodrun` only under the same two
conditions (`vouched`), so its argv says which one ran.

The image's own check is `horovodrun --check-build` (the same `gloo_built()`), run where it is built; a venv
made by scripts/install-horovod.sh asserts `gloo_built()` as it installs Horovod.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from importlib import metadata

from distributetrain import naming

# the Horovod whose launch.py this module's docstring reads; any other runs its own checks
HOROVOD_VERSION = "0.28.1"
# horovod.runner.launch's names for each controller's build check
_CHECKS = {"gloo": "gloo_built", "mpi": "mpi_built"}


def vouched(env: Mapping[str, str], *, horovod_version: str | None) -> frozenset[str]:
    """The controllers whose build check horovodrun may skip: those the image says its build has
    (DT_HOROVOD_BUILD_CHECKED), when Horovod is the version this module reads; else none."""
    if horovod_version != HOROVOD_VERSION:
        return frozenset()
    named = {part.strip().lower() for part in env.get(naming.ENV_HOROVOD_BUILD_CHECKED, "").split(",")}
    return frozenset(named & _CHECKS.keys())


def installed_horovod() -> str | None:
    """The installed Horovod's version, from its package metadata (no import of Horovod itself)."""
    try:
        return metadata.version("horovod")
    except metadata.PackageNotFoundError:
        return None


def _answered(verbose: bool = False) -> bool:
    """The image's build-time check said yes (horovodrun's checks take `verbose`)."""
    return True


def main() -> int:
    from horovod.runner import launch

    for controller in vouched(os.environ, horovod_version=installed_horovod()):
        check: Callable[..., bool] = _answered
        setattr(launch, _CHECKS[controller], check)
    sys.argv[0] = "horovodrun"  # the console script's name, for its usage and error lines
    launch.run_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
