#!/usr/bin/env bash
# test.sh — the whole test suite: installs what it needs (Debian packages, a
# Python venv for the interop tests), builds, runs CTest, then runs the CPU
# tests again in an AddressSanitizer + UBSan build (build-asan). GPU tests
# skip (exit 77) on machines without a GPU. Extra ctest arguments pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
tools/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
if [ "${H3_NO_ASAN:-0}" != 1 ]; then
  echo "test: CPU tests under ASan + UBSan (build-asan)"
  H3_CMAKE_ARGS="-DH3_SANITIZE=ON -DH3_WITH_CUDA=OFF" tools/build.sh build-asan
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L cpu "$@"
fi
