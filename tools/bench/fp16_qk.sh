#!/usr/bin/env bash
# fp16_qk.sh — one device call for the FP16-accumulator question (issue 5,
# docs/perf.md 2026-12-05 third session): do the tensor cores and the exp unit
# overlap better when wgmma accumulates in FP16, and is v130 (v78 with
# QK^T summed in FP16, softmax on f16x2) or v131 faster, and how accurate?
#   1. overlap_probe.sh with the FP16-accumulator modes beside the FP32 ones;
#   2. v78 against v130 and v131 (v130's FP16 accumulator alone, S unpacked to
#      FP32 for v78's softmax), interleaved rounds (sm90_ab.sh) at S = 30272;
#   3. bench_attn --accuracy-only for the three (vs FP64, S = 8192, H = 8);
#   4. test_gpu_attention --quick with v130 (distance from the contract's
#      emulation; failures expected where the tolerance is the contract's).
# Usage (on the device machine, BUILD_DIR built with 90a, e.g. build-sp):
#   bash tools/bench/fp16_qk.sh BUILD_DIR [ROUNDS=3]     (~4 minutes)
set -uo pipefail
B=${1:?usage: fp16_qk.sh BUILD_DIR [ROUNDS]}
R=${2:-3}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
S0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv
echo "== overlap probe"
H3_PROBE_MODES="T E TE TEs Th TEh TEsh F TF TFh I TI" timeout 120 bash tools/bench/overlap_probe.sh "$B" 400000 2>&1 | tee "$OUT/probe.txt"
echo "== v130 sanity (bench_attn's selfcheck) at $((SECONDS - S0)) s"
H3_SM90_VARIANT=130 timeout 60 "$B/tools/bench/bench_attn" --seqs 4096 --heads 56 --kernels sm90 --reps 3 2>&1 | tail -8
echo "== v78 vs v130 vs v131 at $((SECONDS - S0)) s"
timeout 200 bash tools/bench/sm90_ab.sh "$B" 78,130,131 "$R" 20 2>&1 | tail -5
echo "== accuracy vs FP64 at $((SECONDS - S0)) s"
for v in 78 130 131; do
  echo "-- v$v"
  H3_SM90_VARIANT=$v timeout 90 "$B/tools/bench/bench_attn" --accuracy-only --kernels sm90 2>&1 | tail -8
done
echo "== test_gpu_attention --quick with v130 at $((SECONDS - S0)) s"
H3_SM90_VARIANT=130 timeout 120 "$B/tests/test_gpu_attention" --quick >"$OUT/tga_v130.txt" 2>&1
echo "rc=$?"
grep -E "FAIL|passed|failed" "$OUT/tga_v130.txt" | head -20
echo "== done at $((SECONDS - S0)) s"
