#!/usr/bin/env bash
# test_sm90_ptxas.sh — the Hopper attention kernels compile the way they were
# designed: ptxas (-v) reports no wgmma serialisation (C7513..C7515: every
# wgmma of the kernel then waits for the one before, silently several percent
# slower) and no spills for the production kernels (kernels/attn/
# attn_fp8_sm90.cu) nor for the lab's (lab/attn_sm90_lab.cu, not built by
# default), nor for the portable attn_fp8_mma.cu as built for sm_90a (what
# --attn mma runs on Hopper). Then it reads the SASS of the production
# kernels with a cuobjdump (H3_CUOBJDUMP, else what tools/find_cuobjdump.sh
# finds: PATH, beside nvcc, or the venv's nvidia-cuda-cuobjdump that
# tools/deps.sh installs; it runs the nvdisasm beside it or on PATH): each
# main loop must hold the FP8 wgmmas (QGMMA), no local loads/stores, and no
# run of more than 16 MUFU (tests/sass_loop_check.py says why). These are
# compile-time facts, so this runs on machines without a GPU (CI too). Without
# nvcc, or without a cuobjdump for the SASS part, it exits 77 (skipped): a
# check that could not run is never reported as passed.
#
# Run alone: ctest -R test_sm90_ptxas
#   (or: bash tests/test_sm90_ptxas.sh [NVCC] from the repository root)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "skip: no nvcc"; exit 77; }
log=$(mktemp) llog=$(mktemp) mlog=$(mktemp) cubin=$(mktemp --suffix=.cubin) sass=$(mktemp)
trap 'rm -f "$log" "$llog" "$mlog" "$cubin" "$sass"' EXIT
# FILE OUT: FILE built for sm_90a as a cubin OUT, ptxas -v's report on stdout/stderr
sm90a() {
  "$nvcc" -gencode=arch=compute_90a,code=sm_90a -O3 -I"$here/kernels" -I"$here/kernels/attn" -I"$here/lab" \
    -I"$here/core" -cubin "$1" -o "$2" -Xptxas -v
}
fail=0
# FILE LOG WHAT MIN: compile FILE, at least MIN kernels, no serialisation, no spills
check_ptxas() {
  if ! sm90a "$1" "$4" >"$2" 2>&1; then
    echo "FAIL: nvcc could not compile $3 for sm_90a:"; tail -20 "$2"; fail=1; return 1
  fi
  local n
  n=$(grep -c "Compiling entry function" "$2")
  if [ "$n" -lt "$5" ]; then echo "FAIL: ptxas -v listed $n kernels in $3 (expected >= $5)"; fail=1; fi
  if grep -E "\(C751[345]\)" "$2"; then echo "FAIL: ptxas serialises the wgmmas of $3's kernel(s) named above"; fail=1; fi
  if grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$2"; then
    echo "FAIL: a kernel of $3 spills registers (lines above; the function precedes them in ptxas -v)"; fail=1
  fi
  echo "$3: $n kernels compiled for sm_90a"
}
check_ptxas "$here/kernels/attn/attn_fp8_sm90.cu" "$log" kernels/attn/attn_fp8_sm90.cu "$cubin" 3
check_ptxas "$here/lab/attn_sm90_lab.cu" "$llog" lab/attn_sm90_lab.cu /dev/null 10
if ! sm90a "$here/kernels/attn/attn_fp8_mma.cu" /dev/null >"$mlog" 2>&1; then
  echo "FAIL: nvcc could not compile kernels/attn/attn_fp8_mma.cu for sm_90a:"; tail -20 "$mlog"; fail=1
elif grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$mlog"; then
  echo "FAIL: attn_fp8_mma (sm_90a) spills registers"; fail=1
fi

# SASS of the production kernels: the mangled names carry the template
# arguments: ws = ws_kernel<2 stages>, wg3 = wg3_kernel<2, kMu, kTab> with
# and without the table.
cuobjdump=${H3_CUOBJDUMP:-$(bash "$here/tools/find_cuobjdump.sh" "$nvcc")}
if [ -z "$cuobjdump" ]; then
  echo "skip: the SASS check could not run (no cuobjdump; tools/deps.sh installs one); ptxas checks: $([ $fail -eq 0 ] && echo clean || echo FAILED)"
  [ $fail -eq 0 ] && exit 77 || exit 1
fi
if PATH="$(dirname "$cuobjdump"):$PATH" "$cuobjdump" -sass "$cubin" >"$sass" 2>/dev/null; then
  if ! python3 "$here/tests/sass_loop_check.py" "$sass" 16 ws=_Z27h3k_attn_fp8_sm90_ws_kernelILi2EE \
       wg3=_Z28h3k_attn_fp8_sm90_wg3_kernelILi2ELb1ELb1ELb0EE wg3_notab=_Z28h3k_attn_fp8_sm90_wg3_kernelILi2ELb1ELb0ELb0EE; then
    echo "FAIL: the SASS of a production kernel's main loop (lines above)"
    fail=1
  fi
else
  echo "FAIL: could not disassemble the cubin of attn_fp8_sm90.cu with $cuobjdump"
  fail=1
fi
[ $fail -eq 0 ] && echo "ok: no wgmma serialisation, no spills (production, lab, attn_fp8_mma for sm_90a); SASS of the production kernels' main loops ($cuobjdump): QGMMA, no local memory, no long MUFU run"
exit $fail
