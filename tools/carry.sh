#!/usr/bin/env bash
# carry.sh [--fa3 SRC] [--flashinfer] — the git-ignored folders that a device
# call carries, made here: the GPU machine reaches no network, and a fresh
# checkout has none of them.
#
#   .debs/                 Debian's libjson-c-dev and libjson-c5 (gpu_session.sh
#                          unpacks them into /tmp/jsonc and links json-c statically)
#   .whl/                  wheels for the machine's Python 3.12: the cuDNN
#                          frontend (peers' cudnn_fp8), diffusers and
#                          huggingface_hub (pyblock, test_python_package_gpu)
#   .peers/fa3min          with --fa3 SRC: FlashAttention-3 built by
#                          tools/bench/build_fa3.sh from SRC (a flash-attention
#                          checkout with csrc/cutlass, or its .tar.gz), without src/;
#                          PYTHON must be a python whose torch is the machine's
#                          (2.11.0+cu130)
#   .peers/flashinfer_min  with --flashinfer: tools/bench/build_flashinfer.sh
#                          (the same PYTHON rule)
#
# A folder already there is kept (remove it to make it again). Ends with the
# sizes and the carry list for the device call (at most 64 MiB in all).
# Env: PYTHON (python3), H3_CUDNN_FE (1.32.0), H3_DIFFUSERS (0.42.1),
# H3_HF_HUB (1.33.0): versions that the GPU machine's Python 3.12 and
# torch 2.11 take.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
fa3_src= flashinfer=0
while [ $# -gt 0 ]; do
  case $1 in
  --fa3) [ $# -ge 2 ] || { echo "carry.sh: --fa3 needs SRC (see --help)" >&2; exit 2; }; fa3_src=$2; shift 2 ;;
  --fa3=*)
    fa3_src=${1#--fa3=}
    [ -n "$fa3_src" ] || { echo "carry.sh: --fa3= needs SRC (see --help)" >&2; exit 2; }
    shift ;;
  --flashinfer) flashinfer=1; shift ;;
  -h | --help) usage; exit 0 ;;
  *) echo "carry.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -z "$fa3_src" ] || [ -e "$fa3_src" ] || { echo "carry.sh: --fa3 $fa3_src: no such file or folder" >&2; exit 2; }
[ -z "$fa3_src" ] || fa3_src=$(realpath "$fa3_src") # the paths given are the caller's
[ -z "${PYTHON:-}" ] || [[ $PYTHON != */* ]] || PYTHON=$(realpath -s "$PYTHON") # -s: a venv's python stays its own
export PYTHON
cd "$(dirname "$0")/.."
carry=(.debs .whl)

if [ -n "$(ls .debs/*.deb 2>/dev/null)" ]; then
  echo "carry: .debs kept"
else
  echo "carry: .debs (apt-get download libjson-c-dev libjson-c5)"
  rm -rf .debs.tmp && mkdir .debs.tmp
  (cd .debs.tmp && apt-get download libjson-c-dev libjson-c5 >/dev/null) ||
    { rm -rf .debs.tmp; echo "carry.sh: apt-get download failed (apt-get update first?)" >&2; exit 1; }
  mv .debs.tmp .debs
fi

if [ -n "$(ls .whl/*.whl 2>/dev/null)" ]; then
  echo "carry: .whl kept"
else
  echo "carry: .whl (pip download for cp312 manylinux)"
  rm -rf .whl.tmp && mkdir .whl.tmp
  plat=()
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    plat+=(--platform "$p")
  done
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d .whl.tmp "nvidia-cudnn-frontend==${H3_CUDNN_FE:-1.32.0}" "diffusers==${H3_DIFFUSERS:-0.42.1}" \
    "huggingface_hub==${H3_HF_HUB:-1.33.0}"; then
    rm -rf .whl.tmp
    echo "carry.sh: pip download failed" >&2
    exit 1
  fi
  mv .whl.tmp .whl
fi

if [ -n "$fa3_src" ]; then
  carry+=(.peers/fa3min)
  if [ -f .peers/fa3min/flash_attn_interface.py ]; then
    echo "carry: .peers/fa3min kept ($(grep -o '"torch": *"[^"]*"' .peers/fa3min/fa3_build.json 2>/dev/null || echo 'torch unknown'))"
  else
    echo "carry: .peers/fa3min (tools/bench/build_fa3.sh $fa3_src: a compile of minutes)"
    bash tools/bench/build_fa3.sh "$fa3_src" /tmp/fa3_carry
    mkdir -p .peers && rm -rf .peers/fa3min.tmp && cp -r /tmp/fa3_carry .peers/fa3min.tmp
    # the import needs none of the sources, the build's shims (links into this
    # machine's venv) or its log
    rm -rf .peers/fa3min.tmp/src .peers/fa3min.tmp/shim .peers/fa3min.tmp/build.log
    mv .peers/fa3min.tmp .peers/fa3min
  fi
fi
if [ "$flashinfer" = 1 ]; then
  carry+=(.peers/flashinfer_min)
  if [ -f .peers/flashinfer_min/flashinfer_build.json ]; then # written last, after its check
    echo "carry: .peers/flashinfer_min kept"
  else
    echo "carry: .peers/flashinfer_min (tools/bench/build_flashinfer.sh: a compile of minutes)"
    bash tools/bench/build_flashinfer.sh .peers/flashinfer_min
  fi
fi

du -sh "${carry[@]}"
total=$(du -sc "${carry[@]}" | tail -1 | cut -f1)
[ "$total" -le $((64 * 1024)) ] || echo "carry.sh: WARNING ${total} KiB in all, over a call's 64 MiB"
printf 'carry: ["%s"]\n' "$(IFS=,; echo "${carry[*]}" | sed 's/,/", "/g')"
