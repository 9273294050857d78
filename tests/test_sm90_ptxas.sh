#!/usr/bin/env bash
# test_sm90_ptxas.sh — the Hopper attention kernel compiles the way it was
# designed: ptxas (-v) reports no wgmma serialisation (C7513..C7515: every
# wgmma of the kernel then waits for the one before, silently several
# percent slower) and no spills for any variant of attn_fp8_sm90.cu, nor for
# the portable attn_fp8_mma.cu as built for sm_90a (what --attn mma runs on
# Hopper). These are compile-time facts, so this runs on machines without a
# GPU (CI too).
#
# Run alone: ctest -R test_sm90_ptxas
#   (or: bash tests/test_sm90_ptxas.sh [NVCC] from the repository root)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "skip: no nvcc"; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$nvcc" -gencode=arch=compute_90a,code=sm_90a -O3 -I"$here/kernels" -I"$here/src" \
    -c "$here/kernels/attn_fp8_sm90.cu" -o /dev/null -Xptxas -v >"$log" 2>&1; then
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
mlog=$(mktemp)
if ! "$nvcc" -gencode=arch=compute_90a,code=sm_90a -O3 -I"$here/kernels" -I"$here/src" \
    -c "$here/kernels/attn_fp8_mma.cu" -o /dev/null -Xptxas -v >"$mlog" 2>&1; then
  echo "FAIL: nvcc could not compile kernels/attn_fp8_mma.cu for sm_90a:"; tail -20 "$mlog"; fail=1
elif grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$mlog"; then
  echo "FAIL: attn_fp8_mma (sm_90a) spills registers"
  fail=1
fi
rm -f "$mlog"
[ $fail -eq 0 ] && echo "ok: $kernels attn_fp8_sm90 variants, no wgmma serialisation, no spills; attn_fp8_mma (sm_90a) no spills"
exit $fail
