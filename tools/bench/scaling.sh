#!/usr/bin/env bash
# scaling.sh — attention time over S and H, ours against the FP8 peers, and
# what of it is fixed per launch, per query row and per (query, key) pair
# (tools/bench/scaling_fit.py; docs/perf.md, "Where the S = 4096 deficit sits").
#
#   tools/bench/scaling.sh BUILD_DIR [SEQS=2048,4096,8192] [HEADS=1,6,12,28,56,112]
#
# Every S at every H, N(0,1) inputs, each timed launch queued behind a read
# of 3x the L2 and a 300 µs spin (--lead-us), so that launches of a few µs
# are timed, as the large ones are, from a cold L2 and without the host's
# share of them:
#   bench_attn           ours, once per H (row h3_fp8_sm90_vs: the kernel
#                        dit_block runs), and each lab variant of H3_VARIANTS
#                        in a build with the lab (-DH3_LAB=ON)
#   peers_attention.py   H3_PEERS (default cudnn_fp8, fa3_fp8 with
#                        H3_FA3_PATH, a build of tools/bench/build_fa3.sh,
#                        and flashinfer_fp8 with H3_FLASHINFER_PATH)
# then scaling_fit.py prints the times, the peers' ratios and the fit, and
# writes $OUT/scaling.json. At S = 4096 a 192-query CTA per SM makes H = 6 one
# wave (126 whole CTAs and 6 split ones on 132 SMs): its time is one CTA's,
# start to end, and the launch's.
# Env: H3_VARIANTS, H3_PEERS, H3_FA3_PATH, H3_FLASHINFER_PATH, H3_BENCH_REPS (20),
# OUT (./out).
# Needs a GPU, PyTorch, and (for cudnn_fp8) the cuDNN frontend.
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
[ $# -ge 1 ] || { echo "scaling.sh: BUILD_DIR is missing (see --help)" >&2; exit 2; }
BUILD=$1
SEQS=${2:-2048,4096,8192}
HEADS=${3:-1,6,12,28,56,112}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$PWD/out}
REPS=${H3_BENCH_REPS:-20}
LEAD=300
PEERS=${H3_PEERS:-cudnn_fp8${H3_FA3_PATH:+,fa3_fp8}${H3_FLASHINFER_PATH:+,flashinfer_fp8}}
[ -x "$BUILD/tools/bench/bench_attn" ] || { echo "scaling.sh: $BUILD/tools/bench/bench_attn is missing (build first)" >&2; exit 2; }
if ! nvidia-smi -L >/dev/null 2>&1; then echo "scaling.sh: no GPU (nvidia-smi -L failed)" >&2; exit 77; fi
mkdir -p "$OUT/scaling"
rm -f "$OUT"/scaling/*.json "$OUT/scaling.json" # files left from another run must not enter or stand for this fit
export PYTHONUNBUFFERED=1
files=() bad=() dead=
# each bench_attn run takes seconds: a minute is a hang, and that variant's other H are left out
for H in ${HEADS//,/ }; do
  for v in default $(tr , " " <<<"${H3_VARIANTS:-}"); do
    [[ " $dead " == *" $v "* ]] && continue
    args=(--kernels sm90) tag=ours
    [ "$v" = default ] || args=(--variant "$v") tag=v$v
    f=$OUT/scaling/${tag}_h$H.json
    echo "== bench_attn $tag, H = $H"
    timeout 60 "$BUILD/tools/bench/bench_attn" "${args[@]}" --seqs "$SEQS" --heads "$H" --reps "$REPS" \
      --lead-us $LEAD --no-selfcheck --json "$f"
    rc=$?
    [ $rc = 0 ] || bad+=("bench_attn $tag H=$H: rc=$rc")
    [ $rc = 124 ] && dead+=" $v"
    [ -s "$f" ] && files+=("$f") # what it measured, even if a later S failed
  done
done
echo "== peers: $PEERS"
timeout 300 python3 "$HERE/peers_attention.py" --seqs "$SEQS" --heads "$HEADS" --impls "$PEERS" --reps "$REPS" \
  --no-exact --lead-us $LEAD ${H3_FA3_PATH:+--fa3-path "$H3_FA3_PATH"} \
  ${H3_FLASHINFER_PATH:+--flashinfer-path "$H3_FLASHINFER_PATH"} --json "$OUT/scaling/peers.json"
rc=$?
[ $rc = 0 ] || bad+=("peers_attention.py: rc=$rc")
[ -s "$OUT/scaling/peers.json" ] && files+=("$OUT/scaling/peers.json")
[ ${#files[@]} -gt 0 ] || { echo "scaling.sh: nothing was measured" >&2; exit 1; }
python3 "$HERE/scaling_fit.py" "${files[@]}" --json "$OUT/scaling.json" || bad+=("scaling_fit.py: rc=$?")
if [ ${#bad[@]} -gt 0 ]; then
  printf 'scaling.sh: %s\n' "${bad[@]}" >&2
  exit 1
fi
