#!/usr/bin/env bash
# run.sh [dit_block flags...] — the main job on a fresh machine: installs what
# is missing, builds, generates weights/block0.safetensors (1.29 GB, once) and
# runs dit_block on it (or on --weights PATH when given: then nothing is
# generated). Without a GPU, dit_block says so and runs the CPU path on a
# reduced token count.
# Paths in the flags are the caller's: the build happens in the repository
# root, but dit_block runs in the directory run.sh was called from, so
# `tools/run.sh --json out.json` writes ./out.json there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && H3_NO_VENV=1 tools/deps.sh && tools/build.sh build)
weights=(--weights "$root/weights/block0.safetensors")
for a in "$@"; do
  case $a in --weights | --weights=*) weights=() ;; esac
done
if [ ${#weights[@]} -gt 0 ] && [ ! -f "$root/weights/block0.safetensors" ]; then
  echo "run: generating weights/block0.safetensors (synthetic H3 block, seed 0)"
  (cd "$root" && build/tools/gen_weights --seed 0 --out weights/block0.safetensors)
fi
exec "$root/build/dit_block" ${weights[@]+"${weights[@]}"} "$@"
