#!/usr/bin/env bash
# sm90_ab.sh — timing comparison of the lab's Hopper variants (lab/attn_sm90_lab.cu,
# a build configured with -DH3_LAB=ON) that resists the
# H200's drifting clocks: ROUNDS rounds, each timing every listed variant
# once (bench_attn, H = 56, REPS timed runs, at S = 30272 or at each S of
# H3_AB_SEQS, e.g. H3_AB_SEQS=4096,8192,30272), so every variant sees the
# same thermal history; prints each variant's medians per round, the SM
# clock around each run, and the median over rounds per S. With H3_AB_QKV=F1,F2..
# the inputs are those files' q, k, v (bench_attn --qkv: a real block's
# attention inputs, e.g. the model-like profile) instead of N(0,1) at H3_AB_SEQS,
# and each line also gives the variant's error against exact attention.
# Usage: [H3_AB_SEQS=S1,S2..] [H3_AB_QKV=F1,..] lab/sm90_ab.sh BUILD_DIR VARIANTS [ROUNDS=2] [REPS=30]
set -uo pipefail
B=${1:?usage: sm90_ab.sh BUILD_DIR VARIANTS [ROUNDS] [REPS]}
VARS=${2:?variants, e.g. 1,16,34}
ROUNDS=${3:-2}
REPS=${4:-30}
SEQS=${H3_AB_SEQS:-30272}
QKV=${H3_AB_QKV:-}
if [ -n "$QKV" ]; then
  # the S of each file is read back from bench_attn's table; keys are the files
  SEQS=$QKV
fi
nseq=$(tr ',' '\n' <<<"$SEQS" | grep -c .)
OUT=${OUT:-$PWD/out}/sm90_ab
mkdir -p "$OUT"
declare -A all
for r in $(seq 1 "$ROUNDS"); do
  for v in ${VARS//,/ }; do
    clk=$(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader 2>/dev/null | tr -d ' ')
    # bench_attn --variant N times vN only, as row lab_vN
    if [ -n "$QKV" ]; then
      # one row per file, in file order: "file ms err"
      rows=$(timeout $((120 * nseq)) "$B/tools/bench/bench_attn" --variant "$v" --qkv "$QKV" \
           --reps "$REPS" --no-selfcheck 2>>"$OUT/stderr.log" | awk '$1 ~ /^lab_v/ {print $2 "/" $3, $5, $7}' |
           paste -d' ' <(tr ',' '\n' <<<"$QKV") -)
    else
      rows=$(timeout $((120 * nseq)) "$B/tools/bench/bench_attn" --variant "$v" --seqs "$SEQS" \
           --reps "$REPS" --no-selfcheck 2>>"$OUT/stderr.log" | awk '$1 ~ /^lab_v/ {print $2, $5}')
    fi
    for S in ${SEQS//,/ }; do
      ms=$(awk -v s="$S" '$1 == s {print $3 ? $3 : $2}' <<<"$rows")
      extra=$(awk -v s="$S" '$1 == s && $4 != "" {print " (" $2 ", error vs exact " $4 ")"}' <<<"$rows")
      echo "round $r v$v ${QKV:+file }S=$S: ${ms:-failed} ms$extra (before: $clk)"
      all[$v,$S]="${all[$v,$S]:-} ${ms:-nan}"
    done
  done
done
for S in ${SEQS//,/ }; do
  echo "== median over rounds (ms at S = $S, H = 56)"
  for v in ${VARS//,/ }; do
    echo "v$v: $(echo ${all[$v,$S]} | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')  (rounds:${all[$v,$S]})"
  done
done
