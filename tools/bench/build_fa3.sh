#!/usr/bin/env bash
# build_fa3.sh — FlashAttention-3's forward (head dim 128, FP8 e4m3 and BF16, sm_90a) built from
# source, for peers_attention.py --fa3-path BUILD_DIR.
#
#   bash tools/bench/build_fa3.sh SRC [BUILD_DIR=/tmp/fa3]
#   bash tools/bench/build_fa3.sh --plan SRC [BUILD_DIR]   # setup.py up to its source list; compiles nothing
#
# SRC: a flash-attention checkout with csrc/cutlass populated (hopper/setup.py and
# csrc/cutlass/include), a .tar.gz of one, or a folder holding either (flash-attention/ or
# flash-attention.tar.gz). SRC is only read: hopper/ is copied to BUILD_DIR/src (setup.py writes
# there), cutlass is linked in place (a tarball is extracted to BUILD_DIR/src).
# Only what peers_attention.py needs is built, through FA3's own switches (hopper/setup.py's
# environment variables): FLASH_ATTENTION_DISABLE_{BACKWARD,SPLIT,PAGEDKV,APPENDKV,LOCAL,SOFTCAP,
# PACKGQA,VARLEN,FP16,HDIM64,HDIM96,HDIM192,HDIM256,HDIMDIFF64,HDIMDIFF192,SM80}=TRUE (SM80 is
# the variable behind its FLASHATTENTION_DISABLE_SM8x). Left: flash_api_stable.cpp (flash_api.cpp
# before torch 2.9), the hdim128 bf16 and e4m3 forward instantiations for sm_90a, and
# flash_prepare_scheduler.cu; the plan step checks that list before compiling.
# Result in BUILD_DIR: flash_attn_interface.py, flash_attn_config.py, flash_attn_3/ (with _C*.so)
# and fa3_build.json (commits, switches, toolchain, seconds); then
#   PYTHONPATH=BUILD_DIR python3 -c 'import flash_attn_interface'
# works; that import needs nothing from src/, so BUILD_DIR without src/ (~6 MB) is what to copy
# to a GPU machine with the same torch and CUDA (tools/gpu_session.sh takes it as .peers/fa3min;
# it builds on a machine without a GPU). Full log: BUILD_DIR/build.log. On failure the last line
# says why, prefixed 'build_fa3.sh: FAILED:'; exit 1 (2 for a bad argument).
# Offline by design: FLASH_ATTENTION_FORCE_BUILD and FLASH_ATTENTION_OFFLINE_BUILD are set, so
# setup.py neither looks for a prebuilt wheel nor downloads a toolchain; that needs CUDA 12.8 or
# >= 13 (on other 12.x FA3's setup.py fetches nvcc 12.6 / ptxas 12.8, refused here).
# Env: PYTHON (python3: the one with torch), MAX_JOBS (16), NVCC_THREADS (2),
# FA3_BUILD_TIMEOUT (900 s for the compile), CUDA_HOME (else torch's guess).
set -euo pipefail

TOOL=build_fa3.sh PY=${PYTHON:-python3} LOG=
source "$(dirname "$0")/build_common.sh" # usage, die, bad_args, log, preflight
PLAN_ONLY=0
case "${1:-}" in
-h | --help) usage; exit 0 ;;
--plan) PLAN_ONLY=1; shift ;;
esac
(($# >= 1 && $# <= 2)) || bad_args "want SRC [BUILD_DIR] (got $# arguments)"
SRC_ARG=$1
BUILD_DIR=${2:-/tmp/fa3}
export MAX_JOBS=${MAX_JOBS:-16}
export NVCC_THREADS=${NVCC_THREADS:-2}
TIMEOUT=${FA3_BUILD_TIMEOUT:-900}
T0=$SECONDS

command -v "$PY" >/dev/null 2>&1 || die "PYTHON=$PY: not found" 2
[[ -e $SRC_ARG ]] || die "SRC $SRC_ARG: no such file or folder" 2
SRC_ARG=$(cd "$(dirname "$SRC_ARG")" && pwd)/$(basename "$SRC_ARG")
BUILD_DIR=$(realpath -m "$BUILD_DIR")
case "$BUILD_DIR" in
/ | "$HOME" | /tmp | /work) die "BUILD_DIR $BUILD_DIR: refusing a top-level folder (it gets cleaned)" 2 ;;
esac
case "$SRC_ARG/" in "$BUILD_DIR"/*) die "SRC $SRC_ARG is inside BUILD_DIR $BUILD_DIR (it gets cleaned)" 2 ;; esac
case "$BUILD_DIR/" in "$SRC_ARG"/*) die "BUILD_DIR $BUILD_DIR is inside SRC $SRC_ARG (SRC is only read)" 2 ;; esac
mkdir -p "$BUILD_DIR" || die "cannot create BUILD_DIR $BUILD_DIR" 2

# Clean only what this script makes.
rm -rf "$BUILD_DIR/src" "$BUILD_DIR/shim" "$BUILD_DIR/flash_attn_3" "$BUILD_DIR/flash_attn_interface.py" \
    "$BUILD_DIR/flash_attn_config.py" "$BUILD_DIR/fa3_build.json" "$BUILD_DIR/build.log"
mkdir -p "$BUILD_DIR/src"
LOG=$BUILD_DIR/build.log
: >"$LOG"

# ---- the source: a checkout, a tarball, or a folder holding one
find_checkout() { # prints the folder under $1 (depth <= 2) that has hopper/setup.py
    local d
    for d in "$1" "$1"/*/ "$1"/*/*/; do
        [[ -f ${d%/}/hopper/setup.py ]] && { echo "${d%/}"; return 0; }
    done
    return 1
}
TARBALL=
if [[ -f $SRC_ARG ]]; then
    TARBALL=$SRC_ARG
elif ! find_checkout "$SRC_ARG" >/dev/null && [[ -f $SRC_ARG/flash-attention.tar.gz ]]; then
    TARBALL=$SRC_ARG/flash-attention.tar.gz
fi
WORK=$BUILD_DIR/src/flash-attention
if [[ -n $TARBALL ]]; then
    log "build_fa3.sh: extracting $TARBALL"
    tar -xzf "$TARBALL" -C "$BUILD_DIR/src" 2>>"$LOG" || die "cannot extract $TARBALL (tar failed)"
    FA=$(find_checkout "$BUILD_DIR/src") || die "$TARBALL holds no flash-attention tree (no */hopper/setup.py)"
    [[ $FA == "$WORK" ]] || { mv "$FA" "$BUILD_DIR/src/fa.tmp" && mv "$BUILD_DIR/src/fa.tmp" "$WORK"; }
    ORIG=$TARBALL
else
    FA=$(find_checkout "$SRC_ARG") || die "SRC $SRC_ARG: no hopper/setup.py in it or in a folder below" 2
    [[ -d $FA/csrc/cutlass/include/cute ]] ||
        die "$FA/csrc/cutlass/include/cute missing: populate the submodule (git submodule update --init csrc/cutlass)" 2
    mkdir -p "$WORK/csrc"
    cp -a "$FA/hopper" "$WORK/hopper"
    ln -s "$FA/csrc/cutlass" "$WORK/csrc/cutlass"
    for f in README.md LICENSE FA3_BUNDLE.txt; do [[ -f $FA/$f ]] && cp "$FA/$f" "$WORK/$f"; done
    ORIG=$FA
fi
[[ -d $WORK/csrc/cutlass/include/cute ]] || die "no csrc/cutlass/include/cute in the flash-attention tree"
[[ -f $WORK/README.md ]] || : >"$WORK/README.md" # setup.py reads ../README.md for its long description

# Commits: from git when SRC is a checkout, else from the bundle's FA3_BUNDLE.txt.
commit_of() { # commit_of DIR NAME
    local c top
    # only when DIR is the top of its own repository (not a folder inside another checkout)
    top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null) && [[ $(cd "$top" && pwd -P) == $(cd "$1" && pwd -P) ]] &&
        c=$(git -C "$1" rev-parse HEAD 2>/dev/null) && [[ -n $c ]] && { echo "$c"; return; }
    [[ -f $WORK/FA3_BUNDLE.txt ]] && c=$(awk -v n="$2" '$1 == n {print $2; exit}' "$WORK/FA3_BUNDLE.txt") &&
        [[ -n $c ]] && { echo "$c"; return; }
    echo unknown
}
if [[ -n $TARBALL ]]; then
    FA3_COMMIT=$(commit_of /nonexistent flash-attention)
    CUTLASS_COMMIT=$(commit_of /nonexistent cutlass)
else
    FA3_COMMIT=$(commit_of "$FA" flash-attention)
    CUTLASS_COMMIT=$(commit_of "$FA/csrc/cutlass" cutlass)
fi
log "build_fa3.sh: flash-attention $FA3_COMMIT, cutlass $CUTLASS_COMMIT, from $ORIG; into $BUILD_DIR"

# ---- FA3's switches: forward only, hdim 128, BF16 and FP8, sm_90a
SWITCHES=(BACKWARD SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA VARLEN FP16 HDIM64 HDIM96 HDIM192 HDIM256
    HDIMDIFF64 HDIMDIFF192 SM80)
for s in "${SWITCHES[@]}"; do export "FLASH_ATTENTION_DISABLE_$s=TRUE"; done
for s in FP8 HDIM128 CLUSTER; do unset "FLASH_ATTENTION_DISABLE_$s"; done # what we need stays on
unset FLASH_ATTENTION_ENABLE_VCOLMAJOR FLASH_ATTENTION_TRITON_AMD_ENABLE FLASH_ATTENTION_SKIP_CUDA_BUILD BUILD_TARGET
export FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTENTION_OFFLINE_BUILD=TRUE
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
export GIT_CEILING_DIRECTORIES=$BUILD_DIR/src # setup.py runs 'git submodule update': no repository above
export PYTHONDONTWRITEBYTECODE=1
# The venv's own bin (ninja from pip lives there) even when PYTHON is called by its path.
PATH=$(dirname "$(command -v "$PY")"):$PATH
NINJA_BIN=$("$PY" -c 'import ninja, os; print(ninja.BIN_DIR)' 2>/dev/null || true)
[[ -n $NINJA_BIN && -d $NINJA_BIN ]] && PATH=$NINJA_BIN:$PATH
export PATH

# ---- preflight: torch, CUDA, setuptools; shims for what setup.py imports but the build never uses
mkdir -p "$BUILD_DIR/shim/bin"
preflight "$BUILD_DIR/shim" <<'EOF'
import os, re, subprocess, sys
shim = sys.argv[1]
def fail(msg):
    print("FAIL " + msg); sys.exit(0)
try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, is_ninja_available
except Exception as e:
    fail(f"import torch: {type(e).__name__}: {e}")
if torch.version.cuda is None:
    fail(f"torch {torch.__version__} is not a CUDA build")
home = os.environ.get("CUDA_HOME") or CUDA_HOME
nvcc = os.path.join(home or "/nonexistent", "bin", "nvcc")
if not os.path.isfile(nvcc):
    fail(f"no nvcc at {nvcc} (set CUDA_HOME)")
out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
m = re.search(r"release (\d+)\.(\d+)", out)
if not m:
    fail(f"cannot read {nvcc} --version")
ver = (int(m.group(1)), int(m.group(2)))
if ver < (12, 3) or (ver < (13, 0) and ver != (12, 8)):
    fail(f"nvcc {ver[0]}.{ver[1]}: FA3's setup.py would download another toolchain for it; use CUDA 12.8 or >= 13")
try:
    import setuptools
except Exception as e:
    fail(f"import setuptools: {e}")
notes = []
# setup.py imports packaging.version and wheel.bdist_wheel before setuptools; setuptools puts its
# _vendor folder (which has both) on sys.path only once imported, so test in a fresh interpreter.
vendor = os.path.join(os.path.dirname(setuptools.__file__), "_vendor")
for mod, pkg in (("packaging.version", "packaging"), ("wheel.bdist_wheel", "wheel")):
    if subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True).returncode == 0:
        continue
    dst = os.path.join(shim, pkg)
    src = os.path.join(vendor, pkg)
    if pkg == "packaging" and not os.path.isdir(src):
        src = os.path.join(os.path.dirname(torch.__file__), "_vendor", "packaging")
    if os.path.isfile(os.path.join(src, "__init__.py")):
        os.symlink(src, dst)  # only this package: the rest of _vendor would shadow newer installed ones
    elif pkg == "wheel":  # the build never runs bdist_wheel; setup.py only subclasses it
        os.makedirs(dst, exist_ok=True)
        open(os.path.join(dst, "__init__.py"), "w").write("")
        open(os.path.join(dst, "bdist_wheel.py"), "w").write(
            "try:\n    from setuptools.command.bdist_wheel import bdist_wheel\n"
            "except Exception:\n    from setuptools import Command as bdist_wheel\n")
    else:
        fail(f"python has no '{pkg}' and neither setuptools nor torch vendors one (pip install {pkg})")
    r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=shim + os.pathsep + os.environ.get("PYTHONPATH", "")))
    if r.returncode != 0:
        fail(f"'{mod}' still not importable through {dst}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    notes.append(f"{pkg} taken from {src if os.path.islink(dst) else 'a stub'} (not installed)")
if not is_ninja_available():
    notes.append("WARNING ninja not found: torch compiles the sources one by one (slower)")
print(f"OK torch {torch.__version__} (CUDA {torch.version.cuda}), nvcc {ver[0]}.{ver[1]} at {nvcc}, "
      f"setuptools {setuptools.__version__}" + "".join("; " + n for n in notes))
EOF
if ! command -v git >/dev/null 2>&1; then # setup.py calls git; without it subprocess.run would raise
    printf '#!/bin/sh\nexit 0\n' >"$BUILD_DIR/shim/bin/git" && chmod +x "$BUILD_DIR/shim/bin/git"
    PATH=$BUILD_DIR/shim/bin:$PATH
fi
export PYTHONPATH=$BUILD_DIR/shim${PYTHONPATH:+:$PYTHONPATH}

# ---- plan: run setup.py with setuptools.setup replaced by a printer; check the source list
cd "$WORK/hopper"
PLAN=$(timeout 300 "$PY" - <<'EOF' 2>>"$LOG"
import runpy, sys, setuptools
def fake_setup(**kw):
    for e in kw.get("ext_modules") or []:
        print("EXT " + e.name)
        for s in e.sources:
            print("SRC " + s)
        print("NVCC " + " ".join(e.extra_compile_args.get("nvcc", [])))
    sys.exit(0)
setuptools.setup = fake_setup
sys.argv = ["setup.py", "build_ext", "--inplace"]
runpy.run_path("setup.py", run_name="__main__")
print("NOEXT setup.py returned without calling setup()")
EOF
) || die "FA3's setup.py failed before compiling (its error is in the log)"
echo "$PLAN" >>"$LOG"
mapfile -t SOURCES < <(sed -n 's/^SRC //p' <<<"$PLAN")
((${#SOURCES[@]})) || die "FA3's setup.py planned no sources: $(head -c 300 <<<"$PLAN")"
log "build_fa3.sh: sources: ${SOURCES[*]}"
NVCC_FLAGS=$(sed -n 's/^NVCC //p' <<<"$PLAN")
for need in instantiations/flash_fwd_hdim128_e4m3_sm90.cu instantiations/flash_fwd_hdim128_bf16_sm90.cu; do
    [[ " ${SOURCES[*]} " == *" $need "* ]] || die "FA3's setup.py does not plan $need: its switches changed?"
done
EXTRA=()
for s in "${SOURCES[@]}"; do
    case $s in
    flash_api.cpp | flash_api_stable.cpp | flash_prepare_scheduler.cu | \
        instantiations/flash_fwd_hdim128_e4m3_sm90.cu | instantiations/flash_fwd_hdim128_bf16_sm90.cu) ;;
    *) EXTRA+=("$s") ;;
    esac
done
((${#EXTRA[@]} == 0)) || log "build_fa3.sh: WARNING: setup.py also builds ${EXTRA[*]} (a switch not honoured?)"
[[ $NVCC_FLAGS == *"arch=compute_90a,code=sm_90a"* ]] || log "build_fa3.sh: WARNING: no sm_90a gencode in: $NVCC_FLAGS"
if ((PLAN_ONLY)); then
    log "build_fa3.sh: plan only (--plan): nothing compiled; nvcc flags: $NVCC_FLAGS"
    exit 0
fi

# ---- build (in place: the .so lands in hopper/flash_attn_3/), then install the three pieces
log "build_fa3.sh: compiling with MAX_JOBS=$MAX_JOBS NVCC_THREADS=$NVCC_THREADS (timeout ${TIMEOUT}s; log $LOG)"
set +e
timeout --signal=TERM --kill-after=20 "$TIMEOUT" "$PY" setup.py build_ext --inplace >>"$LOG" 2>&1
rc=$?
set -e
if ((rc != 0)); then
    grep -n -E 'error|Error|FAILED|Killed' "$LOG" | grep -v -E 'Werror|error_code|-Wno-error' | head -15 >&2 || true
    ((rc == 124 || rc == 137)) && die "compile timed out after ${TIMEOUT}s (FA3_BUILD_TIMEOUT)"
    die "setup.py build_ext failed (rc=$rc); first error lines above"
fi
SO=$(find "$WORK/hopper/flash_attn_3" -maxdepth 1 -name '_C*.so' | head -1)
[[ -n $SO ]] || die "setup.py succeeded but no flash_attn_3/_C*.so was made"
[[ -f $WORK/hopper/flash_attn_config.py ]] || die "setup.py did not write flash_attn_config.py"
cp -a "$WORK/hopper/flash_attn_3" "$BUILD_DIR/flash_attn_3"
cp "$WORK/hopper/flash_attn_interface.py" "$WORK/hopper/flash_attn_config.py" "$BUILD_DIR/"
SECS=$((SECONDS - T0))
NVCC_V=$("$PY" -c 'from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME)')/bin/nvcc
"$PY" - "$BUILD_DIR/fa3_build.json" "$FA3_COMMIT" "$CUTLASS_COMMIT" "$ORIG" "$SECS" "$NVCC_V" \
    "${SWITCHES[*]}" "${SOURCES[*]}" "$(basename "$SO")" <<'EOF' || die "cannot write fa3_build.json"
import json, subprocess, sys, torch
out, fa3, cutlass, orig, secs, nvcc, switches, sources, so = sys.argv[1:10]
try:
    nv = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
except Exception as e:
    nv = f"? ({e})"
json.dump({"flash_attention_commit": fa3, "cutlass_commit": cutlass, "source": orig, "seconds": int(secs),
           "disabled": ["FLASH_ATTENTION_DISABLE_" + s for s in switches.split()], "sources": sources.split(),
           "extension": so, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "nvcc": nv},
          open(out, "w"), indent=1)
EOF
# The check the peers depend on: the module imports (it loads the .so and registers torch.ops).
cd "$BUILD_DIR"
if ! CHK=$(PYTHONPATH=$BUILD_DIR "$PY" -c 'import flash_attn_interface as f; print(f.__file__)' 2>&1); then
    echo "$CHK" >>"$LOG"
    die "built, but 'import flash_attn_interface' fails: $(tail -1 <<<"$CHK")"
fi
log "build_fa3.sh: OK in ${SECS}s: $BUILD_DIR ($(basename "$SO"), $(du -k "$SO" | cut -f1) KiB);" \
    "use --fa3-path $BUILD_DIR"
