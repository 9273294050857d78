#!/usr/bin/env bash
# test.sh — the whole test suite: installs what it needs (Debian packages, a
# Python venv for the interop tests), builds, runs CTest. GPU tests skip
# (exit 77) on machines without a GPU. Extra ctest arguments pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
tools/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
