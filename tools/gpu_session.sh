#!/usr/bin/env bash
# gpu_session.sh — everything one device-machine call does, in order, each
# step independent (a failing step is logged and the next one runs):
#   build (unless a carried build dir works), the GPU test suite, dit_block at
#   full size with stage checks, the benchmark suite, SASS and ncu evidence.
# Logs and JSON go to $OUT (or ./out). Usage: tools/gpu_session.sh [steps...]
# with steps from: build tests block bench sass ncu (default: all).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
steps=${*:-build tests block bench sass ncu}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/session.log"; }
summary=()
# CMake build dirs hold absolute paths of the machine they were made on: make
# the lead machine's path resolve here too.
if [ -n "${H3_SRC_PATH:-}" ] && [ ! -e "$H3_SRC_PATH" ]; then mkdir -p "$(dirname "$H3_SRC_PATH")"; ln -s "$PWD" "$H3_SRC_PATH"; fi
BUILD=${H3_BUILD:-build-dev}
for s in $steps; do
  case $s in
  build)
    log build
    if [ -x "$BUILD/dit_block" ] && "$BUILD/dit_block" --help >/dev/null 2>&1; then
      log "using carried $BUILD"; summary+=("build: carried")
    else
      if ! pkg-config --exists json-c 2>/dev/null; then
        mkdir -p /tmp/jsonc && for f in .debs/*.deb; do dpkg -x "$f" /tmp/jsonc; done
        export PKG_CONFIG_PATH=/tmp/jsonc/usr/lib/x86_64-linux-gnu/pkgconfig
        sed -i "s|^prefix=.*|prefix=/tmp/jsonc/usr|" /tmp/jsonc/usr/lib/x86_64-linux-gnu/pkgconfig/json-c.pc
      fi
      BUILD=build-gpu
      if cmake -S . -B $BUILD -DH3_CUDA_ARCHS=90a -DH3_JSONC_STATIC=ON >"$OUT/build.log" 2>&1 &&
         cmake --build $BUILD -j16 >>"$OUT/build.log" 2>&1; then summary+=("build: ok"); else summary+=("build: FAILED"); tail -30 "$OUT/build.log"; fi
    fi ;;
  tests)
    log tests
    ctest --test-dir "$BUILD" --output-on-failure -j4 --timeout 240 >"$OUT/ctest.log" 2>&1
    summary+=("tests: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)")
    grep -E "Failed|\*\*\*|Not Run" "$OUT/ctest.log" | head -20 ;;
  block)
    log "dit_block full size"
    [ -f weights/block0.safetensors ] || "$BUILD/tools/gen_weights" --seed 0 --out weights/block0.safetensors >"$OUT/gen.log" 2>&1
    timeout 300 "$BUILD/dit_block" --weights weights/block0.safetensors --json "$OUT/block.json" --output /tmp/ours.safetensors >"$OUT/block.log" 2>&1
    rc=$?; summary+=("dit_block: rc=$rc"); tail -45 "$OUT/block.log" ;;
  bench)
    log bench
    if [ -x tools/bench/run_all.sh ]; then timeout 420 tools/bench/run_all.sh "$BUILD" >"$OUT/bench.log" 2>&1; summary+=("bench: rc=$?"); tail -40 "$OUT/bench.log"; fi ;;
  sass)
    log sass
    for f in "$BUILD"/CMakeFiles/h3kernels.dir/kernels/attn_fp8_*.cu.o; do
      cuobjdump --dump-sass "$f" >"$OUT/$(basename "$f" .cu.o).sass" 2>&1
      echo "$(basename "$f"): $(grep -c QGMMA "$OUT/$(basename "$f" .cu.o).sass") QGMMA, $(grep -cE 'HMMA|QMMA' "$OUT/$(basename "$f" .cu.o).sass") HMMA/QMMA, $(grep -cE 'LDL|STL' "$OUT/$(basename "$f" .cu.o).sass") LDL/STL"
    done | tee -a "$OUT/session.log" ;;
  ncu)
    log ncu
    if [ -x "$BUILD/tools/bench/bench_attn" ]; then
      timeout 240 ncu --clock-control none --kernel-name regex:attn --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
        "$BUILD/tools/bench/bench_attn" --seqs 30272 --repeat 1 >"$OUT/ncu.log" 2>&1; summary+=("ncu: rc=$?"); tail -60 "$OUT/ncu.log"
    fi ;;
  esac
done
log done
printf '%s\n' "${summary[@]}" | tee -a "$OUT/session.log"
