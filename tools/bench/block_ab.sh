#!/usr/bin/env bash
# block_ab.sh — per-op timing of two dit_block builds, interleaved so that
# both see the same thermal history (the H200's clocks drift by a few percent
# between calls and machines, more than most single-kernel changes gain):
# ROUNDS rounds, each running OLD then NEW once with the same weights, inputs
# and flags; prints each round's block totals and, per op, the median over
# rounds of each build's median and the difference.
#
# Usage: tools/bench/block_ab.sh OLD_DIT_BLOCK NEW_DIT_BLOCK [ROUNDS=3] [-- dit_block flags...]
#   e.g. tools/bench/block_ab.sh .oldbin/dit_block build-sp/dit_block 3 -- --gemm fp8
# The binaries are paths to dit_block executables (keep the old one by copying
# it out of its build folder before rebuilding). Weights and inputs: $H3_WEIGHTS
# and $H3_INPUTS, else generated once with NEW's gen_weights --seed 1 and
# gen_inputs --seed 2 --tokens ${H3_AB_TOKENS:-30272} in ${H3_AB_TMP:-/tmp/h3ab}.
# Every run is `--check none --quiet --json`; flags after -- are added to both.
set -uo pipefail
usage() { echo "usage: block_ab.sh OLD_DIT_BLOCK NEW_DIT_BLOCK [ROUNDS=3] [-- dit_block flags...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
old=$1 new=$2
shift 2
rounds=3
if [ $# -gt 0 ] && [ "$1" != -- ]; then rounds=$1; shift; fi
[ $# -eq 0 ] || { [ "$1" = -- ] && shift; } || usage
case $rounds in '' | *[!0-9]* | 0) echo "block_ab.sh: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
for b in "$old" "$new"; do [ -x "$b" ] || { echo "block_ab.sh: $b: not an executable" >&2; exit 2; }; done

tmp=${H3_AB_TMP:-/tmp/h3ab}
mkdir -p "$tmp"
w=${H3_WEIGHTS:-$tmp/block0.safetensors}
in=${H3_INPUTS:-$tmp/inputs_${H3_AB_TOKENS:-30272}.safetensors}
tools=$(dirname "$new")/tools
if [ ! -f "$w" ]; then
  echo "block_ab.sh: generating weights $w (seed 1)" >&2
  "$tools/gen_weights" --seed 1 --out "$w" >/dev/null || { echo "block_ab.sh: gen_weights failed" >&2; exit 1; }
fi
if [ ! -f "$in" ]; then
  echo "block_ab.sh: generating inputs $in (seed 2, ${H3_AB_TOKENS:-30272} tokens)" >&2
  "$tools/gen_inputs" --seed 2 --tokens "${H3_AB_TOKENS:-30272}" --out "$in" >/dev/null ||
    { echo "block_ab.sh: gen_inputs failed" >&2; exit 1; }
fi

fail=0
for r in $(seq 1 "$rounds"); do
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    json=$tmp/ab_${which}_$r.json
    rm -f "$json"
    if ! "$bin" --weights "$w" --input "$in" --check none --quiet --json "$json" "$@" >"$tmp/ab_${which}_$r.log" 2>&1; then
      echo "round $r $which: dit_block failed (last lines of $tmp/ab_${which}_$r.log):"; tail -3 "$tmp/ab_${which}_$r.log"
      fail=1
      continue
    fi
    echo "round $r $which: block $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); g=d.get("graph_ms"); print("%.3f ms (graph %s)" % (d["total_ms"], "%.3f" % g if g is not None else "not run"))' "$json")"
  done
done

python3 - "$tmp" "$rounds" <<'EOF'
import json, os, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
runs = {"old": [], "new": []}
for which in runs:
    for r in range(1, rounds + 1):
        p = os.path.join(tmp, "ab_%s_%d.json" % (which, r))
        if os.path.exists(p):
            with open(p) as f:
                runs[which].append(json.load(f))
if not runs["old"] or not runs["new"]:
    sys.exit("block_ab.sh: no complete pair of runs to compare")
names = [s["name"] for s in runs["new"][0]["stages"]]
names += [s["name"] for s in runs["old"][0]["stages"] if s["name"] not in names]
def med(which, name):
    v = [s["ms"] for d in runs[which] for s in d["stages"] if s["name"] == name]
    return statistics.median(v) if v else None
print("\n%-28s %10s %10s %9s" % ("op (median of %d rounds, ms)" % rounds, "old", "new", "new-old"))
for n in names + ["block total"]:
    if n == "block total":
        o = statistics.median(d["total_ms"] for d in runs["old"])
        w = statistics.median(d["total_ms"] for d in runs["new"])
    else:
        o, w = med("old", n), med("new", n)
    fmt = lambda x: "%10.3f" % x if x is not None else "%10s" % "-"
    diff = "%+9.3f" % (w - o) if o is not None and w is not None else "%9s" % "-"
    print("%-28s %s %s %s" % (n, fmt(o), fmt(w), diff))
EOF
rc=$?
[ $fail -eq 0 ] && [ $rc -eq 0 ]
