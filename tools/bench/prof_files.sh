# prof_files.sh — sourced, not run (profiles.sh, gpu_session.sh): the files
# of the synthetic data profiles that every attention and block figure in
# docs/perf.md is measured on, made once under H3_BENCH_TMP (/tmp/h3prof)
# with the seeds those figures name: gen_weights --profile PROFILE --seed 1,
# gen_inputs --seed 2. Needs BUILD (a build folder with tools/gen_weights
# and tools/gen_inputs); the q/k/v files need PyTorch.

PROF_DIR=${H3_BENCH_TMP:-/tmp/h3prof} # where the files are made, once

# prof_files PROFILE S: sets P (the folder), W (the block) and IN (its
# inputs at S tokens); returns 1 with one line on stderr if either cannot
# be made
prof_files() {
  P=$PROF_DIR
  W=$P/block_$1.safetensors IN=$P/inputs_$1_$2.safetensors
  mkdir -p "$P" || return 1
  [ -f "$W" ] || "$BUILD/tools/gen_weights" --profile "$1" --seed 1 --out "$W" >/dev/null 2>&1 ||
    { echo "prof_files: $BUILD/tools/gen_weights --profile $1 failed" >&2; return 1; }
  [ -f "$IN" ] || "$BUILD/tools/gen_inputs" --profile "$1" --tokens "$2" --seed 2 --out "$IN" >/dev/null 2>&1 ||
    { echo "prof_files: $BUILD/tools/gen_inputs --profile $1 --tokens $2 failed" >&2; return 1; }
}

# prof_qkv PROFILE S: prof_files, then QKV: the block's attention inputs at
# S (q, k after q/k-norm and RoPE, v: torch_block.py --dump-qkv)
prof_qkv() {
  QKV=$PROF_DIR/qkv_$1_$2.safetensors
  prof_files "$1" "$2" || return 1
  [ -f "$QKV" ] && return 0
  python3 "$(dirname "${BASH_SOURCE[0]}")/torch_block.py" --weights "$W" --input "$IN" --dump-qkv "$QKV" --qkv-only \
    >"$P/dump_qkv.log" 2>&1 ||
    { echo "prof_qkv: torch_block.py --dump-qkv failed ($1, S = $2): $(tail -1 "$P/dump_qkv.log")" >&2; return 1; }
}
