#!/usr/bin/env bash
# build_flashinfer.sh — FlashInfer's single prefill on its FA3-based Hopper backend (backend="fa3",
# head dim 128, non-causal: e4m3 q/k/v with per-head scales and BF16 O, and BF16), compiled ahead of
# time for sm_90a and packed with only what that call imports, for peers_attention.py
# --flashinfer-path OUT_DIR (impls flashinfer_fp8, flashinfer_bf16).
#
#   bash tools/bench/build_flashinfer.sh [OUT_DIR=.peers/flashinfer_min]
#   bash tools/bench/build_flashinfer.sh --verify [OUT_DIR]   # only the offline check of an OUT_DIR
#
# Why: the flashinfer-python wheel is ~100 MB (~850 MB installed: CUDA sources, CUTLASS, CCCL) and
# JIT-compiles each kernel with nvcc at its first use; the GPU machine has no network and its time
# is scarce. Here (no GPU needed) the script
#  1. installs flashinfer-python==$FLASHINFER_VERSION and apache-tvm-ffi==$TVM_FFI_VERSION (pip
#     --no-deps --target WORK/site), and into WORK/deps whatever else 'import flashinfer' lacks in
#     PYTHON's environment (numpy, requests, nvidia-ml-py, ...: the GPU image has these);
#  2. asks the public call itself which modules it needs: single_prefill_with_kv_cache(q, k, v,
#     scale_q, scale_k, scale_v, o_dtype=bf16, causal=False, backend="fa3") on CPU tensors, with
#     get_single_prefill_module intercepted, gives the module arguments (e4m3 and bf16);
#  3. compiles those modules with FlashInfer's own JIT builder (its nvcc flags: sm_90a gencode) into
#     WORK/ws (ninja: a rerun recompiles nothing unchanged);
#  4. traces that call (audit hooks, JIT disabled, the .so files put in the package's AOT folder
#     flashinfer/data/aot/NAME/NAME.so, which FlashInfer loads before any JIT cache and without
#     ninja) on CPU tensors: it runs FlashInfer's whole Python path, loads the .so and stops at the
#     first CUDA runtime call of the C++ entry point; every module file it imported and every file
#     it opened under the package (6 templates and .cu files from data/csrc, rendered but never
#     compiled) is kept;
#  5. writes OUT_DIR: flashinfer/ (those files plus data/aot/*/*.so), tvm_ffi/ (its Python files,
#     core*.so and lib/*.so; no headers or sources), licenses/, flashinfer_build.json
#     (versions, commit, modules with sizes and sha256, nvcc, flags, seconds, files, bytes, and the
#     verification's result);
#  6. verifies OUT_DIR in a fresh python with PYTHONPATH=OUT_DIR[:WORK/deps] only,
#     FLASHINFER_DISABLE_JIT=1 and a fresh FLASHINFER_WORKSPACE_BASE: flashinfer and tvm_ffi import
#     from OUT_DIR, the same call reaches the CUDA runtime (no GPU: 'CUDA ... Error'; with a GPU it
#     runs on CUDA tensors and its error against FP32 attention is recorded), both .so files are
#     mapped from OUT_DIR (/proc/self/maps), and no process was started (no nvcc, no ninja) and no
#     network connection was tried (an audit hook refuses any).
# On the GPU machine: python3 tools/bench/peers_attention.py --impls flashinfer_fp8,flashinfer_bf16
# --flashinfer-path .peers/flashinfer_min (it sets FLASHINFER_DISABLE_JIT=1 and a workspace under
# the temp folder unless set). The .so files need libcudart.so.13 (torch's, loaded first) and a
# torch whose tensors tvm-ffi takes through DLPack's C exchange API (torch.Tensor has
# __dlpack_c_exchange_api__ in torch 2.11; without it tvm-ffi would JIT-compile an addon). The
# packed Python files are those FlashInfer imports in the build's environment; when this script was
# written the same set imported in a copy of the GPU image's packages, with and without the cuDNN
# frontend (NVIDIA's cutlass DSL, cuda-tile and nccl4py, absent there, are optional to its import).
# Python compiles the packed .py files at the first import (no .pyc is packed).
# Env: PYTHON (python3: the one with torch, 2.11+cu130 here), FLASHINFER_VERSION (0.7.4),
# TVM_FFI_VERSION (0.1.15.post2), WORK (/tmp/flashinfer_build: wheels' install, JIT workspace, log;
# FRESH=1 empties it), MAX_JOBS (nproc), FLASHINFER_NVCC_THREADS (1), FI_BUILD_TIMEOUT (2400 s),
# CUDA_HOME (/usr/local/cuda), FI_WHEELS (a folder of wheels: pip then runs --no-index on it).
# Full log: WORK/build.log. On failure the last line says why, prefixed 'build_flashinfer.sh:
# FAILED:'; exit 1 (2 for a bad argument).
set -euo pipefail

TOOL=build_flashinfer.sh PY=${PYTHON:-python3} LOG=
source "$(dirname "$0")/build_common.sh" # usage, die, bad_args, log, preflight
VERIFY_ONLY=0
case "${1:-}" in
-h | --help) usage; exit 0 ;;
--verify) VERIFY_ONLY=1; shift ;;
esac
(($# <= 1)) || bad_args "want [OUT_DIR] (got $# arguments)"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(realpath -m "${1:-$ROOT/.peers/flashinfer_min}")
FI_VER=${FLASHINFER_VERSION:-0.7.4}
TVM_VER=${TVM_FFI_VERSION:-0.1.15.post2}
WORK=$(realpath -m "${WORK:-/tmp/flashinfer_build}")
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export FLASHINFER_NVCC_THREADS=${FLASHINFER_NVCC_THREADS:-1}
TIMEOUT=${FI_BUILD_TIMEOUT:-2400}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
T0=$SECONDS

command -v "$PY" >/dev/null 2>&1 || die "PYTHON=$PY: not found" 2
for d in "$OUT" "$WORK"; do
    case "$d" in
    / | "$HOME" | /tmp | /work | "$ROOT" | "$ROOT/.peers") die "$d: refusing a top-level folder (it gets cleaned)" 2 ;;
    esac
done
case "$OUT/" in "$WORK"/*) die "OUT_DIR $OUT is inside WORK $WORK" 2 ;; esac
case "$WORK/" in "$OUT"/*) die "WORK $WORK is inside OUT_DIR $OUT" 2 ;; esac
[[ ${FRESH:-0} == 1 && $VERIFY_ONLY == 0 ]] && rm -rf "$WORK"
mkdir -p "$WORK" || die "cannot create WORK $WORK" 2
LOG=$WORK/build.log
((VERIFY_ONLY)) || : >"$LOG"
export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
SITE=$WORK/site DEPS=$WORK/deps WS=$WORK/ws
mkdir -p "$DEPS"

# The probe, shared by the trace (step 4) and the verification (step 6): audit hooks record every
# process started, refuse any network connection and record the files opened under ROOTS; then the
# public call for each dtype, on CUDA tensors when a GPU is there, else on CPU tensors (FlashInfer's
# Python path runs to the C++ entry point, which fails at its first CUDA runtime call).
cat >"$WORK/fi_probe.py" <<'EOF'
import json, os, sys
out, roots = sys.argv[1], [os.path.realpath(p) for p in sys.argv[2].split(":")]
procs, nets, opened = [], [], set()
def hook(ev, args):
    if ev in ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn", "os.fork"):
        procs.append(f"{ev} {args!r}"[:300])
    elif ev in ("socket.connect", "socket.getaddrinfo"):
        nets.append(f"{ev} {args!r}"[:300])
        raise OSError("build_flashinfer.sh probe: network refused")
    elif ev == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        try:
            p = os.path.realpath(os.fsdecode(args[0]))
        except Exception:
            return
        if any(p.startswith(r + os.sep) for r in roots):
            opened.add(p)
sys.addaudithook(hook)
res = {"calls": {}, "procs": procs, "nets": nets}
def dump():
    mods = {}
    for m, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f:
            mods[m] = os.path.realpath(f)
    res["modules"] = mods
    res["opened"] = sorted(opened)
    try:
        res["mapped_so"] = sorted({l.split()[-1] for l in open("/proc/self/maps") if l.rstrip().endswith(".so")})
    except OSError:
        res["mapped_so"] = []
    json.dump(res, open(out, "w"), indent=1)
import torch
gpu = torch.cuda.is_available()
res["gpu"] = torch.cuda.get_device_name(0) if gpu else None
import flashinfer
from flashinfer.prefill import single_prefill_with_kv_cache
res["flashinfer"], res["flashinfer_file"] = flashinfer.__version__, os.path.realpath(flashinfer.__file__)
import tvm_ffi
res["tvm_ffi_file"] = os.path.realpath(tvm_ffi.__file__)
dev = "cuda" if gpu else "cpu"
S, H, D = 512, 4, 128
g = torch.Generator().manual_seed(0)
for name, dt in (("e4m3", torch.float8_e4m3fn), ("bf16", torch.bfloat16)):
    x = [torch.randn(S, H, D, generator=g) for _ in range(3)]
    kw = {}
    if dt == torch.bfloat16:
        t = [a.to(dt) for a in x]
        deq = [a.float() for a in t]
    else:
        s = [a.abs().amax(dim=(0, 2)) / 448.0 for a in x]  # per head, as peers_attention.py
        t = [(a / si[None, :, None]).clamp(-448, 448).to(dt) for a, si in zip(x, s)]
        deq = [a.float() * si[None, :, None] for a, si in zip(t, s)]
        kw = dict(scale_q=s[0].to(dev), scale_k=s[1].to(dev), scale_v=s[2].to(dev))
    r = {}
    try:
        o = single_prefill_with_kv_cache(*[a.to(dev) for a in t], causal=False, backend="fa3",
                                         o_dtype=torch.bfloat16, sm_scale=D ** -0.5, **kw)
        if gpu:
            torch.cuda.synchronize()
        q, k, v = [a.transpose(0, 1) for a in deq]
        ref = torch.softmax(q @ k.transpose(1, 2) * D ** -0.5, -1) @ v
        d = o.float().cpu().transpose(0, 1) - ref
        r = {"outcome": "ran", "rel_rms": float(d.norm() / ref.norm()), "nonfinite": int((~torch.isfinite(o)).sum())}
    except Exception as e:  # without a GPU: the CUDA runtime's refusal is the expected end
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        cuda_end = type(e).__name__ == "RuntimeError" and "cuda" in msg.lower() and "JIT" not in msg
        r = {"outcome": "reached_cuda_runtime" if cuda_end else "error", "error": msg}
    res["calls"][name] = r
dump()
EOF

# The modules' arguments from the public call (step 2): get_single_prefill_module intercepted.
cat >"$WORK/fi_args.py" <<'EOF'
import json, sys, torch
import flashinfer.prefill as P
seen = []
class Stop(Exception):
    pass
def rec(*a):
    seen.append(a)
    raise Stop
P.get_single_prefill_module = rec
H = 4
for dt in (torch.float8_e4m3fn, torch.bfloat16):
    q, k, v = [torch.zeros(64, H, 128, dtype=dt) for _ in range(3)]
    kw = dict(scale_q=torch.ones(H), scale_k=torch.ones(H), scale_v=torch.ones(H)) if dt != torch.bfloat16 else {}
    try:
        P.single_prefill_with_kv_cache(q, k, v, causal=False, backend="fa3", o_dtype=torch.bfloat16, **kw)
    except Stop:
        pass
from flashinfer.jit.attention.modules import get_single_prefill_uri
json.dump([{"args": [str(x) for x in a], "name": get_single_prefill_uri(*a)} for a in seen], open(sys.argv[1], "w"))
import pickle
pickle.dump(seen, open(sys.argv[1] + ".pkl", "wb"))
EOF

# ---- the verification (step 6); also the whole of --verify
verify() {
    local vws=$WORK/verify_ws arch=()
    rm -rf "$vws"
    "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
        arch=(FLASHINFER_CUDA_ARCH_LIST=9.0a) # no GPU to detect: name the target, as the GPU would
    env PYTHONPATH="$OUT:$DEPS" FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE="$vws" ${arch[@]+"${arch[@]}"} \
        "$PY" "$WORK/fi_probe.py" "$WORK/verify.json" "$OUT:$WORK" >>"$LOG" 2>&1 ||
        die "the verification probe failed to run (its traceback is in the log)"
    VERIFY=$("$PY" - "$WORK/verify.json" "$OUT" "$WORK" <<'EOF'
import json, os, sys
r = json.load(open(sys.argv[1])); out, work = sys.argv[2] + os.sep, sys.argv[3] + os.sep
bad = []
for k in ("flashinfer_file", "tvm_ffi_file"):
    if not r[k].startswith(out):
        bad.append(f"{k.split('_file')[0]} imported from {r[k]}, not OUT_DIR")
fi_mods = [f for m, f in r["modules"].items() if m.split(".")[0] in ("flashinfer", "tvm_ffi") and not f.startswith(out)]
if fi_mods:
    bad.append(f"modules from outside OUT_DIR: {fi_mods[:3]}")
aot = [p for p in r["mapped_so"] if "/flashinfer/data/aot/" in p]
if len(aot) != 2 or not all(p.startswith(out) for p in aot):
    bad.append(f"prebuilt .so mapped: {aot}")
if any(p.startswith((work + "site" + os.sep, work + "ws" + os.sep)) for p in r["mapped_so"]):
    bad.append("a .so from WORK's full install or JIT workspace was mapped")
for name, c in r["calls"].items():
    if c["outcome"] == "error" or (c["outcome"] == "ran" and (c["nonfinite"] or c["rel_rms"] > 0.1)):
        bad.append(f"{name}: {c}")
tools = [p for p in r["procs"] if any(t in p for t in ("nvcc", "ninja", "c++", "g++", "cicc", "ptxas"))]
if tools:
    bad.append(f"a compiler ran: {tools[0]}")
if r["nets"]:
    bad.append(f"network tried: {r['nets'][0]}")
deps = work + "deps" + os.sep
third = sorted({m.split(".")[0] for m, f in r["modules"].items()
                if ("site-packages" in f or f.startswith(deps)) and not m.startswith("_")} - {"flashinfer", "tvm_ffi"})
summary = {"ok": not bad, "problems": bad, "gpu": r["gpu"], "calls": r["calls"], "processes": r["procs"],
           "network": r["nets"], "prebuilt_so_mapped": [os.path.relpath(p, out) for p in aot],
           "third_party_imported": third,
           "from_WORK_deps": sorted({m.split(".")[0] for m, f in r["modules"].items() if f.startswith(deps)})}
json.dump(summary, open(sys.argv[1].replace(".json", "_summary.json"), "w"), indent=1)
print(("OK " if not bad else "FAIL ") + "; ".join(bad or [f"{n}: {c['outcome']}" + (f" (rel RMS {c['rel_rms']:.2e})" if c["outcome"] == "ran" else f" ({c['error'][:90]})") for n, c in r["calls"].items()]))
EOF
) || die "cannot read the verification's result"
    log "build_flashinfer.sh: verify: $VERIFY"
    [[ $VERIFY == OK* ]] || die "verification: ${VERIFY#FAIL }"
}

if ((VERIFY_ONLY)); then
    [[ -d $OUT/flashinfer && -d $OUT/tvm_ffi ]] || die "OUT_DIR $OUT holds no flashinfer/ and tvm_ffi/ (build it first)" 2
    verify
    exit 0
fi

# ---- preflight: torch, nvcc, pip
preflight <<'EOF'
import os, re, subprocess, sys
def fail(msg):
    print("FAIL " + msg); sys.exit(0)
try:
    import torch
except Exception as e:
    fail(f"import torch: {type(e).__name__}: {e}")
if torch.version.cuda is None:
    fail(f"torch {torch.__version__} is not a CUDA build")
nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
if not os.path.isfile(nvcc):
    fail(f"no nvcc at {nvcc} (set CUDA_HOME)")
m = re.search(r"release (\d+)\.(\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout)
if not m or (int(m.group(1)), int(m.group(2))) < (12, 3):
    fail(f"nvcc at {nvcc}: need CUDA >= 12.3 for sm_90a")
if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
    fail(f"{sys.executable} has no pip")
print(f"OK python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"nvcc {m.group(1)}.{m.group(2)} at {nvcc}")
EOF
PIP=("$PY" -m pip install -q --disable-pip-version-check --no-compile --no-deps --upgrade)
[[ -n ${FI_WHEELS:-} ]] && PIP+=(--no-index --find-links "$FI_WHEELS")

# ---- 1. the wheels (kept in WORK/site while their versions match)
have=$("$PY" -c "import sys; sys.path.insert(0, '$SITE'); import importlib.metadata as m
print(m.version('flashinfer-python'), m.version('apache-tvm-ffi'))" 2>/dev/null || true)
if [[ $have != "$FI_VER $TVM_VER" ]]; then
    log "build_flashinfer.sh: pip: flashinfer-python==$FI_VER apache-tvm-ffi==$TVM_VER into $SITE"
    rm -rf "$SITE" "$DEPS" && mkdir -p "$DEPS"
    "${PIP[@]}" --target "$SITE" "flashinfer-python==$FI_VER" "apache-tvm-ffi==$TVM_VER" >>"$LOG" 2>&1 ||
        die "pip could not install flashinfer-python==$FI_VER apache-tvm-ffi==$TVM_VER"
fi
rm -rf "$SITE/flashinfer/data/aot" # step 4 puts the modules there; the build must not find them
# what 'import flashinfer' lacks in PYTHON's environment, one missing module at a time
declare -A DIST=([requests]=requests [urllib3]=urllib3 [idna]=idna [certifi]=certifi
    [charset_normalizer]=charset-normalizer [packaging]=packaging [filelock]=filelock [jinja2]=jinja2
    [markupsafe]=markupsafe [numpy]=numpy [pynvml]=nvidia-ml-py [tqdm]=tqdm [einops]=einops [click]=click
    [tabulate]=tabulate [typing_extensions]=typing-extensions [ninja]=ninja)
for _ in $(seq 20); do
    miss=$(PYTHONPATH=$SITE:$DEPS "$PY" -c '
try:
    import flashinfer, flashinfer.prefill, ninja
except ModuleNotFoundError as e:
    print(e.name.split(".")[0])' 2>>"$LOG") || die "'import flashinfer' fails for a reason other than a missing module"
    [[ -z $miss ]] && break
    [[ -n ${DIST[$miss]:-} ]] || die "'import flashinfer' needs module '$miss', which this script does not know (add it to DIST)"
    log "build_flashinfer.sh: pip: ${DIST[$miss]} into $DEPS (the environment lacks '$miss')"
    "${PIP[@]}" --target "$DEPS" "${DIST[$miss]}" >>"$LOG" 2>&1 || die "pip could not install ${DIST[$miss]}"
done
[[ -z $miss ]] || die "'import flashinfer' still misses modules after 20 installs"
# ninja on PATH (FlashInfer runs 'ninja'), the python's own bin first
PATH=$(dirname "$(command -v "$PY")"):$PATH
NINJA_BIN=$(PYTHONPATH=$DEPS "$PY" -c 'import ninja, os; print(ninja.BIN_DIR)' 2>/dev/null || true)
[[ -n $NINJA_BIN && -d $NINJA_BIN ]] && PATH=$NINJA_BIN:$PATH
export PATH
command -v ninja >/dev/null || die "no ninja on PATH"
BENV=(env PYTHONPATH="$SITE:$DEPS" FLASHINFER_WORKSPACE_BASE="$WS" FLASHINFER_CUDA_ARCH_LIST=9.0a)

# ---- 2. the modules the public call asks for
"${BENV[@]}" "$PY" "$WORK/fi_args.py" "$WORK/modules.json" >>"$LOG" 2>&1 ||
    die "could not derive the modules from single_prefill_with_kv_cache (traceback in the log)"
mapfile -t NAMES < <("$PY" -c "import json; [print(m['name']) for m in json.load(open('$WORK/modules.json'))]")
((${#NAMES[@]} == 2)) || die "expected 2 modules (e4m3, bf16), got ${#NAMES[@]}"
for n in "${NAMES[@]}"; do
    [[ $n == *_sm90 ]] || die "module $n is not the sm90 (fa3) backend's"
    log "build_flashinfer.sh: module $n"
done

# ---- 3. compile (FlashInfer's builder: one ninja file, MAX_JOBS jobs)
log "build_flashinfer.sh: compiling with MAX_JOBS=$MAX_JOBS FLASHINFER_NVCC_THREADS=$FLASHINFER_NVCC_THREADS (timeout ${TIMEOUT}s)"
TC=$SECONDS
set +e
timeout --signal=TERM --kill-after=20 "$TIMEOUT" "${BENV[@]}" "$PY" - "$WORK/modules.json" >>"$LOG" 2>&1 <<'EOF'
import json, pickle, sys
from flashinfer.jit import build_jit_specs
from flashinfer.jit.attention.modules import gen_single_prefill_module
args = pickle.load(open(sys.argv[1] + ".pkl", "rb"))
specs = [gen_single_prefill_module(*a) for a in args]
build_jit_specs(specs, verbose=True, skip_prebuilt=False)
info = []
for s in specs:
    if not s.jit_library_path.exists():
        sys.exit(f"no {s.jit_library_path} after the build")
    info.append({"name": s.name, "so": str(s.jit_library_path), "nvcc_flags": s.extra_cuda_cflags,
                 "sources": [p.name for p in s.sources]})
json.dump(info, open(sys.argv[1].replace(".json", "_built.json"), "w"), indent=1)
EOF
rc=$?
set -e
if ((rc != 0)); then
    grep -n -E 'error|Error|FAILED|Killed' "$LOG" | grep -v -E 'Werror|error_code|-Wno-error' | head -15 >&2 || true
    ((rc == 124 || rc == 137)) && die "compile timed out after ${TIMEOUT}s (FI_BUILD_TIMEOUT)"
    die "the JIT build failed (rc=$rc); first error lines above"
fi
COMPILE_S=$((SECONDS - TC))
log "build_flashinfer.sh: compiled in ${COMPILE_S}s"
# FlashInfer's AOT folder of the full install, for the trace
while read -r n so; do
    { mkdir -p "$SITE/flashinfer/data/aot/$n" && cp "$so" "$SITE/flashinfer/data/aot/$n/$n.so"; } || die "cannot copy $so"
done < <("$PY" -c "import json; [print(b['name'], b['so']) for b in json.load(open('$WORK/modules_built.json'))]")

# ---- 4. trace the call on the full install (JIT disabled: it must load the AOT .so files)
"${BENV[@]}" FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE="$WORK/trace_ws" \
    "$PY" "$WORK/fi_probe.py" "$WORK/trace.json" "$SITE" >>"$LOG" 2>&1 || die "the trace failed to run (traceback in the log)"
TRACE=$("$PY" - "$WORK/trace.json" "$SITE" <<'EOF'
import json, os, sys
r = json.load(open(sys.argv[1])); site = sys.argv[2] + os.sep
errs = [f"{n}: {c.get('error')}" for n, c in r["calls"].items() if c["outcome"] == "error"]
if errs:
    print("FAIL the call did not reach the CUDA runtime: " + "; ".join(errs)); sys.exit()
files = {f for m, f in r["modules"].items() if m.split(".")[0] == "flashinfer" and f.startswith(site)}
files |= {f for f in r["opened"] if f.startswith(site + "flashinfer" + os.sep) and "/data/aot/" not in f
          and "__pycache__" not in f and os.path.isfile(f)}  # (the import system's tries of .pyc files)
with open(sys.argv[1].replace(".json", "_files.txt"), "w") as fh:
    for f in sorted(files):
        fh.write(os.path.relpath(f, site) + "\n")
print(f"OK {len(files)} files ({sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB); "
      + "; ".join(f"{n}: {c['outcome']}" for n, c in r["calls"].items()))
EOF
) || die "cannot read the trace"
log "build_flashinfer.sh: trace: $TRACE"
[[ $TRACE == OK* ]] || die "trace: ${TRACE#FAIL }"

# ---- 5. OUT_DIR (only what this script makes is cleaned)
mkdir -p "$OUT"
rm -rf "$OUT/flashinfer" "$OUT/tvm_ffi" "$OUT/licenses" "$OUT/flashinfer_build.json"
(cd "$SITE" && while IFS= read -r f; do
    mkdir -p "$OUT/$(dirname "$f")" && cp -p "$f" "$OUT/$f"
done <"$WORK/trace_files.txt") || die "cannot copy the traced files"
for n in "${NAMES[@]}"; do
    mkdir -p "$OUT/flashinfer/data/aot/$n" && cp -p "$SITE/flashinfer/data/aot/$n/$n.so" "$OUT/flashinfer/data/aot/$n/"
done
# tvm_ffi: every Python file (small) and its libraries (core*.so needs both lib/*.so: libtvm_ffi_testing
# too); no headers, sources or stubs
(cd "$SITE" && find tvm_ffi \( -name include -o -name 3rdparty -o -name src -o -name cython -o -name stub \
    -o -name __pycache__ \) -prune -o \( -name '*.py' -o -name 'core*.so' -o -path 'tvm_ffi/lib/*.so' \) \
    -type f -print | while IFS= read -r f; do mkdir -p "$OUT/$(dirname "$f")" && cp -p "$f" "$OUT/$f"; done) ||
    die "cannot copy tvm_ffi"
[[ -f $OUT/tvm_ffi/lib/libtvm_ffi.so ]] || die "no tvm_ffi/lib/libtvm_ffi.so in apache-tvm-ffi $TVM_VER"
mkdir -p "$OUT/licenses/flashinfer" "$OUT/licenses/tvm_ffi"
cp -r "$SITE"/flashinfer_python-*.dist-info/licenses/. "$OUT/licenses/flashinfer/" 2>/dev/null || true
cp -r "$SITE"/apache_tvm_ffi-*.dist-info/licenses/. "$OUT/licenses/tvm_ffi/" 2>/dev/null || true

# ---- 6. verify, then the record
verify
SECS=$((SECONDS - T0))
"$PY" - "$OUT" "$WORK" "$SECS" "$COMPILE_S" "$FI_VER" "$TVM_VER" <<'EOF' || die "cannot write flashinfer_build.json"
import hashlib, json, os, subprocess, sys
out, work, secs, csecs, fi_ver, tvm_ver = sys.argv[1:7]
sys.path[:0] = [os.path.join(work, "site"), os.path.join(work, "deps")]
import torch
meta = {}
exec(open(os.path.join(work, "site", "flashinfer", "_build_meta.py")).read(), meta)
built = json.load(open(os.path.join(work, "modules_built.json")))
args = json.load(open(os.path.join(work, "modules.json")))
mods = []
for b, a in zip(built, args):
    p = os.path.join(out, "flashinfer", "data", "aot", b["name"], b["name"] + ".so")
    mods.append({"name": b["name"], "call_args": a["args"], "so": os.path.relpath(p, out), "bytes": os.path.getsize(p),
                 "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest(), "sources": b["sources"]})
nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
nv = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
ver = json.load(open(os.path.join(work, "verify_summary.json")))
deps = {}
import importlib.metadata as im
pd = im.packages_distributions()
for m in ver["third_party_imported"] + ver["from_WORK_deps"]:
    dist = pd.get(m, [m])[0]
    try:
        deps[m] = f"{dist} {im.version(dist)}"
    except Exception:
        deps[m] = "?"
json.dump({"flashinfer_python": fi_ver, "flashinfer_commit": meta.get("__git_commit__", "?"), "apache_tvm_ffi": tvm_ver,
           "api": "flashinfer.prefill.single_prefill_with_kv_cache(q, k, v, scale_q, scale_k, scale_v, "
                  "o_dtype=torch.bfloat16, causal=False, sm_scale, backend='fa3')",
           "arch": "sm_90a", "modules": mods, "nvcc_flags": built[0]["nvcc_flags"], "nvcc": nv,
           "torch": torch.__version__, "torch_cuda": torch.version.cuda, "python": sys.version.split()[0],
           "compile_seconds": int(csecs), "seconds": int(secs), "files": len(files),
           "bytes": sum(os.path.getsize(f) for f in files), "verify": ver,
           "environment_modules": deps,
           "load": "FlashInfer's AOT folder flashinfer/data/aot/NAME/NAME.so (jit/env.py get_aot_path), "
                   "loaded by tvm_ffi.load_module; FLASHINFER_DISABLE_JIT=1 turns a missing module into an error"},
          open(os.path.join(out, "flashinfer_build.json"), "w"), indent=1)
EOF
log "build_flashinfer.sh: OK in ${SECS}s: $OUT ($(du -sh "$OUT" | cut -f1), $(find "$OUT" -type f | wc -l) files);" \
    "use --flashinfer-path $OUT"
