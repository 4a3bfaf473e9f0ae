#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (TensorFlow + Gloo, CPU) into the Python environment given as $1 (a venv).
# Horovod compiles against the TensorFlow already installed there, so it needs --no-build-isolation; pip caches
# the built wheel, so only the first run on a machine takes its ~5 minutes.
set -euo pipefail
venv=${1:?usage: install-horovod.sh VENV}
if "$venv/bin/python" -c "import horovod.tensorflow" 2>/dev/null; then exit 0; fi
# Horovod's bundled gloo needs the system cmake 3.x; the cmake 4 wheel from PyPI rejects it.
command -v cmake >/dev/null || { echo "install-horovod: cmake is missing (apt-get install cmake)" >&2; exit 1; }
export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 \
  HOROVOD_WITHOUT_MPI=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)"
"$venv/bin/pip" install --no-build-isolation -c "$(dirname "$0")/../constraints.txt" horovod==0.28.1
"$venv/bin/python" -c "import horovod.tensorflow as hvd; assert hvd.gloo_built(), 'Horovod built without Gloo'"
