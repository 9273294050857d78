#!/usr/bin/env bash
# attn_in_block.sh — why the attention kernel is slower inside dit_block than
# in bench_attn: the same kernel timed and profiled in both, one GPU, one go.
# For each Hopper variant listed: dit_block's attention row (--check none) and
# bench_attn at S = 30272, each with the SM clock and board power sampled; then ncu (clocks not locked) of one launch in each
# program: duration, SM clock, instructions executed (data-dependent paths,
# e.g. the O rescale, change the count), tensor-pipe and issue utilisation.
# Usage: tools/bench/attn_in_block.sh BUILD_DIR [variants]   (default 16)
# A variant runs in one mode (V smoothed or not, kFVMean): dit_block gets the
# matching --smooth-v (on for variants that add V's mean, e.g. 78, dit_block's
# default), and bench_attn times that variant's row only.
# Env: OUT (logs; default ./out), H3_WEIGHTS (default: generated in /tmp).
set -uo pipefail
B=${1:?usage: attn_in_block.sh BUILD_DIR [variants]}
VARS=${2:-16}
OUT=${OUT:-$PWD/out}/attn_in_block
mkdir -p "$OUT"
W=${H3_WEIGHTS:-/tmp/h3_attn_in_block_weights.safetensors}
[ -f "$W" ] || "$B/tools/gen_weights" --seed 0 --out "$W" >"$OUT/gen.log" 2>&1 || { echo "gen_weights failed"; exit 1; }
# clocks NAME CMD...: runs CMD while nvidia-smi samples the SM clock and the
# board power every 50 ms; prints the medians over the busy samples (> 250 W,
# so weight loading and CPU work do not count).
clocks() {
  local name=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 >"$OUT/clocks_$name.csv" 2>/dev/null &
  local pid=$!
  "$@"; local rc=$?
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  echo "  $name: busy samples $(awk -F', *' '$2 > 250' "$OUT/clocks_$name.csv" | wc -l), median SM clock" \
    "$(awk -F', *' '$2 > 250 {print $1}' "$OUT/clocks_$name.csv" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') MHz," \
    "median power $(awk -F', *' '$2 > 250 {print $2}' "$OUT/clocks_$name.csv" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') W"
  return $rc
}
# smooth_of N: "on" if vN adds V's mean (bench_attn then times its h3_fp8_sm90_vs row), else "off"
smooth_of() {
  H3_SM90_VARIANT=$1 "$B/tools/bench/bench_attn" --seqs 256 --heads 1 --kernels sm90 --reps 1 --warmup 0 --no-selfcheck \
    2>/dev/null | grep -q '^h3_fp8_sm90_vs ' && echo on || echo off
}
for v in ${VARS//,/ }; do
  H3_SM90_VARIANT=$v clocks block_v$v timeout 200 "$B/dit_block" --weights "$W" --check none --repeat 20 --quiet \
    --smooth-v "$(smooth_of "$v")" >"$OUT/block_v$v.log" 2>&1
  echo "variant $v dit_block: rc=$? $(grep -E '^ *(attention|qkv_gemm|fc1_gemm)' "$OUT/block_v$v.log" | tr -s ' ' | tr '\n' ';')"
  H3_SM90_VARIANT=$v clocks bench_v$v timeout 200 "$B/tools/bench/bench_attn" --seqs 30272 --kernels sm90 --reps 40 \
    --no-selfcheck >"$OUT/bench_v$v.log" 2>&1
  echo "variant $v bench_attn: rc=$? $(grep -E 'sm90 +30272' "$OUT/bench_v$v.log" | tr -s ' ')"
done
MET=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,sm__inst_executed_pipe_xu.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_sector_hit_rate.pct
v=${VARS%%,*}
H3_SM90_VARIANT=$v timeout 200 ncu --clock-control none --kernel-name regex:attn_fp8_sm90 --launch-count 1 --metrics "$MET" \
  "$B/dit_block" --weights "$W" --check none --repeat 1 --warmup 0 --quiet --smooth-v "$(smooth_of "$v")" \
  >"$OUT/ncu_block.log" 2>&1
echo "ncu dit_block (variant $v): rc=$?"; grep -E "^ +[a-z_]+__" "$OUT/ncu_block.log"
H3_SM90_VARIANT=$v timeout 200 ncu --clock-control none --kernel-name regex:attn_fp8_sm90 --launch-count 1 --metrics "$MET" \
  "$B/tools/bench/bench_attn" --seqs 30272 --kernels sm90 --no-selfcheck --warmup 0 --reps 1 >"$OUT/ncu_bench.log" 2>&1
echo "ncu bench_attn (variant $v): rc=$?"; grep -E "^ +[a-z_]+__" "$OUT/ncu_bench.log"
