#!/usr/bin/env bash
# test_gpu_block.sh DIT_BLOCK GEN_WEIGHTS WORKDIR [full]
# The whole block on the GPU against the CPU reference:
#   tiny config, 300 tokens (ragged tail): --check full, the CPU's own
#   end-to-end chain over every row vs the GPU output, plus every stage check;
#   with "full": the full-size block (1.29 GB generated in WORKDIR) at 30272
#   tokens with sampled-row stage checks.
# Exits 77 (skip) when there is no usable GPU.
# Run alone: ctest --test-dir build -R test_gpu_block --output-on-failure
set -uo pipefail
dit=$1 gen=$2 work=$3 mode=${4:-tiny}
mkdir -p "$work"
"$gen" --config tiny --seed 3 --out "$work/tiny.safetensors" >/dev/null 2>&1 || { echo "gen_weights failed"; exit 1; }
probe=$("$dit" --gpu --weights "$work/tiny.safetensors" --tokens 1 --check none --repeat 1 --warmup 0 --quiet 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 2 ] && grep -q "no usable GPU" <<<"$probe"; then
  echo "test_gpu_block: $probe: skipped"
  exit 77
fi
[ $rc -eq 0 ] || { echo "probe run failed (rc $rc): $probe"; exit 1; }
fail=0
for attn in mma auto; do
  if "$dit" --gpu --attn $attn --weights "$work/tiny.safetensors" --tokens 300 --check full --repeat 2 --quiet \
       --json "$work/tiny_$attn.json" >"$work/tiny_$attn.log" 2>&1; then
    echo "ok   tiny block, --attn $attn, --check full: $(grep -E '^block .*vs cpu chain' "$work/tiny_$attn.log")"
  else
    echo "FAIL tiny block, --attn $attn, --check full:"; tail -25 "$work/tiny_$attn.log"; fail=1
  fi
done
if [ "$mode" = full ]; then
  [ -f "$work/block0.safetensors" ] || "$gen" --seed 0 --out "$work/block0.safetensors" >/dev/null 2>&1
  if "$dit" --gpu --weights "$work/block0.safetensors" --sample 96 --repeat 3 --quiet >"$work/full.log" 2>&1; then
    echo "ok   full-size block, 30272 tokens, sampled stage checks: $(grep -E '^block total' "$work/full.log" | head -1)"
  else
    echo "FAIL full-size block:"; tail -30 "$work/full.log"; fail=1
  fi
fi
[ $fail -eq 0 ] && echo "test_gpu_block: all passed" || echo "test_gpu_block: FAILED"
exit $fail
