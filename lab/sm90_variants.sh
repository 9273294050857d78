#!/usr/bin/env bash
# sm90_variants.sh — the lab's Hopper attention variants side by side on one
# GPU, in one go: for each variant (lab/attn_sm90_lab.cu) the attention tests
# (--quick, against the CPU emulation) and bench_attn at the given sequence
# lengths, then an ncu summary of the listed variants. Needs a build
# configured with -DH3_LAB=ON.
# Usage: lab/sm90_variants.sh BUILD_DIR [variants] [ncu-variants]
#   variants: comma list (default 147,150); a variant written bN is only
#   timed, not tested; ncu-variants (default: none).
# Env: H3_BENCH_SEQS (default 30272), OUT (logs; default ./out).
set -uo pipefail
B=${1:?usage: sm90_variants.sh BUILD_DIR [variants] [ncu-variants]}
VARS=${2:-147,150}
NCU_VARS=${3:-}
SEQS=${H3_BENCH_SEQS:-30272}
OUT=${OUT:-$PWD/out}/sm90_variants
mkdir -p "$OUT"
for v in ${VARS//,/ }; do
  echo "== variant $v"
  if [ "${v#b}" != "$v" ]; then
    v=${v#b}
  else
    timeout 300 "$B/tests/test_gpu_attention" --variant "$v" --quick >"$OUT/attn_test_v$v.log" 2>&1
    echo "test_gpu_attention --quick: rc=$? $(tail -1 "$OUT/attn_test_v$v.log")"
  fi
  timeout 300 "$B/tools/bench/bench_attn" --variant "$v" --seqs "$SEQS" \
    --json "$OUT/bench_v$v.json" >"$OUT/bench_v$v.log" 2>&1
  echo "bench_attn: rc=$?"; grep -E "sm90|ms|variant" "$OUT/bench_v$v.log" | tail -6
done
MET=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
for v in ${NCU_VARS//,/ }; do
  echo "== ncu variant $v"
  timeout 240 ncu --clock-control none --kernel-name regex:attn_sm90 --launch-count 1 \
    --metrics "$MET" --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section SourceCounters --section SpeedOfLight -f -o "$OUT/ncu_v$v" \
    "$B/tools/bench/bench_attn" --variant "$v" --seqs 30272 --no-selfcheck --warmup 0 --reps 1 >"$OUT/ncu_v$v.log" 2>&1
  echo "ncu: rc=$?"
  ncu -i "$OUT/ncu_v$v.ncu-rep" --page details >"$OUT/ncu_v$v.txt" 2>&1
  ncu -i "$OUT/ncu_v$v.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu_v${v}_sass.csv" 2>&1
  grep -E "Stall|stall|Pipe|Issue|Eligible|Active Warps|Duration|Throughput" "$OUT/ncu_v$v.txt" | head -40
done
