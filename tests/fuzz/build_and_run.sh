#!/usr/bin/env bash
# build_and_run.sh — builds the safetensors libFuzzer target with clang
# (-fsanitize=fuzzer,address,undefined) and fuzzes it from the tests/data seeds.
#
#   tests/fuzz/build_and_run.sh [RUNS] [JOBS]     (defaults: 10000000, 1)
#   FUZZ_OUT=dir  where the binary, the working corpus and logs go (default build-fuzz/)
#   FUZZ_BUILD_ONLY=1  only build (exit 77 if clang cannot build a fuzzer)
#   FUZZ_NO_SAVE=1     do not copy crash inputs into tests/data (the CTest smoke run)
#
# Not part of the CMake build: it needs clang's libFuzzer runtime, and the
# normal build is gcc. Exit: 0 clean run; 1 a crash, leak or sanitizer report
# (the input is saved as FUZZ_OUT/crash-* and copied to
# tests/data/fuzz_regress_<hash>.safetensors); 77 clang/libFuzzer unusable.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
RUNS="${1:-10000000}"
JOBS="${2:-1}"
OUT="${FUZZ_OUT:-$ROOT/build-fuzz}"
CC="${FUZZ_CC:-clang}"
mkdir -p "$OUT"

if ! command -v "$CC" >/dev/null; then echo "build_and_run.sh: $CC not found, skipped"; exit 77; fi
JSONC_CFLAGS="$(pkg-config --cflags json-c)"
JSONC_LIBS="$(pkg-config --libs json-c)"
BIN="$OUT/fuzz_safetensors"
# -O1 -g: the usual libFuzzer setting (fast enough, exact stacks).
if ! "$CC" -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -Wall -Wextra -Wshadow -I"$ROOT/core" $JSONC_CFLAGS \
    "$ROOT/tests/fuzz/fuzz_safetensors.c" "$ROOT/core/safetensors.c" "$ROOT/core/config.c" \
    $JSONC_LIBS -o "$BIN" 2>"$OUT/build.log"; then
  if grep -qiE "fuzzer|unsupported option|cannot find|no such file" "$OUT/build.log"; then
    cat "$OUT/build.log"; echo "build_and_run.sh: clang cannot build a libFuzzer target here, skipped"; exit 77
  fi
  cat "$OUT/build.log"; exit 1
fi
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && { echo "built $BIN"; exit 0; }

# Seeds: every checked-in fixture (valid, malformed, earlier crashes) and a
# few real-shaped files written by the generators when they are built.
SEEDS="$OUT/seeds"; CORPUS="$OUT/corpus"
rm -rf "$SEEDS"; mkdir -p "$SEEDS" "$CORPUS"
cp "$ROOT"/tests/data/*.safetensors "$SEEDS"/ 2>/dev/null || true
[ -n "${FUZZ_EXTRA_SEEDS:-}" ] && cp $FUZZ_EXTRA_SEEDS "$SEEDS"/ 2>/dev/null || true
echo "seeds: $(ls "$SEEDS" | wc -l) files"

# max_len 4096: enough for multi-tensor headers with metadata and escapes;
# the reader's header limit (100 MB) is exercised by the fixtures instead.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
set +e
start=$(date +%s)
if [ "$JOBS" -gt 1 ]; then
  # Each job runs RUNS/JOBS executions; the logs are fuzz-N.log.
  ( cd "$OUT" && "$BIN" -runs=$((RUNS / JOBS)) -jobs="$JOBS" -workers="$JOBS" -max_len=4096 -dict="$ROOT/tests/fuzz/safetensors.dict" \
      -artifact_prefix="$OUT/" -print_final_stats=1 "$CORPUS" "$SEEDS" )
  rc=$?
  cat "$OUT"/fuzz-*.log > "$OUT/fuzz.log"
else
  "$BIN" -runs="$RUNS" -max_len=4096 -dict="$ROOT/tests/fuzz/safetensors.dict" -artifact_prefix="$OUT/" -print_final_stats=1 "$CORPUS" "$SEEDS" \
      2>&1 | tee "$OUT/fuzz.log" | grep -E "INITED|DONE|pulse|ERROR|SUMMARY|stat::|#[0-9]+ +(NEW|REDUCE)" | tail -n 400
  rc=${PIPESTATUS[0]}
fi
end=$(date +%s)
set -e
echo "wall time: $((end - start)) s, exit $rc"
grep -E "stat::number_of_executed_units|Done [0-9]+ runs|DONE" "$OUT/fuzz.log" | tail -n 4 || true
shopt -s nullglob
crashes=("$OUT"/crash-* "$OUT"/leak-* "$OUT"/timeout-* "$OUT"/oom-*)
if [ "$rc" -ne 0 ] || [ ${#crashes[@]} -gt 0 ]; then
  for c in "${crashes[@]}"; do
    [ "${FUZZ_NO_SAVE:-0}" = 1 ] && { echo "crash input: $c"; continue; }
    h=$(sha1sum "$c" | cut -c1-12)
    cp "$c" "$ROOT/tests/data/fuzz_regress_$h.safetensors"
    echo "saved $c as tests/data/fuzz_regress_$h.safetensors"
  done
  exit 1
fi
exit 0
