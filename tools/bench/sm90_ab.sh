#!/usr/bin/env bash
# sm90_ab.sh — timing comparison of attn_fp8_sm90 variants that resists the
# H200's drifting clocks: ROUNDS rounds, each timing every listed variant
# once (bench_attn, S = 30272, H = 56, REPS timed runs), so every variant
# sees the same thermal history; prints each variant's medians per round,
# the SM clock around each run, and the median over rounds.
# Usage: tools/bench/sm90_ab.sh BUILD_DIR VARIANTS [ROUNDS=2] [REPS=30]
set -uo pipefail
B=${1:?usage: sm90_ab.sh BUILD_DIR VARIANTS [ROUNDS] [REPS]}
VARS=${2:?variants, e.g. 1,16,34}
ROUNDS=${3:-2}
REPS=${4:-30}
OUT=${OUT:-$PWD/out}/sm90_ab
mkdir -p "$OUT"
declare -A all
for r in $(seq 1 "$ROUNDS"); do
  for v in ${VARS//,/ }; do
    clk=$(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader 2>/dev/null | tr -d ' ')
    # with H3_SM90_VARIANT set bench_attn times vN only, in its own mode's row
    # (h3_fp8_sm90, or h3_fp8_sm90_vs for variants that add V's mean, e.g. v78)
    ms=$(H3_SM90_VARIANT=$v timeout 120 "$B/tools/bench/bench_attn" --seqs 30272 --kernels sm90 --reps "$REPS" \
         --no-selfcheck 2>>"$OUT/stderr.log" | awk '$1 ~ /^h3_fp8_sm90/ {print $5}')
    echo "round $r v$v: ${ms:-failed} ms (before: $clk)"
    all[$v]="${all[$v]:-} ${ms:-nan}"
  done
done
echo "== median over rounds (ms at S = 30272, H = 56)"
for v in ${VARS//,/ }; do
  echo "v$v: $(echo ${all[$v]} | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')  (rounds:${all[$v]})"
done
