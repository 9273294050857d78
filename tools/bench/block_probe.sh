#!/usr/bin/env bash
# block_probe.sh — where the block's time goes outside attention and the
# GEMMs, and why attention is slower inside the block than alone (issue 35
# item 5). One GPU, one run, four measurements:
#   1. attention alone on the block's own q, k, v (bench_attn --qkv, the
#      default kernel) while nvidia-smi samples the SM clock, board power,
#      temperature and the clock-event reasons every 20 ms;
#   2. FlashAttention-3's (where H3_FA3_PATH names a build) and cuDNN's
#      FP8 attention on the same q, k, v under the same sampling;
#   3. the same block through dit_block (--check none, --repeat N) under the
#      same sampling, with its per-op table;
#   4. ncu over one block run (clocks not locked: --clock-control none):
#      every kernel's duration, SM and DRAM throughput (share of peak) and
#      DRAM bytes. dit_block runs the block op by op, then twice as a CUDA
#      graph; the table keeps one block's launches. ncu replays each kernel
#      alone after a cache flush, so attention's ncu time is its time on the
#      block's data with nothing before it: if that matches (1) and not (3),
#      the difference comes from what runs before it (clock and power), not
#      from its inputs.
# The clock lines give the median over samples drawn above 150 W (the work,
# not the gaps between runs). tools/bench/block_probe.py prints the tables.
# Usage: tools/bench/block_probe.sh BUILD_DIR WEIGHTS INPUT QKV [GEMM=fp8]
# Env: OUT (./out), H3_PROBE_REPEAT (20), H3_FA3_PATH.
set -uo pipefail
if [ $# -lt 4 ]; then sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; fi
B=$1 W=$2 IN=$3 QKV=$4 GEMM=${5:-fp8}
N=${H3_PROBE_REPEAT:-20}
OUT=${OUT:-$PWD/out}/block_probe
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "block_probe.sh: no GPU (nvidia-smi -L failed)"; exit 77; }
for f in "$W" "$IN" "$QKV"; do [ -f "$f" ] || { echo "block_probe.sh: $f: no such file" >&2; exit 2; }; done
# the richest field list this driver accepts
FIELDS=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader >/dev/null 2>&1 || FIELDS=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
sampled() { # NAME CMD...: CMD's output in NAME.log, the samples in NAME.smi
  local name=$1; shift
  nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits -lms 20 >"$OUT/$name.smi" 2>/dev/null &
  local smi=$!
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  echo "$name: rc=$rc"
}
sampled attn_alone timeout 300 "$B/tools/bench/bench_attn" --qkv "$QKV" --kernels sm90 --no-selfcheck --warmup 2 --reps "$N"
# FA3's and cuDNN's FP8 kernels on the same q, k, v under the same sampling:
# whether ours draws more power than they do, and so slows more on a board
# that caps it (peers_attention.py; FA3 only where H3_FA3_PATH names a build)
for peer in ${H3_FA3_PATH:+fa3_fp8} cudnn_fp8; do
  sampled "${peer}_alone" timeout 300 python3 "$HERE/peers_attention.py" --qkv "$QKV" --impls "$peer" \
    ${H3_FA3_PATH:+--fa3-path "$H3_FA3_PATH"} --no-exact --warmup 2 --reps "$N"
done
sampled block timeout 300 "$B/dit_block" --weights "$W" --input "$IN" --gemm "$GEMM" --check none --quiet \
  --warmup 2 --repeat "$N" --json "$OUT/block.json"
echo "ncu: $(date +%T)"
# The report goes to a file and is printed from it afterwards, and ncu's own
# messages to ncu_tool.log: a run that profiles nothing says why there.
NCU_METRICS=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__cycles_elapsed.avg.per_second
rm -f "$OUT/block.ncu-rep"
timeout 400 ncu --clock-control none --metrics "$NCU_METRICS" --export "$OUT/block" \
  --log-file "$OUT/ncu_tool.log" \
  "$B/dit_block" --weights "$W" --input "$IN" --gemm "$GEMM" --check none --quiet --warmup 0 --repeat 1 \
  >"$OUT/ncu_app.log" 2>&1
echo "ncu: rc=$? $(date +%T); $(grep -c '==PROF== Profiling' "$OUT/ncu_tool.log" 2>/dev/null) launches profiled"
if [ -f "$OUT/block.ncu-rep" ]; then
  ncu --import "$OUT/block.ncu-rep" --csv --page raw --print-units base --metrics "$NCU_METRICS" \
    >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
else
  echo "ncu: no report written (see ncu_tool.log)" >"$OUT/ncu.err"; : >"$OUT/ncu.csv"
fi
python3 "$HERE/block_probe.py" "$OUT"
