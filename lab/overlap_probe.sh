#!/usr/bin/env bash
# overlap_probe.sh — runs overlap_probe (do the exp unit and the FP8 tensor
# cores work at the same time?) one mode at a time, with nvidia-smi sampling
# the SM clock and board power every 20 ms, and prints per mode the probe's
# line and the median clock and power of the samples above 150 W (the
# probe's own runs). The probe's rates assume the maximum clock; divide by
# the sampled clock's share of it for the rates per real clock.
# Usage: lab/overlap_probe.sh BUILD_DIR [GROUPS=100000]  (H3_PROBE_MODES="T TE ..." picks modes)
set -uo pipefail
B=${1:?usage: overlap_probe.sh BUILD_DIR [GROUPS]}
G=${2:-100000}
P="$B/lab/overlap_probe"
[ -x "$P" ] || { echo "overlap_probe.sh: $P not built (configure with -DH3_LAB=ON)" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "overlap_probe.sh: no nvidia-smi (no GPU?)" >&2; exit 77; }
for m in ${H3_PROBE_MODES:-T E TE TEs F TF I TI Th TEh TEsh TFh}; do
  f=$(mktemp)
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 >"$f" 2>/dev/null &
  smi=$!
  line=$("$P" --only "$m" --groups "$G" --reps 5 | tail -1)
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  clk=$(awk -F', *' '$2 > 150 {print $1}' "$f" | sort -n | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] " MHz (" NR " samples)" : "n/a"}')
  pwr=$(awk -F', *' '$2 > 150 {print $2}' "$f" | sort -g | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] " W" : "n/a"}')
  stats="SM clock median $clk, power median $pwr"
  echo "$line | $stats"
  rm -f "$f"
done
