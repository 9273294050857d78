#!/usr/bin/env bash
# build.sh [BUILD_DIR] — configures and builds h3block (CUDA parts when nvcc is
# found, on PATH or in /usr/local/cuda/bin). H3_CUDA_ARCHS picks the targets
# (default 89;90a;120, the GPUs we ship for); extra cmake args in H3_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
args=(-DH3_CUDA_ARCHS="${H3_CUDA_ARCHS:-89;90a;120}")
[ -x .venv/bin/python ] && args+=(-DH3_PYTHON="$PWD/.venv/bin/python")
# shellcheck disable=SC2086
cmake -S . -B "$build" "${args[@]}" ${H3_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
