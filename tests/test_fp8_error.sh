#!/usr/bin/env bash
# test_fp8_error.sh FP8_ERROR GEN_WEIGHTS WORKDIR — tools/fp8_error on the tiny
# block: five figures, each a finite percentage; every single-GEMM error below
# the all-four error (errors of independent roundings add in quadrature, so
# one GEMM alone cannot exceed all four by more than noise), the all-four one
# between 1% and 10% (e4m3's 3 mantissa bits: ~4% measured on this config).
set -uo pipefail
tool=$1 gen=$2 work=$3
mkdir -p "$work"
"$gen" --config tiny --seed 3 --force --out "$work/tiny.safetensors" >/dev/null 2>&1 || { echo "gen_weights failed"; exit 1; }
out=$("$tool" --weights "$work/tiny.safetensors" --tokens 200 2>/dev/null) || { echo "fp8_error failed"; exit 1; }
echo "$out"
check() {
  awk '/in FP8/ { v = $NF; sub("%", "", v); n++; if ($0 ~ /all four/) all = v; else if (v + 0 > single) single = v + 0;
                  if (v !~ /^[0-9.]+$/) bad = 1 }
       END { if (n != 5 || bad || all + 0 < 1 || all + 0 > 10 || single > all * 1.05) exit 1 }' <<<"$out"
}
check && echo "test_fp8_error: passed" || { echo "test_fp8_error: FAILED"; exit 1; }
