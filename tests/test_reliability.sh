#!/usr/bin/env bash
# test_reliability.sh — the second reliability pass (issue 32), one case per
# run, each the exact case of the issue on the tiny config:
#   fifo            a FIFO as --weights / --input: refused at once, one line, exit 2
#   same_file       an output naming an input or the other output (a link, ./,
#                   the same name): refused up front, exit 2, nothing changed
#   device_output   --output / --json naming a device node or a FIFO: refused,
#                   the node stays a node
#   nonfinite       fc2, qkv or the adaLN bias all at the BF16 maximum, temb all
#                   3e38: exit 1 naming the first non-finite stage, no output;
#                   --allow-nonfinite writes it with a warning
#   oom             prlimit --as=1150000000, 200000 tokens on the CPU: exit 1,
#                   one line, no output file
#   sparse_header   a sparse 3 GB file: refused by its header at once, without
#                   reading it; a tiny block beside a sparse 30 GB tensor runs
#                   under a 2 GB limit (only the block's bytes are read); the
#                   full-size block under a 1.15 GB limit: exit 1, one line
#   output_paths    every output checked before any work: a missing directory,
#                   an empty or unusable name: one line, nothing written
#   cpu_report      --cpu --check full --repeat 3 --json: checks null, all_pass
#                   null, repeat 3; flags that do not apply: one warning line
#   overwrite       gen_weights / gen_inputs keep an existing file unless --force;
#                   dit_block's summary flags a non-H3 config
# The last argument, gpu, runs nonfinite and same_file on the GPU path (--gpu, and the
# sequence-parallel runner with --sp-one-device); it exits 77 without a GPU.
#
# Run alone: ctest --test-dir build -R test_rel_ --output-on-failure
#   (or: bash tests/test_reliability.sh CASE build/dit_block build/tools/gen_weights build/tools/gen_inputs WORKDIR [cpu|gpu])
# H3_SANITIZED=1 (the ASan build) skips the parts that need prlimit --as,
# which AddressSanitizer's shadow memory cannot run under.
set -u
case_=$1 bin=$(realpath "$2") genw=$(realpath "$3") geni=$(realpath "$4") work=$5/$1 mode=${6:-cpu}
for b in "$bin" "$genw" "$geni"; do [ -x "$b" ] || { echo "skip: $b not built"; exit 77; }; done
"$bin" --help >/dev/null 2>&1
[ $? -eq 127 ] && { echo "skip: $bin cannot start here (missing shared libraries)"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
"$genw" --config tiny --seed 3 --out w.st >/dev/null 2>&1 || { echo "FAIL: gen_weights"; exit 1; }
"$geni" --config tiny --tokens 32 --seed 4 --out in.st >/dev/null 2>&1 || { echo "FAIL: gen_inputs"; exit 1; }
if [ "$mode" = gpu ]; then
    path=(--gpu)
    "$bin" --gpu --weights w.st --tokens 1 --check none --repeat 1 --warmup 0 --quiet >/dev/null 2>&1 ||
        { echo "skip: no usable GPU"; exit 77; }
else
    path=(--cpu)
fi

fails=0 n=0
fail() { echo "FAIL [$1]: $2"; sed 's/^/    /' run.err | tail -n 4; fails=$((fails + 1)); }
ok() { printf '  ok  %-52s %s\n' "[$1]" "$2"; }
pre=() # a wrapper for the runs (timeout, prlimit)
run() { "${pre[@]}" "$bin" "$@" >run.out 2>run.err; }
# expect RC DESC WANT ARGS...: dit_block ARGS exits RC; a failure's last
# stderr line is "dit_block: ...WANT...", and for RC 2 it is the only line (a
# user error is refused before any work); a success has WANT on stderr.
expect() {
    local want_rc=$1 desc=$2 want=$3; shift 3
    n=$((n + 1))
    run "$@"; local rc=$? lines; lines=$(wc -l <run.err)
    if [ $rc -ne "$want_rc" ]; then fail "$desc" "exit $rc, want $want_rc"
    elif [ "$want_rc" -eq 2 ] && [ "$lines" -ne 1 ]; then fail "$desc" "$lines stderr lines, want 1"
    elif [ "$want_rc" -ne 0 ] && ! tail -n 1 run.err | grep -q '^dit_block: '; then fail "$desc" "last line not dit_block's"
    elif ! { [ "$want_rc" -eq 0 ] && grep -qF -- "$want" run.err; } && ! tail -n 1 run.err | grep -qF -- "$want"; then
        fail "$desc" "stderr lacks '$want'"
    else ok "$desc" "exit $rc: $(tail -n 1 run.err | cut -c1-140)"; fi
}
# unchanged DESC FILE COPY: FILE still equals COPY
unchanged() {
    n=$((n + 1))
    if cmp -s "$2" "$3"; then ok "$1" "unchanged"; else fail "$1" "$2 was changed"; fi
}
absent() { # DESC FILE...: none of them exists (nor a temporary beside it)
    local desc=$1; shift
    n=$((n + 1))
    for f in "$@"; do
        if compgen -G "$f*" >/dev/null; then fail "$desc" "$f (or a temporary) was written"; return; fi
    done
    ok "$desc" "nothing written"
}
# Byte offset and size of tensor NAME's data in FILE (from the header).
tensor_at() {
    local file=$1 name=$2 hl begin end
    hl=$(od -An -t u8 -N 8 "$file" | tr -d ' ')
    read -r begin end < <(head -c $((8 + hl)) "$file" | tail -c "$hl" | grep -o "\"[^\"]*$name\":{[^}]*}" |
        sed -n 's/.*"data_offsets":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/p')
    [ -n "$begin" ] || return 1
    echo $((8 + hl + begin)) $((end - begin))
}
# fill FILE NAME ELEM: every element of tensor NAME set to ELEM (its
# little-endian bytes as printf octal escapes), in place
fill() {
    local file=$1 name=$2 off size
    read -r off size < <(tensor_at "$file" "$name") || { echo "FAIL: no tensor $name"; exit 1; }
    printf "$3" >elem.bin
    while [ "$(stat -c %s elem.bin)" -lt "$size" ]; do cat elem.bin elem.bin >elem2.bin && mv elem2.bin elem.bin; done
    head -c "$size" elem.bin | dd of="$file" bs=1M seek="$off" oflag=seek_bytes conv=notrunc status=none
    rm -f elem.bin
}
sanitized() { [ "${H3_SANITIZED:-0}" = 1 ] || ! command -v prlimit >/dev/null; }

case $case_ in
fifo)
    mkfifo fifo.st
    pre=(timeout 10) # exit 124: the open blocked, waiting for a writer
    expect 2 "--weights a FIFO (no writer)" "not a regular file" "${path[@]}" --weights fifo.st --tokens 8
    expect 2 "--input a FIFO (no writer)" "not a regular file" "${path[@]}" --weights w.st --input fifo.st
    ;;
same_file)
    cp w.st w.copy; cp in.st in.copy
    q=("${path[@]}" --quiet --weights w.st --input in.st)
    expect 2 "--output the weights file" "same file as --weights" "${q[@]}" --output w.st
    unchanged "weights after --output w.st" w.st w.copy
    expect 2 "--json the weights file" "same file as --weights" "${q[@]}" --json w.st
    unchanged "weights after --json w.st" w.st w.copy
    expect 2 "--output the inputs file" "same file as --input" "${q[@]}" --output in.st
    expect 2 "--json the inputs file, spelt ./" "same file as --input" "${q[@]}" --json ./in.st
    unchanged "inputs after --output / --json" in.st in.copy
    ln w.st hardlink.st; ln -s in.st symlink.st
    expect 2 "--output a hard link to the weights" "same file as --weights" "${q[@]}" --output hardlink.st
    expect 2 "--json a symlink to the inputs" "same file as --input" "${q[@]}" --json symlink.st
    unchanged "weights after the link cases" w.st w.copy
    expect 2 "--json X --output X (neither exists)" "name the same file" "${q[@]}" --json X --output X
    expect 2 "--json X --output ./X" "name the same file" "${q[@]}" --json X --output ./X
    absent "X after the same-name cases" X
    echo keep >Y
    expect 2 "--json Y --output Y (Y exists)" "name the same file" "${q[@]}" --json Y --output Y
    n=$((n + 1)); [ "$(cat Y)" = keep ] && ok "Y after --json Y --output Y" "unchanged" || fail "Y" "Y was changed"
    if [ "$mode" = gpu ]; then
        expect 2 "--gpus 2 --sp-one-device --output the weights" "same file as --weights" --gpus 2 --sp-one-device \
            --check none --quiet --weights w.st --input in.st --output w.st
        unchanged "weights after the --gpus case" w.st w.copy
    fi
    ;;
device_output)
    if ! mknod node c 1 3 2>/dev/null; then
        echo "  note: mknod not permitted here; a FIFO stands in for the device node"
        mkfifo node
    fi
    kind=$(stat -c %F node)
    expect 2 "--output a $kind" "not a regular file" "${path[@]}" --quiet --weights w.st --input in.st --output node
    expect 2 "--json a $kind" "not a regular file" "${path[@]}" --quiet --weights w.st --input in.st --json node
    n=$((n + 1))
    [ "$(stat -c %F node)" = "$kind" ] && ok "node after both" "still a $kind" || fail "node" "now a $(stat -c %F node)"
    ;;
nonfinite)
    # BF16 maximum 0x7f7f (3.39e38), finite; F32 3e38 = 0x7f61b1e6
    cp w.st wfc2.st; fill wfc2.st mlp.fc2.weight '\177\177'
    cp w.st wqkv.st; fill wqkv.st attn.qkv_proj.weight '\177\177'
    cp w.st wbias.st; fill wbias.st adaln_proj.linear.bias '\177\177'
    cp in.st itemb.st; fill itemb.st temb '\346\261\141\177'
    for c in "wfc2.st in.st fc2_gemm" "wqkv.st in.st qkv_gemm" "wbias.st in.st norm1_mod" "w.st itemb.st adaln"; do
        read -r w i stage <<<"$c"
        want="the first stage to make one: $stage"
        [ "$mode" = gpu ] && [ "$stage" != fc2_gemm ] && [ "$stage" != qkv_gemm ] && want="the first stage to make one"
        expect 1 "$w + $i: non-finite output" "$want" "${path[@]}" --quiet --weights "$w" --input "$i" \
            --output o.st --json o.json
        absent "$w + $i: no output or report" o.st o.json
    done
    # (on the GPU without the stage checks: a non-finite stage output fails its
    # check, exit 1, whether or not the output is written)
    expect 0 "--allow-nonfinite writes it" "wrote o.st" "${path[@]}" --quiet --weights wfc2.st --input in.st \
        --output o.st --json o.json --allow-nonfinite $([ "$mode" = gpu ] && echo --check none)
    n=$((n + 1))
    if grep -q '^dit_block: warning: .*non-finite.*--allow-nonfinite' run.err && grep -q '"nonfinite_output":8192' o.json &&
       grep -q 'non-finite values (NaN/Inf), first made by stage' run.out; then
        ok "--allow-nonfinite: warning, report and JSON say it" "$(grep -o '"nonfinite_first_stage":"[^"]*"' o.json)"
    else
        fail "--allow-nonfinite" "no warning line, JSON nonfinite_output or report line"
    fi
    if [ "$mode" = gpu ]; then
        rm -f o.st o.json
        # two ranks need two 128-token groups
        "$geni" --config tiny --tokens 300 --seed 4 --force --out in300.st >/dev/null 2>&1
        expect 1 "--gpus 2 --sp-one-device: non-finite output" "the first stage to make one: fc2_gemm" --gpus 2 \
            --sp-one-device --check none --quiet --weights wfc2.st --input in300.st --output o.st
        absent "--gpus 2: no output" o.st
    fi
    ;;
oom)
    if sanitized; then echo "skip: needs prlimit --as (not under AddressSanitizer)"; exit 77; fi
    pre=(timeout 300 prlimit --as=1150000000) # timeout: were memory not short, 200000 tokens would take hours
    expect 1 "prlimit --as=1150000000, 200000 tokens" "out of host memory" --cpu --quiet --weights w.st \
        --tokens 200000 --output o.st
    n=$((n + 1))
    [ "$(grep -c '^dit_block: ' run.err)" -eq 1 ] && ok "one error line" "" || fail "oom" "not exactly one error line"
    absent "no output file" o.st
    ;;
sparse_header)
    truncate -s 3G sparse.st # all zeros: header length 0
    # reading the 3 GB could not fit in 2 GB (the CUDA build maps ~0.6 GB of libraries)
    pre=(timeout 20); sanitized || pre+=(prlimit --as=2000000000)
    t0=$(date +%s%N)
    expect 2 "sparse 3 GB file, header length 0" "header is not a JSON object" --cpu --weights sparse.st --tokens 8
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    n=$((n + 1)); [ $ms -lt 2000 ] && ok "refused in $ms ms" "${pre[*]}" || fail "sparse" "$ms ms"
    printf '\144\000\000\000\000\000\000\000' | dd of=sparse.st conv=notrunc status=none # length 100, then NULs
    expect 2 "sparse 3 GB file, header of 100 NUL bytes" "header is not a JSON object" --cpu --weights sparse.st \
        --tokens 8
    rm -f sparse.st
    if ! sanitized; then
        # sparse_block H3 EXTRA: a block file whose header is valid and whose data
        # is sparse zeros: the tiny config or the full H3 one, plus an extra
        # tensor of EXTRA bytes that no block reads
        sparse_block() {
            python3 - "$1" "$2" <<'PY'
import json, struct, sys
full, extra = sys.argv[1] == "full", int(sys.argv[2])
C, I, F, T, D = (5376, 7168, 14336, 2688, 128) if full else (256, 256, 512, 64, 128)
shapes = [("norm1.weight", [C]), ("norm2.weight", [C]), ("attn.qkv_proj.weight", [3 * I, C]),
          ("attn.q_norm.weight", [D]), ("attn.k_norm.weight", [D]), ("attn.out_proj.weight", [C, I]),
          ("mlp.fc1.weight", [2 * F, C]), ("mlp.fc2.weight", [C, F]), ("adaln_proj.linear.weight", [18 * C, T]),
          ("adaln_proj.linear.bias", [18 * C])]
hdr, at = {"__metadata__": {"qkv_layout": "grouped"}}, 0
for n, sh in shapes:
    b = 2 * (sh[0] * (sh[1] if len(sh) > 1 else 1))
    hdr["blocks.0." + n] = {"dtype": "BF16", "shape": sh, "data_offsets": [at, at + b]}
    at += b
if extra:
    hdr["huge"] = {"dtype": "U8", "shape": [extra], "data_offsets": [at, at + extra]}
    at += extra
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open("big.st", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + at)
PY
        }
        # a tiny block beside a 30 GB tensor no block reads: only the block's
        # bytes are read, so it runs at once, far under a 2 GB limit
        sparse_block tiny 30000000000
        pre=(timeout 20 prlimit --as=2000000000)
        t0=$(date +%s%N)
        expect 0 "sparse 30 GB extra tensor beside a tiny block, 2 GB limit" "" --cpu --weights big.st --tokens 8
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        n=$((n + 1)); [ $ms -lt 5000 ] && ok "ran in $ms ms" "" || fail "30 GB extra" "$ms ms"
        # the full H3 block (1.29 GB to read) under a 1.15 GB limit: out of
        # memory is the machine's, exit 1, one line
        sparse_block full 0
        pre=(timeout 20 prlimit --as=1150000000)
        expect 1 "full-size block with sparse data, 1.15 GB limit" "out of memory" --cpu --weights big.st --tokens 8
        n=$((n + 1)); [ "$(wc -l <run.err)" -eq 1 ] && ok "one line" "" || fail "full-size block" "not one line"
        rm -f big.st
    fi
    ;;
output_paths)
    mkdir -p out
    q=(--cpu --quiet --weights w.st --input in.st)
    expect 2 "--json out/r.json --output nodir/o.st" "directory nodir does not exist" "${q[@]}" --json out/r.json \
        --output nodir/o.st
    absent "out/r.json not written" out/r.json
    expect 2 "--output ''" "--output: empty file name" "${q[@]}" --output ''
    expect 2 "--json ''" "--json: empty file name" "${q[@]}" --json ''
    expect 2 "--output nodir2/ (a directory name)" "names a directory" "${q[@]}" --output nodir2/
    expect 2 "--output an existing directory" "is a directory" "${q[@]}" --json out/r.json --output out
    expect 2 "--output under a regular file" "Not a directory" "${q[@]}" --output w.st/o.st
    long=$(printf 'n%.0s' $(seq 300))
    expect 2 "--output a 300-character name" "File name too long" "${q[@]}" --json out/r.json --output "$long"
    absent "nothing written by the refused runs" out/r.json
    ;;
cpu_report)
    expect 0 "--cpu --tokens 256 --check full --repeat 3 --json r.json" "" --cpu --weights w.st --tokens 256 \
        --check full --repeat 3 --json r.json --quiet
    n=$((n + 1))
    if grep -q '"checks":null' r.json && grep -q '"all_pass":null' r.json && grep -q '"repeat":3' r.json &&
       grep -q '"checks_not_run":"' r.json; then
        ok "JSON: checks null, all_pass null, repeat 3" "$(grep -o '"checks_not_run":"[^"]*"' r.json)"
    else
        fail "JSON" "$(grep -E '"(checks|all_pass|repeat)"' r.json | tr -d '\n')"
    fi
    n=$((n + 1))
    grep -q '^checks: not run (' run.out && grep -q 'repeat 3' run.out && ok "report: checks: not run, repeat 3" "" ||
        fail "report" "no 'checks: not run' or 'repeat 3' in the printed report"
    n=$((n + 1))
    [ "$(grep -c '^dit_block: warning: --check full: GPU only' run.err)" -eq 1 ] && grep -q '0 warm-up + 3 timed runs' run.err &&
        ok "one warning line for --check, 3 timed runs" "" || fail "warning" "no single --check warning or not 3 runs"
    expect 0 "--sample, --attn on the CPU path" "" --cpu --weights w.st --tokens 32 --sample 8 --attn mma --quiet
    n=$((n + 1))
    grep -q '^dit_block: warning: --sample, --attn: GPU only' run.err && ok "one warning line names both" "" ||
        fail "--sample, --attn" "no warning line naming both"
    ;;
overwrite)
    cp w.st keep.st
    n=$((n + 1))
    "$genw" --config tiny --seed 9 --out keep.st >/dev/null 2>run.err; rc=$?
    [ $rc -eq 2 ] && cmp -s w.st keep.st && grep -q 'exists; not overwritten (--force' run.err &&
        ok "gen_weights over an existing file" "exit 2: $(cat run.err)" || fail "gen_weights" "exit $rc or the file changed"
    n=$((n + 1))
    "$genw" --config tiny --seed 9 --force --out keep.st >/dev/null 2>run.err && ! cmp -s w.st keep.st &&
        ok "gen_weights --force replaces it" "" || fail "gen_weights --force" "not replaced"
    cp in.st ikeep.st
    n=$((n + 1))
    "$geni" --config tiny --tokens 8 --out ikeep.st >/dev/null 2>run.err; rc=$?
    [ $rc -eq 2 ] && cmp -s in.st ikeep.st && ok "gen_inputs over an existing file" "exit 2: $(cat run.err)" ||
        fail "gen_inputs" "exit $rc or the file changed"
    n=$((n + 1))
    "$geni" --config tiny --tokens 8 --force --out ikeep.st >/dev/null 2>&1 && ! cmp -s in.st ikeep.st &&
        ok "gen_inputs --force replaces it" "" || fail "gen_inputs --force" "not replaced"
    # the issue's case: the default name at the repository root holds the full block
    mkdir -p root/weights && echo "the 1.29 GB block" >root/weights/block0.safetensors
    n=$((n + 1))
    (cd root && "$genw" --config tiny >/dev/null 2>../err); rc=$?
    [ $rc -eq 2 ] && [ "$(cat root/weights/block0.safetensors)" = "the 1.29 GB block" ] &&
        ok "gen_weights --config tiny at the root" "exit 2, weights/block0.safetensors kept" ||
        fail "gen_weights at the root" "exit $rc or weights/block0.safetensors replaced"
    expect 0 "dit_block on a tiny block" "" --cpu --weights w.st --tokens 8 --json r.json --quiet
    n=$((n + 1))
    head -n 1 run.err | grep -q '^weights w.st: NOT THE H3 BLOCK' && grep -q 'NOT the H3 block' run.out &&
        grep -q '"h3_config":false' r.json && ok "summary, report and JSON flag the config" "$(head -n 1 run.err | cut -c1-90)" ||
        fail "non-H3 config" "not flagged on the summary's first line, the report and the JSON"
    ;;
*)
    echo "unknown case $case_"; exit 2 ;;
esac
echo "test_reliability $case_ ($mode): $n checks, $fails failed"
[ $fails -eq 0 ]
