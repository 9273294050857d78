#!/usr/bin/env bash
# run_all.sh — the whole h3block benchmark in one run on the GPU machine (DESIGN.md §7).
#
#   bash tools/bench/run_all.sh [--docs] [BUILD_DIR=build]        # from the repository root
#
# --docs: also write the chart to docs/breakdown.png, the one docs/perf.md shows (on the device
# machine only $OUT comes back: copy $OUT/breakdown.png there instead). Without it the
# repository is not touched.
#
# Expects an already-built BUILD_DIR (bench_attn, dit_block, gen_weights, gen_inputs) and,
# for the cuDNN FP8 peer, the carried wheels in .whl/ (device call: carry [".whl", BUILD_DIR]).
# Steps, each independent (a failing step is logged and recorded, the next one runs):
#   wheels, weights+inputs (generated if absent), bench_attn (our kernels, quant stage,
#   accuracy vs FP64), build_fa3 (optional, below), peers_attention.py (SDPA cuDNN/flash BF16,
#   cuDNN FP8, FlashAttention-3 FP8/BF16 when built), torch_block.py
#   (eager + torch.compile), dit_block (--gemm bf16, fp8, fp8 --gemm-accum fast and fp8:qkv,out), compare_outputs.py, plot_breakdown.py, summary.
# Files: the device tool returns at most 8 files from $OUT, so by default only two go there:
# $OUT/bench_summary.json (the summary plus every tool's full JSON under "raw") and
# $OUT/breakdown.png; the per-tool JSONs and run_all.log stay in $H3_BENCH_TMP (/tmp/h3bench)
# with the big files (weights, outputs). H3_BENCH_FILES=all puts the per-tool JSONs and the log
# in $OUT too. Everything printed also goes to stdout (the last lines are the summary table).
# Time: every step has a cap and the whole run a budget ($H3_BENCH_BUDGET, default 540 s, so
# that gpu_session.sh's 'timeout 570' still sees the summary), under the 10-minute limit.
# Env: H3_BENCH_SEQS (attention S list), H3_BENCH_TOKENS (block S, 30272), H3_BENCH_REPS (10),
#      H3_WEIGHTS / H3_INPUTS (existing files to use instead of generating),
#      H3_BENCH_SKIP (step names to skip, e.g. "bench_attn peers_attention"),
#      H3_FA3_SRC (a flash-attention source tree or .tar.gz, e.g. .peers/fa3 carried to the device:
#      build_fa3.sh builds FA3 into $H3_FA3_PATH, default $H3_BENCH_TMP/fa3, before the peers),
#      H3_FA3_PATH (alone: an FA3 already built by build_fa3.sh). Without either, the peers' fa3_*
#      rows say 'unavailable'.
set -euo pipefail
DOCS=0
while [[ $# -gt 0 && ${1:-} == -* ]]; do
    case $1 in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --docs) DOCS=1 ;;
    *) echo "run_all.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

BUILD=${1:-build}
OUT=${OUT:-./out}
TMPD=${H3_BENCH_TMP:-/tmp/h3bench}
BUDGET=${H3_BENCH_BUDGET:-540}
SEQS=${H3_BENCH_SEQS:-4096,8192,16384,30272,75600}
TOKENS=${H3_BENCH_TOKENS:-30272}
REPS=${H3_BENCH_REPS:-10}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT" "$TMPD"
OUT=$(cd "$OUT" && pwd)
FINAL=$OUT            # bench_summary.json, breakdown.png
if [[ ${H3_BENCH_FILES:-few} != all ]]; then OUT=$TMPD; fi   # per-tool JSONs and the log
LOG=$OUT/run_all.log
: >"$LOG"
export PYTHONUNBUFFERED=1
STATUS_FILE=$TMPD/steps.tsv
: >"$STATUS_FILE"
T0=$SECONDS

log() { echo "$*" | tee -a "$LOG"; }

# step NAME CAP_S CMD...: runs CMD with a timeout of min(CAP_S, what is left of the budget
# less 25 s for the summary), output to the terminal and the log; records rc and time.
step() {
    local name=$1 cap=$2
    shift 2
    if [[ " ${H3_BENCH_SKIP:-} " == *" $name "* ]]; then
        log "=== $name: skipped (H3_BENCH_SKIP)"
        printf '%s\tskipped (H3_BENCH_SKIP)\t0\n' "$name" >>"$STATUS_FILE"
        return 0
    fi
    local left=$((BUDGET - (SECONDS - T0) - 25))
    local t=$cap
    ((left < t)) && t=$left
    if ((t < 5)); then
        log "=== $name: skipped (time budget spent)"
        printf '%s\tskipped (budget)\t0\n' "$name" >>"$STATUS_FILE"
        return 0
    fi
    log "=== $name (cap ${t}s): $*"
    local s=$SECONDS rc=0
    set +e
    timeout --signal=TERM --kill-after=10 "$t" "$@" 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    set -e
    local msg=ok
    if ((rc == 124 || rc == 137)); then msg="timeout after ${t}s"; elif ((rc != 0)); then msg="failed rc=$rc"; fi
    log "=== $name: $msg ($((SECONDS - s)) s)"
    printf '%s\t%s\t%s\n' "$name" "$msg" "$((SECONDS - s))" >>"$STATUS_FILE"
    return 0
}

log "run_all.sh: build $BUILD, out $OUT, budget ${BUDGET}s, seqs $SEQS, block tokens $TOKENS"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv 2>&1 | tee -a "$LOG" || true

# ---- wheels: cudnn frontend (main, and an older one in .whl/alt as a fallback for the FP8 peer)
PIPQ="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
step wheels 60 bash -c "shopt -s nullglob; w=(.whl/*.whl); a=(.whl/alt/*.whl)
    ((\${#w[@]})) || { echo 'no wheels in .whl/ (carry .whl): the cuDNN FP8 peer will be missing'; exit 1; }
    $PIPQ --target /tmp/site \"\${w[@]}\" || exit 1
    if ((\${#a[@]})); then $PIPQ --target /tmp/site_alt \"\${a[@]}\" || exit 1; fi
    ls /tmp/site /tmp/site_alt 2>/dev/null | grep -i dist-info"
if [[ -d /tmp/site ]]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi

# ---- weights and inputs
W=${H3_WEIGHTS:-$TMPD/block0.safetensors}
[[ -z ${H3_WEIGHTS:-} && -f weights/block0.safetensors ]] && W=weights/block0.safetensors  # made by an earlier step
IN=${H3_INPUTS:-$TMPD/inputs_$TOKENS.safetensors}
[[ -f $W ]] || step gen_weights 90 "$BUILD/tools/gen_weights" --out "$W" --seed 1
[[ -f $IN ]] || step gen_inputs 30 "$BUILD/tools/gen_inputs" --out "$IN" --tokens "$TOKENS" --seed 2

# ---- attention: ours, then the peers
step bench_attn 120 "$BUILD/tools/bench/bench_attn" --seqs "$SEQS" --reps "$REPS" --quant --accuracy \
    --json "$OUT/bench_attn.json"
# FlashAttention-3 for the peers: built here from H3_FA3_SRC, or prebuilt at H3_FA3_PATH.
FA3_ARGS=()
if [[ -n ${H3_FA3_SRC:-} ]]; then
    FA3_DIR=${H3_FA3_PATH:-$TMPD/fa3}
    step build_fa3 300 bash "$HERE/build_fa3.sh" "$H3_FA3_SRC" "$FA3_DIR"
    FA3_ARGS=(--fa3-path "$FA3_DIR")
elif [[ -n ${H3_FA3_PATH:-} ]]; then
    FA3_ARGS=(--fa3-path "$H3_FA3_PATH")
fi
step peers_attention 150 python3 "$HERE/peers_attention.py" --seqs "$SEQS" --reps "$REPS" \
    ${FA3_ARGS[@]+"${FA3_ARGS[@]}"} --json "$OUT/peers_attention.json"
# If the FP8 peer failed with the main frontend, try the older one (its rows get '@alt').
if [[ -d /tmp/site_alt && -f $OUT/peers_attention.json ]] &&
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; sys.exit(0 if any(x['impl']=='cudnn_fp8' and x.get('status')!='ok' for x in r) else 1)" "$OUT/peers_attention.json"; then
    step peers_fp8_alt 60 env PYTHONPATH=/tmp/site_alt python3 "$HERE/peers_attention.py" --seqs "$SEQS" --reps "$REPS" \
        --impls cudnn_fp8 --tag @alt --merge-into "$OUT/peers_attention.json"
fi

# ---- the block: PyTorch eager + compile, ours, and their outputs compared
step torch_block 200 python3 "$HERE/torch_block.py" --weights "$W" --input "$IN" --reps "$REPS" \
    --output "$TMPD/torch_out.safetensors" --json "$OUT/torch_block.json"
step dit_block 120 "$BUILD/dit_block" --weights "$W" --input "$IN" --json "$OUT/dit_block.json" \
    --output "$TMPD/ours_out.safetensors"
step compare_outputs 30 python3 "$HERE/compare_outputs.py" "$TMPD/ours_out.safetensors" "$TMPD/torch_out.safetensors" \
    --input "$IN" --json "$OUT/compare.json"
step dit_block_fp8 120 "$BUILD/dit_block" --gemm fp8 --weights "$W" --input "$IN" --json "$OUT/dit_block_fp8.json" \
    --output "$TMPD/ours_out_fp8.safetensors"
step compare_fp8 30 python3 "$HERE/compare_outputs.py" "$TMPD/ours_out_fp8.safetensors" "$TMPD/torch_out.safetensors" \
    --input "$IN" --json "$OUT/compare_fp8.json"
step dit_block_fp8fast 120 "$BUILD/dit_block" --gemm fp8 --gemm-accum fast --weights "$W" --input "$IN" \
    --json "$OUT/dit_block_fp8fast.json" --output "$TMPD/ours_out_fp8fast.safetensors"
step compare_fp8fast 30 python3 "$HERE/compare_outputs.py" "$TMPD/ours_out_fp8fast.safetensors" \
    "$TMPD/torch_out.safetensors" --input "$IN" --json "$OUT/compare_fp8fast.json"
# The candidate for issue 6's 2% accuracy goal: the attention GEMMs in FP8, the MLP in BF16.
step dit_block_fp8mix 120 "$BUILD/dit_block" --gemm fp8:qkv,out --weights "$W" --input "$IN" \
    --json "$OUT/dit_block_fp8mix.json" --output "$TMPD/ours_out_fp8mix.safetensors"
step compare_fp8mix 30 python3 "$HERE/compare_outputs.py" "$TMPD/ours_out_fp8mix.safetensors" \
    "$TMPD/torch_out.safetensors" --input "$IN" --json "$OUT/compare_fp8mix.json"
step plot_breakdown 30 python3 "$HERE/plot_breakdown.py" --ours "$OUT/dit_block.json" \
    --ours-fp8 "$OUT/dit_block_fp8.json" --torch "$OUT/torch_block.json" --out "$FINAL/breakdown.png"
if ((DOCS)) && [[ -f $FINAL/breakdown.png ]]; then
    cp "$FINAL/breakdown.png" "$HERE/../../docs/breakdown.png" && log "run_all.sh: wrote docs/breakdown.png"
fi

# ---- summary (never fails the script)
set +e
python3 "$HERE/summary.py" "$OUT" "$STATUS_FILE" "$FINAL/bench_summary.json" 2>&1 | tee -a "$LOG"
log "run_all.sh: done in $((SECONDS - T0)) s; $FINAL: $(ls "$FINAL" | tr '\n' ' '); tool JSONs and log in $OUT"
exit 0
