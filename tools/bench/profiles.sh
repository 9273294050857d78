#!/usr/bin/env bash
# profiles.sh — attention on the block's own q, k, v, for both synthetic data
# profiles (model-like and uniform): our kernels and the peers, time and error
# against exact attention, in one run on one GPU (docs/perf.md, docs/accuracy.md).
#
#   tools/bench/profiles.sh BUILD_DIR [SEQS=8192,30272,75600]
#
# For each profile (gen_weights / gen_inputs --profile) and each S: the block's
# weights and inputs, then its attention inputs (q, k after q/k-norm and RoPE,
# v: tools/bench/torch_block.py --dump-qkv), then on those same files
#   bench_attn --qkv     our default kernels (h3_fp8_sm90_vs = dit_block's
#                        default, V smoothed; h3_fp8_sm90 = --smooth-v off;
#                        h3_fp8_mma = the portable kernel), and, in a build
#                        with the lab (-DH3_LAB=ON), each lab variant of
#                        H3_VARIANTS (e.g. "147 151") alone, as vN
#   peers_attention.py   H3_PEERS (default cudnn_bf16,cudnn_fp8,fa3_fp8, and
#                        flashinfer_fp8 with H3_FLASHINFER_PATH); FA3 from
#                        H3_FA3_PATH (a build of tools/bench/build_fa3.sh),
#                        FlashInfer from H3_FLASHINFER_PATH (build_flashinfer.sh)
# then tools/bench/profiles_table.py prints one table (ms, TFLOPS, error vs
# exact per kernel, profile and S) and writes $OUT/profiles.json.
# Env: H3_BENCH_TMP (/tmp/h3prof: weights, inputs, q/k/v files; kept, reused),
# H3_BENCH_REPS (10), H3_VARIANTS, H3_PEERS, H3_FA3_PATH, H3_FLASHINFER_PATH,
# OUT (./out).
# Needs a GPU, PyTorch with safetensors, and (for cudnn_fp8) the cuDNN frontend.
set -uo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] || [ $# -lt 1 ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -lt 1 ] && exit 2 || exit 0
fi
B=$1
SEQS=${2:-8192,30272,75600}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMPD=${H3_BENCH_TMP:-/tmp/h3prof}
OUT=${OUT:-$PWD/out}
REPS=${H3_BENCH_REPS:-10}
PEERS=${H3_PEERS:-cudnn_bf16,cudnn_fp8,fa3_fp8${H3_FLASHINFER_PATH:+,flashinfer_fp8}}
mkdir -p "$TMPD" "$OUT"
if ! nvidia-smi -L >/dev/null 2>&1; then echo "profiles.sh: no GPU (nvidia-smi -L failed)"; exit 77; fi
for t in dit_block tools/gen_weights tools/gen_inputs tools/bench/bench_attn; do
  [ -x "$B/$t" ] || { echo "profiles.sh: $B/$t is missing (build first)"; exit 2; }
done
export PYTHONUNBUFFERED=1
files=()
for prof in model uniform; do
  W=$TMPD/block_$prof.safetensors
  [ -f "$W" ] || "$B/tools/gen_weights" --profile "$prof" --seed 1 --out "$W" || { echo "profiles.sh: gen_weights failed"; exit 1; }
  for S in ${SEQS//,/ }; do
    IN=$TMPD/inputs_${prof}_$S.safetensors QKV=$TMPD/qkv_${prof}_$S.safetensors
    [ -f "$IN" ] || "$B/tools/gen_inputs" --profile "$prof" --tokens "$S" --seed 2 --out "$IN" >/dev/null ||
      { echo "profiles.sh: gen_inputs failed"; exit 1; }
    if [ ! -f "$QKV" ]; then
      python3 "$HERE/torch_block.py" --weights "$W" --input "$IN" --dump-qkv "$QKV" --qkv-only ||
        { echo "profiles.sh: torch_block.py --dump-qkv failed ($prof, S = $S)"; continue; }
    fi
    files+=("$QKV")
  done
done
[ ${#files[@]} -gt 0 ] || { echo "profiles.sh: no q/k/v files"; exit 1; }
list=$(IFS=,; echo "${files[*]}")
echo "== bench_attn: default kernels"
timeout 300 "$B/tools/bench/bench_attn" --qkv "$list" --reps "$REPS" --no-selfcheck --json "$OUT/prof_ours.json"
for v in ${H3_VARIANTS:-}; do
  echo "== bench_attn: v$v"
  timeout 300 "$B/tools/bench/bench_attn" --variant "$v" --qkv "$list" --reps "$REPS" \
    --no-selfcheck --json "$OUT/prof_v$v.json"
done
echo "== peers: $PEERS"
timeout 400 python3 "$HERE/peers_attention.py" --qkv "$list" --impls "$PEERS" --reps "$REPS" \
  ${H3_FA3_PATH:+--fa3-path "$H3_FA3_PATH"} ${H3_FLASHINFER_PATH:+--flashinfer-path "$H3_FLASHINFER_PATH"} \
  --json "$OUT/prof_peers.json"
python3 "$HERE/profiles_table.py" "$OUT" --json "$OUT/profiles.json"
