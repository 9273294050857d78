#!/usr/bin/env bash
# test_gpu_block.sh DIT_BLOCK GEN_WEIGHTS WORKDIR [full]
# The whole block on the GPU against the CPU reference:
#   tiny config, 300 tokens (ragged tail): --check full, the CPU's own
#   end-to-end chain over every row vs the GPU output, plus every stage check,
#   with both attention kernels and both GEMM modes (bf16, fp8), V smoothed
#   (the default) and, in BF16 mode, not (--smooth-v off), and with Q/K
#   rotation (--rotate-qk on); then two
#   mixed modes (--gemm fp8:qkv,out and its complement fp8:fc1,fc2, so every
#   producer writes each form next to a GEMM of the other precision), each
#   GEMM and its producer checked the way its own precision is; FP8 GEMMs
#   with fast accumulation (--gemm fp8:qkv,fc2 --gemm-accum fast);
#   with "full": the full-size block (1.29 GB generated in WORKDIR) at 30272
#   tokens with sampled-row stage checks in both GEMM modes (FP8 with its
#   default block scales, with row scales, and with --gemm-accum fast), and an
#   out-of-memory run (--tokens 4194304): exit 1, the bytes needed named, no
#   output file (nor its temporary) left behind.
# Exits 77 (skip) when there is no usable GPU.
# Run alone: ctest --test-dir build -R test_gpu_block --output-on-failure
set -uo pipefail
dit=$1 gen=$2 work=$3 mode=${4:-tiny}
mkdir -p "$work"
"$gen" --config tiny --seed 3 --force --out "$work/tiny.safetensors" >/dev/null 2>&1 || { echo "gen_weights failed"; exit 1; }
probe=$("$dit" --gpu --weights "$work/tiny.safetensors" --tokens 1 --check none --repeat 1 --warmup 0 --quiet 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 2 ] && grep -q "no usable GPU" <<<"$probe"; then
  echo "test_gpu_block: $probe: skipped"
  exit 77
fi
[ $rc -eq 0 ] || { echo "probe run failed (rc $rc): $probe"; exit 1; }
fail=0
# The attention kernels, named: mma everywhere, sm90 where it runs. On an
# sm_90 device it must run (the build carries sm_90a unless H3_CUDA_ARCHS
# left it out, which dit_block's refusal names): not running is a failure.
attns=mma
why=$("$dit" --gpu --attn sm90 --weights "$work/tiny.safetensors" --tokens 1 --check none --repeat 1 --warmup 0 \
        --quiet 2>&1 >/dev/null)
if [ $? -eq 0 ]; then
  attns="mma sm90"
elif grep -q "(sm_90[,)]" <<<"$why" && ! grep -q "a build with sm_90a" <<<"$why"; then
  echo "FAIL --attn sm90 does not run on this sm_90 device: $why"; fail=1
else
  echo "note: --attn sm90 not tested here: $why"
fi
# checks_ran LOG FULL: the stage checks ran and are in the report: the
# attention checks (against the emulation, its LSE, and exact attention),
# every stage's own, and with FULL=1 the end-to-end chain
checks_ran() {
  local log=$1 full=$2 s bad=""
  for s in "attention +vs emulated fp8" "attention +lse vs emulated fp8" "attention +vs exact" "adaln +vs cpu" \
           "qk_norm_rope_quant " "gate_res1 " "swiglu " "gate_res2 "; do
    grep -qE "^$s" "$log" || bad+=" no '${s// +/ }' check;"
  done
  [ "$full" = 1 ] && ! grep -qE "^block(_fp8)? +vs cpu (fp8 )?chain" "$log" && bad+=" no end-to-end check;"
  grep -q "^checks: not run" "$log" && bad+=" report says checks not run;"
  [ -z "$bad" ] || { echo "$bad"; return 1; }
}
# rows_at_300 LOG GEMM: at 300 tokens --gemm fp8's default scales fall back to
# rows (block scales need a multiple of 8), with a note, and the report says so
rows_at_300() {
  [ "$2" = bf16 ] || { grep -q "gemm fp8 (e4m3; scales per output channel x per token)" "$1" &&
    grep -q "row scales: block scales need a token count that is a multiple of 8 (this run has 300)" "$1"; } ||
    { echo " not row scales with the note at 300 tokens"; return 1; }
}
for gemm in bf16 fp8; do
  for attn in $attns; do
    log=$work/tiny_${attn}_$gemm.log why=""
    if "$dit" --gpu --attn $attn --gemm $gemm --weights "$work/tiny.safetensors" --tokens 300 --check full --repeat 2 \
         --quiet --json "$work/tiny_${attn}_$gemm.json" >"$log" 2>&1 && why=$(checks_ran "$log" 1) &&
       why=$(rows_at_300 "$log" $gemm); then
      echo "ok   tiny block, --attn $attn --gemm $gemm, --check full: $(grep -E '^block.* vs cpu chain' "$log")"
    else
      echo "FAIL tiny block, --attn $attn --gemm $gemm, --check full:${why:+ $why}"; tail -30 "$log"; fail=1
    fi
  done
done
# V smoothing is the default above; the plain contract (the kernels without
# a mean, the checker's unsmoothed branch) once, with both kernels
for attn in $attns; do
  log=$work/tiny_${attn}_nosmooth.log
  if "$dit" --gpu --attn $attn --smooth-v off --weights "$work/tiny.safetensors" --tokens 300 --check full --repeat 2 \
       --quiet >"$log" 2>&1 && checks_ran "$log" 1 >/dev/null && ! grep -q "V smoothed" "$log"; then
    echo "ok   tiny block, --attn $attn --smooth-v off, --check full: $(grep -E '^block.* vs cpu chain' "$log")"
  else
    echo "FAIL tiny block, --attn $attn --smooth-v off, --check full:"; tail -30 "$log"; fail=1
  fi
done
# Q/K rotation (--rotate-qk on): the rotated codes against the CPU's twin
# (stage qk_norm_rope_quant), the attention on them, and the end-to-end
# chain (the CPU's chain does not rotate: the FP8 tolerance covers both), with
# both kernels; the report names it
for attn in $attns; do
  log=$work/tiny_${attn}_rot.log
  if "$dit" --gpu --attn $attn --rotate-qk on --weights "$work/tiny.safetensors" --tokens 300 --check full --repeat 2 \
       --quiet >"$log" 2>&1 && checks_ran "$log" 1 >/dev/null && grep -q "Q/K rotated" "$log"; then
    echo "ok   tiny block, --attn $attn --rotate-qk on, --check full: $(grep -E '^block.* vs cpu chain' "$log")"
  else
    echo "FAIL tiny block, --attn $attn --rotate-qk on, --check full:"; tail -30 "$log"; fail=1
  fi
done
# precisions_checked LOG LIST: each GEMM in LIST was checked as FP8 (against
# cpu_gemm_fp8, its producer's e4m3 rows), every other one as BF16.
precisions_checked() {
  local log=$1 list=$2 g prod bad=""
  for g in qkv out fc1 fc2; do
    case $g in qkv) prod=norm1_mod ;; out) prod=out_quant ;; fc1) prod=norm2_mod ;; fc2) prod=swiglu ;; esac
    if [[ ",$list," == *",$g,"* ]]; then
      grep -qE "^${g}_gemm +fp8 vs cpu" "$log" || bad+=" ${g}_gemm not checked as fp8;"
      grep -qE "^$prod +(e4m3 codes|O codes) vs cpu" "$log" || bad+=" $prod e4m3 rows not checked;"
    else
      grep -qE "^${g}_gemm +vs cpu" "$log" && ! grep -qE "^${g}_gemm +fp8 vs cpu" "$log" ||
        bad+=" ${g}_gemm not checked as bf16;"
      [ $g = out ] && grep -qE "^out_quant " "$log" && bad+=" out_quant ran for a bf16 out_gemm;"
      [ $g != out ] && ! grep -qE "^$prod +vs cpu" "$log" && bad+=" $prod bf16 output not checked;"
    fi
  done
  [ -z "$bad" ] || { echo "$bad"; return 1; }
}
for gemm in fp8:qkv,out fp8:fc1,fc2; do
  tag=${gemm//[:,]/_} log=$work/tiny_auto_$tag.log why=""
  if "$dit" --gpu --gemm $gemm --weights "$work/tiny.safetensors" --tokens 300 --check full --repeat 2 \
       --quiet --json "$work/tiny_auto_$tag.json" >"$log" 2>&1 && why=$(precisions_checked "$log" "${gemm#fp8:}") &&
     grep -q "gemm fp8 ${gemm#fp8:} (e4m3" "$log"; then
    echo "ok   tiny block, --gemm $gemm, --check full: $(grep -E '^block.* vs cpu chain' "$log")"
  else
    echo "FAIL tiny block, --gemm $gemm, --check full:${why:+ $why}"; tail -30 "$log"; fail=1
  fi
done
# --gemm-accum fast: each FP8 GEMM checked with its own tolerance, named in the report
log=$work/tiny_fast.log
if "$dit" --gpu --gemm fp8:qkv,fc2 --gemm-accum fast --weights "$work/tiny.safetensors" --tokens 300 --check full \
     --repeat 2 --quiet >"$log" 2>&1 && [ "$(grep -cE '^(qkv|fc2)_gemm +fp8 fast-accum vs cpu' "$log")" -eq 2 ] &&
   grep -qE '^out_gemm +vs cpu' "$log" && grep -q "gemm fp8 qkv,fc2 (e4m3; .*, fast accumulation)" "$log"; then
  echo "ok   tiny block, --gemm fp8:qkv,fc2 --gemm-accum fast, --check full: $(grep -E '^block.* vs cpu chain' "$log")"
else
  echo "FAIL tiny block, --gemm fp8:qkv,fc2 --gemm-accum fast, --check full:"; tail -30 "$log"; fail=1
fi
# the default scales at 304 tokens are block scales (--gemm-accum fast: rows)
for extra in "" "--gemm-accum fast"; do
  want="block scales 128x128 weights x 1x128 inputs)"
  [ -n "$extra" ] && want="scales per output channel x per token, fast accumulation)"
  log=$work/tiny_default_scales${extra:+_fast}.log
  # shellcheck disable=SC2086 # $extra is empty or one flag and its value
  if "$dit" --gpu --gemm fp8 $extra --weights "$work/tiny.safetensors" --tokens 304 --check stages --repeat 1 \
       --quiet >"$log" 2>&1 && checks_ran "$log" 0 >/dev/null && grep -q "gemm fp8 (e4m3; $want" "$log"; then
    echo "ok   tiny block, --gemm fp8 $extra at 304 tokens: $want"
  else
    echo "FAIL tiny block, --gemm fp8 $extra at 304 tokens: want '$want'"; tail -30 "$log"; fail=1
  fi
done
# --gemm-scales blocks: every FP8 GEMM and its producer checked against the
# CPU's block-scaled twin (cpu_gemm_fp8_blocks, 1 x 128 codes), all-FP8 and a
# mixed mode, the report naming the scales (304 tokens: cuBLASLt's
# block-scaled GEMMs need a multiple of 8; 300 is refused, exit 2)
for gemm in fp8 fp8:qkv,fc1; do
  tag=${gemm//[:,]/_} log=$work/tiny_blk_$tag.log why=""
  list=${gemm#fp8}; list=${list#:}
  if "$dit" --gpu --gemm $gemm --gemm-scales blocks --weights "$work/tiny.safetensors" --tokens 304 --check full \
       --repeat 2 --quiet >"$log" 2>&1 && why=$(precisions_checked "$log" "${list:-qkv,out,fc1,fc2}") &&
     why=$(checks_ran "$log" 1) && grep -q "block scales 128x128 weights x 1x128 inputs" "$log" &&
     grep -qE "^(norm1_mod|norm2_mod) +block scales vs cpu +.* pass" "$log" &&
     grep -qE "^(qkv|fc1)_gemm +weights e4m3 scales vs cpu +.* pass" "$log"; then
    echo "ok   tiny block, --gemm $gemm --gemm-scales blocks, --check full: $(grep -E '^block.* vs cpu chain' "$log")"
  else
    echo "FAIL tiny block, --gemm $gemm --gemm-scales blocks, --check full:${why:+ $why}"; tail -30 "$log"; fail=1
  fi
done
"$dit" --gpu --gemm fp8 --gemm-scales blocks --weights "$work/tiny.safetensors" --tokens 300 --quiet \
  >"$work/tiny_blk_300.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "multiple of 8 (this run has 300)" "$work/tiny_blk_300.log"; then
  echo "ok   --gemm-scales blocks at 300 tokens refused: $(cat "$work/tiny_blk_300.log")"
else
  echo "FAIL --gemm-scales blocks at 300 tokens: exit $rc (want 2)"; cat "$work/tiny_blk_300.log"; fail=1
fi
if [ "$mode" = full ]; then
  [ -f "$work/block0.safetensors" ] || "$gen" --seed 0 --out "$work/block0.safetensors" >/dev/null 2>&1
  full_attn=${attns##* } # sm90 where it runs (the default there), else mma
  # plain fp8 takes block scales at 30272 tokens (the default where they run);
  # named rows and fast accumulation take rows
  full_scales_named() {
    case $2 in
    fp8) grep -q "gemm fp8 (e4m3; block scales 128x128 weights x 1x128 inputs)" "$1" ;;
    "fp8 --gemm-scales rows") grep -q "gemm fp8 (e4m3; scales per output channel x per token)" "$1" ;;
    "fp8 --gemm-accum fast") grep -q "gemm fp8 (e4m3; scales per output channel x per token, fast accumulation)" "$1" ;;
    esac
  }
  for gemm in bf16 fp8 fp8:qkv,out "fp8 --gemm-accum fast" "fp8 --gemm-scales rows"; do
    # shellcheck disable=SC2086 # $gemm may carry --gemm-accum
    if "$dit" --gpu --attn $full_attn --gemm $gemm --weights "$work/block0.safetensors" --sample 96 --repeat 3 --quiet \
         >"$work/full_${gemm// /_}.log" 2>&1 && checks_ran "$work/full_${gemm// /_}.log" 0 >/dev/null &&
       full_scales_named "$work/full_${gemm// /_}.log" "$gemm"; then
      echo "ok   full-size block, 30272 tokens, --attn $full_attn --gemm $gemm, sampled stage checks: $(grep -E '^block total' "$work/full_${gemm// /_}.log" | head -1)"
    else
      echo "FAIL full-size block, --gemm $gemm:"; tail -40 "$work/full_${gemm// /_}.log"; fail=1
    fi
  done
  # Out of device memory: refused up front with the bytes, exit 1, no output.
  rm -f "$work"/oom.safetensors*
  "$dit" --gpu --weights "$work/block0.safetensors" --tokens 4194304 --output "$work/oom.safetensors" --quiet \
    >"$work/oom.log" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q "out of device memory: 4194304 tokens need .* bytes" "$work/oom.log" &&
     [ "$(wc -l <"$work/oom.log")" -eq 1 ] && ! ls "$work"/oom.safetensors* >/dev/null 2>&1; then
    echo "ok   out of memory (--tokens 4194304): exit 1, $(cat "$work/oom.log")"
  else
    echo "FAIL out of memory (--tokens 4194304): exit $rc (want 1), output files: $(ls "$work"/oom.safetensors* 2>/dev/null)"
    head -5 "$work/oom.log"; fail=1
  fi
fi
[ $fail -eq 0 ] && echo "test_gpu_block: all passed" || echo "test_gpu_block: FAILED"
exit $fail
