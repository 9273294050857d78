#!/usr/bin/env bash
# find_cuobjdump.sh [NVCC] — prints the cuobjdump that tests/test_sm90_ptxas.sh
# uses for its SASS check, or nothing (exit 0 either way). In order: the one on
# PATH, the one beside NVCC (default: nvcc on PATH, else
# /usr/local/cuda/bin/nvcc), the venv's NVIDIA PyPI wheel
# (.venv/lib/python3*/site-packages/nvidia/*/bin/cuobjdump, which tools/deps.sh
# installs when this prints nothing). tools/deps.sh and the test both run this,
# so what deps.sh considers present is what the test finds.
#
# Run alone: bash tools/find_cuobjdump.sh [NVCC]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
found=$(command -v cuobjdump || true)
[ -n "$found" ] || [ ! -x "$(dirname "$nvcc")/cuobjdump" ] || found=$(dirname "$nvcc")/cuobjdump
if [ -z "$found" ]; then
  for c in "$root"/.venv/lib/python3*/site-packages/nvidia/*/bin/cuobjdump; do [ -x "$c" ] && found=$c; done
fi
[ -z "$found" ] || echo "$found"
