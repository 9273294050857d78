#!/usr/bin/env bash
# test.sh [ctest args...] — the whole test suite: installs what it needs
# (Debian packages, a Python venv for the interop tests), builds, runs CTest,
# then runs the CPU tests again in an AddressSanitizer + UBSan build
# (build-asan). GPU tests skip (exit 77) on machines without a GPU. Extra
# ctest arguments pass through; the files they name (--output-log, -O,
# --output-junit, --resource-spec-file, --tests-from-file,
# --exclude-from-file) are the caller's: a relative one is taken from the
# directory test.sh was called from (ctest itself would put some in the
# build tree).
set -euo pipefail
here=$PWD
root=$(cd "$(dirname "$0")/.." && pwd)
file_flags=" -O --output-log --output-junit --resource-spec-file --tests-from-file --exclude-from-file "
abs() { case $1 in /* | "") printf '%s' "$1" ;; *) printf '%s/%s' "$here" "$1" ;; esac; }
args=() take=0
for a in "$@"; do
  if [ $take = 1 ]; then
    args+=("$(abs "$a")") take=0
  elif [[ $a == --*=* && $file_flags == *" ${a%%=*} "* ]]; then
    args+=("${a%%=*}=$(abs "${a#*=}")")
  else
    [[ $file_flags == *" $a "* ]] && take=1
    args+=("$a")
  fi
done
cd "$root"
tools/deps.sh
tools/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)" ${args[@]+"${args[@]}"}
if [ "${H3_NO_ASAN:-0}" != 1 ]; then
  echo "test: CPU tests under ASan + UBSan (build-asan)"
  H3_CMAKE_ARGS="-DH3_SANITIZE=ON -DH3_WITH_CUDA=OFF" tools/build.sh build-asan
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L cpu ${args[@]+"${args[@]}"}
fi
