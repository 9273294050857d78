#!/usr/bin/env bash
# coverage.sh — line coverage of core/safetensors.c's reader over the fuzz
# corpus (build_and_run.sh's working corpus + the tests/data seeds), using
# clang source-based coverage and tests/fuzz/regress_main.c as the driver.
#
#   tests/fuzz/coverage.sh        (after tests/fuzz/build_and_run.sh; FUZZ_OUT as there)
# Prints the reader (lines before the writer section) and writer percentages
# and the reader lines never executed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${FUZZ_OUT:-$ROOT/build-fuzz}"
C="$OUT/cov"; rm -rf "$C"; mkdir -p "$C/all"
clang -std=c11 -O0 -g -fprofile-instr-generate -fcoverage-mapping -I"$ROOT/core" $(pkg-config --cflags json-c) \
  "$ROOT/tests/fuzz/regress_main.c" "$ROOT/tests/fuzz/fuzz_safetensors.c" "$ROOT/core/safetensors.c" \
  "$ROOT/core/config.c" $(pkg-config --libs json-c) -o "$C/cov_runner"
i=0
for f in "$OUT"/corpus/* "$ROOT"/tests/data/*.safetensors; do [ -f "$f" ] && cp "$f" "$C/all/$((i++)).safetensors"; done
echo "inputs: $i"
LLVM_PROFILE_FILE="$C/cov.profraw" "$C/cov_runner" "$C/all" >/dev/null
llvm-profdata merge -o "$C/cov.profdata" "$C/cov.profraw"
llvm-cov show "$C/cov_runner" -instr-profile="$C/cov.profdata" "$ROOT/core/safetensors.c" >"$C/show.txt"
# The writer starts at the "streaming writer" banner comment.
wl=$(grep -n -m1 -E '^/\* -+ writer \*/' "$ROOT/core/safetensors.c" | cut -d: -f1 || true)
wl=${wl:-660}
awk -F'|' -v wl="$wl" 'NF>=3 { ln=$1+0; c=$2; gsub(/ /,"",c); if (c=="") next; p=(ln<wl)?"reader":"writer";
  t[p]++; if (c!="0") h[p]++; else if (p=="reader") miss=miss "\n  " ln ":" $3 }
  END { for (p in t) printf "%s (lines %s): %d/%d executed (%.1f%%)\n", p, p=="reader"?"1.." wl-1:wl "..", h[p], t[p], 100*h[p]/t[p];
        print "reader lines never executed:" miss }' "$C/show.txt"
