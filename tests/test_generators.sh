#!/bin/sh
# test_generators — gen_weights / gen_inputs: same seed gives the same bytes
# (also across OMP_NUM_THREADS), another seed differs, bad flags exit 2;
# gen_weights --layout writes the files of each published layout and leaves
# no temporary behind (their contents: tests/python/test_layouts.py).
#
# Run alone: ctest --test-dir build -R '^test_generators$'
#   or: sh tests/test_generators.sh build/tools/gen_weights build/tools/gen_inputs
# (seed 1; H3_TEST_SEED=N runs seed N, H3_TEST_SEED=random a fresh one.) Files go to the current directory.
GW=$1
GI=$2
[ -x "$GW" ] && [ -x "$GI" ] || { echo "usage: test_generators.sh GEN_WEIGHTS GEN_INPUTS"; exit 2; }
SEED=${H3_TEST_SEED:-1}
[ "$SEED" = random ] && SEED=$(( $(date +%s) % 1000000 ))
echo "test_generators: seed $SEED (H3_TEST_SEED=$SEED repeats it; H3_TEST_SEED=random draws a fresh one)"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

gw() { "$GW" --config tiny --force "$@" 2>/dev/null; } # --force: files of a failed earlier run may be here
OMP_NUM_THREADS=1 gw --seed "$SEED" --out tg_a.safetensors || fail "gen_weights (1 thread)"
OMP_NUM_THREADS=2 gw --seed "$SEED" --out tg_b.safetensors || fail "gen_weights (2 threads)"
OMP_NUM_THREADS=3 gw --seed "$SEED" --out tg_c.safetensors || fail "gen_weights (3 threads)"
gw --seed $((SEED + 1)) --out tg_d.safetensors || fail "gen_weights (seed+1)"
cmp -s tg_a.safetensors tg_b.safetensors || fail "gen_weights: 1 and 2 threads differ"
cmp -s tg_a.safetensors tg_c.safetensors || fail "gen_weights: 1 and 3 threads differ"
cmp -s tg_a.safetensors tg_d.safetensors && fail "gen_weights: seed $SEED and $((SEED + 1)) give the same bytes"
# Stacked has the same size but other QKV bytes (the loader test checks the values).
gw --seed "$SEED" --qkv-layout stacked --out tg_s.safetensors || fail "gen_weights stacked"
cmp -s tg_a.safetensors tg_s.safetensors && fail "gen_weights: stacked equals grouped"
[ "$(wc -c < tg_a.safetensors)" -gt 1900000 ] || fail "gen_weights: tiny block smaller than 1.9 MB"
head -c 300 tg_a.safetensors | grep -q "\"seed\":\"$SEED\"" || fail "gen_weights: __metadata__ lacks the seed"

for l in original single-file diffusers; do
    gw --seed "$SEED" --force --layout $l --out tg_l1_$l || fail "gen_weights --layout $l"
    OMP_NUM_THREADS=1 gw --seed "$SEED" --force --layout $l --out tg_l2_$l || fail "gen_weights --layout $l (1 thread)"
    diff -r tg_l1_$l tg_l2_$l > /dev/null || fail "gen_weights --layout $l: 1 thread differs"
    ls tg_l1_$l.canonical.tmp* > /dev/null 2>&1 && fail "gen_weights --layout $l left its temporary file"
done
[ -f tg_l1_original/model.safetensors.index.json ] && [ -f tg_l1_original/model-00002-of-00002.safetensors ] ||
    fail "gen_weights --layout original: no index or shards: $(ls tg_l1_original)"
[ -f tg_l1_diffusers/diffusion_pytorch_model.safetensors.index.json ] ||
    fail "gen_weights --layout diffusers: no index: $(ls tg_l1_diffusers)"
[ -f tg_l1_single-file ] || fail "gen_weights --layout single-file: no file"
head -c 400 tg_l1_single-file | grep -q qkv_layout && fail "gen_weights --layout single-file states qkv_layout"

OMP_NUM_THREADS=1 "$GI" --config tiny --force --tokens 5000 --seed "$SEED" --out tg_i1.safetensors > tg_i.log || fail "gen_inputs"
OMP_NUM_THREADS=2 "$GI" --config tiny --force --tokens 5000 --seed "$SEED" --out tg_i2.safetensors > /dev/null || fail "gen_inputs 2"
"$GI" --config tiny --force --tokens 5000 --seed $((SEED + 1)) --out tg_i3.safetensors > /dev/null || fail "gen_inputs seed+1"
cmp -s tg_i1.safetensors tg_i2.safetensors || fail "gen_inputs: same seed differs"
cmp -s tg_i1.safetensors tg_i3.safetensors && fail "gen_inputs: different seeds give the same bytes"
grep -q "5000 tokens = 50 text + 134 audio + 4816 video" tg_i.log || fail "gen_inputs counts: $(cat tg_i.log)"

# Bad flags: exit status 2 and a message on stderr.
bad() {
    prog=$1; shift
    "$prog" --out tg_bad.safetensors "$@" > /dev/null 2> tg_err.log
    rc=$?
    [ $rc -eq 2 ] || fail "$(basename "$prog") $*: exit $rc, expected 2"
    [ -s tg_err.log ] || fail "$(basename "$prog") $*: no message"
    [ -e tg_bad.safetensors ] && fail "$(basename "$prog") $*: wrote a file"
    rm -f tg_bad.safetensors
}
bad "$GW" --bogus
bad "$GW" --seed -3
bad "$GW" --seed 12x
bad "$GW" --seed ""
bad "$GW" --config huge
bad "$GW" --qkv-layout interleaved
bad "$GW" --block -1
bad "$GW" --config tiny --seed
bad "$GW" --layout comfy
bad "$GW" --layout diffusers --qkv-layout stacked
bad "$GW" --layout
bad "$GI" --tokens 0
bad "$GI" --tokens abc
bad "$GI" --seed -1
bad "$GI" --what

if [ $fails -eq 0 ]; then
    rm -rf tg_*.safetensors tg_*.log tg_l1_* tg_l2_*
    echo "test_generators: all passed"
    exit 0
fi
echo "test_generators: $fails FAILED"
exit 1
