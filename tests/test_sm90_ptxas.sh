#!/usr/bin/env bash
# test_sm90_ptxas.sh — the Hopper attention kernel compiles the way it was
# designed: ptxas (-v) reports no wgmma serialisation (C7513..C7515: every
# wgmma of the kernel then waits for the one before, silently several
# percent slower) and no spills for any variant of attn_fp8_sm90.cu, nor for
# the portable attn_fp8_mma.cu as built for sm_90a (what --attn mma runs on
# Hopper). With a cuobjdump (H3_CUOBJDUMP, else what tools/find_cuobjdump.sh
# finds: PATH, beside nvcc, or the venv's nvidia-cuda-cuobjdump that
# tools/deps.sh installs; it runs the nvdisasm beside it or on PATH) it also
# reads the SASS of the default variants (v16, v150, and v153, which v150
# falls back to): their main loop must hold the FP8
# wgmmas (QGMMA), no local loads/stores, and no run of more than 16 MUFU
# (tests/sass_loop_check.py says why). These are compile-time facts, so this
# runs on machines without a GPU (CI too).
#
# Run alone: ctest -R test_sm90_ptxas
#   (or: bash tests/test_sm90_ptxas.sh [NVCC] from the repository root)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "skip: no nvcc"; exit 77; }
log=$(mktemp) mlog=$(mktemp) cubin=$(mktemp --suffix=.cubin) sass=$(mktemp)
trap 'rm -f "$log" "$mlog" "$cubin" "$sass"' EXIT
# FILE OUT: FILE built for sm_90a as a cubin OUT, ptxas -v's report on stdout/stderr
sm90a() { "$nvcc" -gencode=arch=compute_90a,code=sm_90a -O3 -I"$here/kernels" -I"$here/src" -cubin "$1" -o "$2" -Xptxas -v; }
# one build of attn_fp8_sm90.cu: ptxas's report here, its SASS below
if ! sm90a "$here/kernels/attn_fp8_sm90.cu" "$cubin" >"$log" 2>&1; then
  echo "FAIL: nvcc could not compile kernels/attn_fp8_sm90.cu for sm_90a:"
  tail -20 "$log"
  exit 1
fi
kernels=$(grep -c "Compiling entry function '.*h3k_attn_fp8_sm90_\(wg3p\?_\)\?kernel" "$log")
if [ "$kernels" -lt 2 ]; then
  echo "FAIL: ptxas -v listed $kernels attn_fp8_sm90 kernels (expected every variant)"
  exit 1
fi
fail=0
if grep -E "\(C751[345]\)" "$log"; then
  echo "FAIL: ptxas serialises the wgmmas of the kernel(s) named above"
  fail=1
fi
# "N bytes stack frame, S bytes spill stores, L bytes spill loads" per entry
if grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$log"; then
  echo "FAIL: a variant spills registers (lines above; the function precedes them in ptxas -v)"
  fail=1
fi
if ! sm90a "$here/kernels/attn_fp8_mma.cu" /dev/null >"$mlog" 2>&1; then
  echo "FAIL: nvcc could not compile kernels/attn_fp8_mma.cu for sm_90a:"; tail -20 "$mlog"; fail=1
elif grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$mlog"; then
  echo "FAIL: attn_fp8_mma (sm_90a) spills registers"
  fail=1
fi

# SASS of the default variants. The mangled names carry the template
# arguments: v16 = kernel<2 stages, kFOverlap | kFExpScale = 129>, v153 =
# wg3_kernel<2, fold 0, kFExpScale | kFVMean | kFFoldS = 134283392>, v150 =
# v153 | kFTab = 167837824; if the defaults change, change them here too
# (checked below).
sass_note="SASS loop check skipped (no cuobjdump)"
cuobjdump=${H3_CUOBJDUMP:-$(bash "$here/tools/find_cuobjdump.sh" "$nvcc")}
if ! grep -q "define H3_SM90_DEFAULT_VARIANT 16$" "$here/kernels/attn_fp8_sm90.cu" ||
   ! grep -q "define H3_SM90_SMOOTH_VARIANT 150$" "$here/kernels/attn_fp8_sm90.cu"; then
  echo "FAIL: the default variants are no longer v16 and v150: update the SASS check in $0"
  fail=1
elif [ -n "$cuobjdump" ]; then
  if PATH="$(dirname "$cuobjdump"):$PATH" "$cuobjdump" -sass "$cubin" >"$sass" 2>/dev/null; then
    if python3 "$here/tests/sass_loop_check.py" "$sass" 16 \
         v16=_Z24h3k_attn_fp8_sm90_kernelILi2ELj129E v153=_Z28h3k_attn_fp8_sm90_wg3_kernelILi2ELi0ELj134283392E \
         v150=_Z28h3k_attn_fp8_sm90_wg3_kernelILi2ELi0ELj167837824E; then
      sass_note="SASS of v16, v153 and v150 ($cuobjdump): QGMMA in the main loop, no local memory, no long MUFU run"
    else
      echo "FAIL: the SASS of a default variant's main loop (lines above)"
      fail=1
    fi
  else
    echo "FAIL: could not disassemble the cubin of attn_fp8_sm90.cu with $cuobjdump"
    fail=1
  fi
fi
[ $fail -eq 0 ] && echo "ok: $kernels attn_fp8_sm90 variants, no wgmma serialisation, no spills; attn_fp8_mma (sm_90a) no spills; $sass_note"
exit $fail
