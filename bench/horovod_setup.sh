#!/usr/bin/env bash
# Horovod, the peer of issue 68, installed into an environment of its own:
# PyPI's horovod (HOROVOD_VERSION, default 0.28.1, its last release) built
# from source against Debian's PyTorch 1.13 (python3-torch, which imports
# only under /usr/bin/python3: the venv sees the system's packages) and
# Debian's Open MPI, with its PyTorch and MPI parts and nothing else:
#
#   HOROVOD_WITH_MPI=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1
#   HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1
#
# (Gloo left out: under mpirun Horovod's CPU collectives default to MPI,
# and bench/horovod_bench.sh runs it under mpirun, as its docs' CPU
# example does.) Then `horovodrun --check-build` must list PyTorch and MPI.
#
#   bench/horovod_setup.sh [VENV]    (default build-horovod/venv)
#
# Needs network (PyPI) once, a C++ compiler, CMake and Open MPI's headers
# (scripts/setup installs them). Building takes ~10 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build-horovod/venv}
version=${HOROVOD_VERSION:-0.28.1}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod is already in $venv: $("$venv/bin/python" -c 'import horovod; print(horovod.__version__)')"
  exit 0
fi
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench/horovod_setup.sh: Debian's python3-torch is missing (scripts/setup installs it)" >&2; exit 2; }
command -v mpicxx >/dev/null ||
  { echo "bench/horovod_setup.sh: mpicxx is missing (apt-get install libopenmpi-dev)" >&2; exit 2; }
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --upgrade "pip<25" wheel "setuptools<70" cmake
# --no-build-isolation: Horovod's setup.py imports torch to build against it
# (Debian's, seen through the system site-packages), and pip's isolated
# build environment would not see it. -j: its CMake build's parallelism.
HOROVOD_WITH_MPI=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI MAKEFLAGS="-j$(nproc)" \
  "$venv/bin/pip" install --no-cache-dir --no-build-isolation "horovod[pytorch]==$version"
"$venv/bin/horovodrun" --check-build | tee "$venv/horovod-check-build.txt"
grep -q '\[X\] PyTorch' "$venv/horovod-check-build.txt" && grep -q '\[X\] MPI' "$venv/horovod-check-build.txt" ||
  { echo "bench/horovod_setup.sh: horovod built without PyTorch or MPI (above)" >&2; exit 1; }
