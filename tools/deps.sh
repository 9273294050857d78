#!/usr/bin/env bash
# deps.sh — installs what building and testing h3block needs, when missing:
# Debian's cmake, pkg-config, gcc, libjson-c-dev and python3-venv (as root,
# through apt-get), and a Python venv (.venv) with the interop-test packages.
# The CUDA toolkit is not installed here: without nvcc the CPU parts build alone.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
pkg-config --exists json-c 2>/dev/null || need+=(libjson-c-dev)
# (a venv only for the tests: tools/run.sh passes H3_NO_VENV=1)
[ "${H3_NO_VENV:-0}" = 1 ] || python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# libFuzzer's runtime for the fuzz smoke test (it skips without it)
if command -v clang-14 >/dev/null && ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then need+=(libclang-rt-14-dev); fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: need root to install ${need[*]} (apt-get); install them and re-run" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "${H3_NO_VENV:-0}" != 1 ]; then
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import safetensors, numpy, ml_dtypes' 2>/dev/null; then
    echo "deps: creating .venv with safetensors, numpy, ml_dtypes"
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check safetensors numpy ml_dtypes
  fi
  # torch and diffusers for the Python package's tests (tests/python/test_package.py:
  # every argument check on CPU tensors, the diffusers processor in diffusers' block);
  # PyPI's torch is the CUDA build (~5 GB with its NVIDIA libraries), which runs on CPU too
  if ! .venv/bin/python -c 'import torch, diffusers' 2>/dev/null; then
    echo "deps: adding torch and diffusers to .venv (a few minutes, once)"
    .venv/bin/python -m pip install -q --disable-pip-version-check torch diffusers ||
      echo "deps: torch/diffusers not installed; test_python_package will skip"
  fi
  # with nvcc but no cuobjdump (a toolkit without it, as on CI): NVIDIA's
  # PyPI cuobjdump and the nvdisasm it runs, for the SASS check of
  # tests/test_sm90_ptxas.sh (which looks for it the same way)
  # (cuobjdump -sass runs nvdisasm from its own folder or PATH: a cuobjdump
  # installed by hand without it fails that check, so both are looked for)
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cuobj=$(bash tools/find_cuobjdump.sh "$nvcc_bin")
  if [ -x "$nvcc_bin" ] && { [ -z "$cuobj" ] || { [ ! -x "$(dirname "$cuobj")/nvdisasm" ] && ! command -v nvdisasm >/dev/null; }; }; then
    echo "deps: adding nvidia-cuda-cuobjdump and -nvdisasm to .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump==13.*" \
      "nvidia-cuda-nvdisasm==13.*" ||
      echo "deps: cuobjdump not installed; test_sm90_ptxas will skip its SASS check"
  fi
fi
