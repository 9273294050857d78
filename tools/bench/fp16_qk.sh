#!/usr/bin/env bash
# fp16_qk.sh — one device call for the FP16-accumulator question (issue 5,
# docs/perf.md 2026-12-05 third session and 2026-12-06): is QK^T in an FP16
# wgmma accumulator faster, alone or as the room that lets each of wg3's
# warpgroups pipeline QK^T(n+1) beside PV(n), and how accurate is it?
# Variants (kernels/attn_fp8_sm90.cu): v78 the default; v130 FP16 S with the
# softmax on f16x2; v131 FP16 S unpacked to FP32 for v78's softmax; v132
# v131 pipelined (QK^T(n+1) and PV(n) issued together, softmax(n+1) under
# PV(n)); v133 v130 so pipelined; v134 / v135 v132 / v133 with P(n) kept
# live so that ptxas puts the PV wait later in the softmax (v133, v134 spill).
# In order of importance, each step capped so the whole stays under 580 s:
#   1. a selfcheck of the new variants at S = 4096 (bench_attn);
#   2. interleaved timing rounds at S = 30272, H = 56 (sm90_ab.sh);
#   3. bench_attn --accuracy-only for each (vs FP64, S = 8192, H = 8;
#      v131, v132 and v134 should print the same figures);
#   4. overlap_probe.sh with the FP16-accumulator modes beside the FP32 ones;
#   5. test_gpu_attention --quick with v132 and v135 (distance from the
#      contract's emulation; failures expected where the tolerance is the
#      contract's).
# Usage (on the device machine, BUILD_DIR built with 90a and -DH3_SM90_SPILLING=ON
# for v133 and v134, e.g. build-sp):
#   [H3_FP16QK_BUDGET=570] bash tools/bench/fp16_qk.sh BUILD_DIR [ROUNDS=2] [VARIANTS]   (~6-9 minutes)
set -uo pipefail
B=${1:?usage: fp16_qk.sh BUILD_DIR [ROUNDS] [VARIANTS]}
R=${2:-2}
VARS=${3:-78,130,131,132,133,134,135}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
S0=$SECONDS
BUDGET=${H3_FP16QK_BUDGET:-570}  # seconds for the whole script; later steps are cut to fit
left() { echo $((BUDGET - (SECONDS - S0))); }
cap() { local x=$(($(left) - $1)); echo $((x < 5 ? 5 : x)); }   # what is left minus a reserve, >= 5 s
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv
for v in ${VARS//,/ }; do
  [ "$v" -ge 132 ] || continue
  echo "== v$v selfcheck at $((SECONDS - S0)) s"
  H3_SM90_VARIANT=$v timeout 40 "$B/tools/bench/bench_attn" --seqs 4096 --heads 56 --kernels sm90 --reps 3 2>&1 | tail -4
done
echo "== timing rounds ($VARS) at $((SECONDS - S0)) s"
NV=$(tr ',' '\n' <<<"$VARS" | grep -c .)
# sm90_ab.sh prints a line per variant and round, a header, then a median per variant
timeout $(cap 150) bash tools/bench/sm90_ab.sh "$B" "$VARS" "$R" 20 2>&1 | tail -$((NV * (R + 1) + 1))
echo "== accuracy vs FP64 at $((SECONDS - S0)) s"
for v in ${VARS//,/ }; do
  echo "-- v$v"
  H3_SM90_VARIANT=$v timeout 40 "$B/tools/bench/bench_attn" --accuracy-only --kernels sm90 2>&1 | tail -5
  [ "$(left)" -gt 100 ] || break
done
echo "== overlap probe at $((SECONDS - S0)) s"
H3_PROBE_MODES="T E TE Th TEh TEsh" timeout $(cap 60) bash tools/bench/overlap_probe.sh "$B" 400000 2>&1 | tee "$OUT/probe.txt" | tail -12
for v in 132 135; do
  [ "$(left)" -gt 25 ] || break
  echo "== test_gpu_attention --quick with v$v at $((SECONDS - S0)) s"
  H3_SM90_VARIANT=$v timeout $(($(left) / 2)) "$B/tests/test_gpu_attention" --quick >"$OUT/tga_v$v.txt" 2>&1
  echo "rc=$?"
  grep -E "FAIL|passed|failed" "$OUT/tga_v$v.txt" | head -8
done
echo "== done at $((SECONDS - S0)) s"
