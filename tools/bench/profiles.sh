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
# H3_PROF_ACC=S:H adds three H-head files at S, for the accuracy table: N(0,1), FA3's stress
# mix (make_qkv.py) and the model-like block's first H heads (e.g. 8192:8).
# Env: H3_BENCH_TMP (/tmp/h3prof: weights, inputs, q/k/v files; kept, reused),
# H3_PROF_PROFILES (model uniform: the data profiles), H3_BENCH_REPS (10),
# H3_VARIANTS, H3_PEERS, H3_FA3_PATH, H3_FLASHINFER_PATH, OUT (./out).
# Needs a GPU, PyTorch with safetensors, and (for cudnn_fp8) the cuDNN frontend.
set -uo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] || [ $# -lt 1 ]; then
  sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -lt 1 ] && exit 2 || exit 0
fi
BUILD=$1
SEQS=${2:-8192,30272,75600}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$PWD/out}
REPS=${H3_BENCH_REPS:-10}
PEERS=${H3_PEERS:-cudnn_bf16,cudnn_fp8,fa3_fp8${H3_FLASHINFER_PATH:+,flashinfer_fp8}}
source "$HERE/prof_files.sh" # prof_qkv; PROF_DIR: the profiles' files
mkdir -p "$PROF_DIR" "$OUT"
if ! nvidia-smi -L >/dev/null 2>&1; then echo "profiles.sh: no GPU (nvidia-smi -L failed)"; exit 77; fi
for t in dit_block tools/gen_weights tools/gen_inputs tools/bench/bench_attn; do
  [ -x "$BUILD/$t" ] || { echo "profiles.sh: $BUILD/$t is missing (build first)"; exit 2; }
done
export PYTHONUNBUFFERED=1
files=()
for prof in ${H3_PROF_PROFILES:-model uniform}; do
  case $prof in model | uniform) ;; *) echo "profiles.sh: H3_PROF_PROFILES: unknown profile '$prof' (model, uniform)"; exit 2 ;; esac
  for S in ${SEQS//,/ }; do
    prof_qkv $prof "$S" && files+=("$QKV")
  done
done
# H3_PROF_ACC=S:H adds the accuracy cases (issue 35 item 3): N(0,1), FA3's stress mix and the
# model-like block's first H heads, at S (tools/bench/make_qkv.py)
if [ -n "${H3_PROF_ACC:-}" ]; then
  IFS=: read -r AS AH <<<"$H3_PROF_ACC"
  for d in randn stress; do
    f=$PROF_DIR/qkv_${d}_${AS}_h$AH.safetensors
    [ -f "$f" ] || python3 "$HERE/make_qkv.py" --dist $d --tokens "$AS" --heads "$AH" --seed 1 --out "$f" && files+=("$f")
  done
  f=$PROF_DIR/qkv_model_${AS}_h$AH.safetensors
  if [ -f "$f" ] || { prof_qkv model "$AS" && python3 "$HERE/make_qkv.py" --from "$QKV" --heads "$AH" --out "$f"; }; then
    files+=("$f")
  fi
fi
[ ${#files[@]} -gt 0 ] || { echo "profiles.sh: no q/k/v files"; exit 1; }
list=$(IFS=,; echo "${files[*]}")
echo "== bench_attn: default kernels"
timeout 300 "$BUILD/tools/bench/bench_attn" --qkv "$list" --reps "$REPS" --no-selfcheck --json "$OUT/prof_ours.json"
for v in ${H3_VARIANTS:-}; do
  echo "== bench_attn: v$v"
  timeout 300 "$BUILD/tools/bench/bench_attn" --variant "$v" --qkv "$list" --reps "$REPS" \
    --no-selfcheck --json "$OUT/prof_v$v.json"
done
echo "== peers: $PEERS"
timeout 400 python3 "$HERE/peers_attention.py" --qkv "$list" --impls "$PEERS" --reps "$REPS" \
  ${H3_FA3_PATH:+--fa3-path "$H3_FA3_PATH"} ${H3_FLASHINFER_PATH:+--flashinfer-path "$H3_FLASHINFER_PATH"} \
  --json "$OUT/prof_peers.json"
python3 "$HERE/profiles_table.py" "$OUT" --json "$OUT/profiles.json"
