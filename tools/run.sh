#!/usr/bin/env bash
# run.sh [dit_block flags...] — the main job on a fresh machine: installs what
# is missing, builds, generates weights/block0.safetensors (1.29 GB, once) and
# runs dit_block on it. Without a GPU, dit_block says so and runs the CPU path
# on a reduced token count.
set -euo pipefail
cd "$(dirname "$0")/.."
H3_NO_VENV=1 tools/deps.sh
tools/build.sh build
if [ ! -f weights/block0.safetensors ]; then
  echo "run: generating weights/block0.safetensors (synthetic H3 block, seed 0)"
  build/tools/gen_weights --seed 0 --out weights/block0.safetensors
fi
exec build/dit_block --weights weights/block0.safetensors "$@"
