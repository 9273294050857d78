#!/usr/bin/env bash
# test_cli.sh — the command line of every tool, and dit_block's bad-usage and
# bad-file handling:
#   every tool (dit_block, the C tools given after WORKDIR, the Python tools
#   of tools/bench): --help and -h print the usage on stdout and exit 0;
#   --version prints "NAME (h3block) VERSION", the commit and the build (and
#   the CUDA libraries for the tools that link them); --flag=value works as
#   --flag value; a bad flag, an abbreviated one, a value given to a flag
#   that takes none and a missing value each give one stderr line
#   "NAME: ... (see --help)" and exit 2;
#   dit_block: every flag with a missing, negative, zero, huge or
#   non-numeric value, unknown flags, odd files (directory, /dev/null, empty,
#   unreadable, missing) give one stderr line and exit 2; NaN/Inf in the
#   inputs or weights are reported, never a pass; --gemm fp8:LIST selects the
#   CPU chain's FP8 GEMMs (all four = --gemm fp8); --smooth-v on --gpus 2
#   parses (without a GPU it stops later, not as a usage error); --qkv-layout
#   and --block take their values and check them against the file.
#
# Run alone: ctest -R '^test_cli$'
#   (or: bash tests/test_cli.sh build/dit_block build/tools/gen_weights build/tools/gen_inputs [WORKDIR
#        [build/tools/extract_block build/tools/fp8_error build/tools/attn_error build/tools/bench/bench_attn]])
# Everything runs with --cpu on the tiny config (hidden 256), 32 tokens,
# except the two --gpus 2 parse checks (a GPU path; without a GPU it stops).
set -u
bin=$(realpath "$1") genw=$2 geni=$3
work=${4:-$(mktemp -d)}
tools=("$bin" "$(realpath "$genw")" "$(realpath "$geni")")
for t in "${@:5}"; do tools+=("$(realpath "$t")"); done
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
for b in "$bin" "$genw" "$geni"; do [ -x "$b" ] || { echo "skip: $b not built"; exit 77; }; done
"$bin" --help >/dev/null 2>&1
[ $? -eq 127 ] && { echo "skip: $bin cannot start here (missing shared libraries)"; exit 77; }

W=$work/tiny_w.safetensors I=$work/tiny_in.safetensors
"$genw" --config tiny --seed 3 --force --out "$W" >/dev/null 2>&1 || { echo "FAIL: gen_weights --config tiny"; exit 1; }
"$geni" --config tiny --tokens 32 --seed 4 --force --out "$I" >/dev/null 2>&1 || { echo "FAIL: gen_inputs --config tiny"; exit 1; }

fails=0 n=0 notes=0
out=$work/stdout err=$work/stderr
run() { "$bin" "$@" >"$out" 2>"$err"; }

# expect2 DESC ARGS...: exit 2 and exactly one stderr line starting "dit_block: ".
expect2() {
    local desc=$1; shift
    n=$((n + 1))
    run "$@"; local rc=$?
    local lines; lines=$(wc -l <"$err")
    if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q '^dit_block: ' "$err"; then
        echo "FAIL [$desc] dit_block $*: exit $rc (want 2), $lines stderr lines (want 1):"
        sed 's/^/    /' "$err" | head -n 5
        fails=$((fails + 1))
    else
        printf '  ok  %-44s %s\n' "[$desc]" "$(cat "$err")"
    fi
}
# expect_ok DESC ARGS...: exit 0 (a value that is legal must stay legal).
expect_ok() {
    local desc=$1; shift
    n=$((n + 1))
    run "$@"; local rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL [$desc] dit_block $*: exit $rc (want 0):"; sed 's/^/    /' "$err" | tail -n 3
        fails=$((fails + 1))
    else
        printf '  ok  %-44s exit 0\n' "[$desc]"
    fi
}
# is_usage_error RC: the last run stopped in argument parsing: exit 2 with cli.c's
# usage line ("dit_block: ... (see --help)"); later user errors (no usable GPU,
# a file) also exit 2, but without "(see --help)".
is_usage_error() { [ "$1" -eq 2 ] && grep -q '^dit_block: .*(see --help)$' "$err"; }
# expect_parses DESC ARGS...: the flags parse: any exit but a usage error or a
# crash (without a GPU, dit_block then stops at "no usable GPU", exit 2).
expect_parses() {
    local desc=$1; shift
    n=$((n + 1))
    run "$@"; local rc=$?
    # a refusal of smoothing after parsing (main.c, sp.c) would name the flag
    if is_usage_error $rc || [ $rc -ge 128 ] || grep -q -- '--smooth-v' "$err"; then
        echo "FAIL [$desc] dit_block $*: exit $rc, a usage error or a crash (want the flags to parse):"
        sed 's/^/    /' "$err" | tail -n 3
        fails=$((fails + 1))
    else
        printf '  ok  %-44s exit %d: %s\n' "[$desc]" $rc "$(tail -n 1 "$err")"
    fi
}
base=(--cpu --quiet --weights "$W")

echo "== sanity"
expect_ok "tiny block, 32 tokens" "${base[@]}" --tokens 32
expect_ok "tiny block, --input" "${base[@]}" --input "$I"

echo "== numeric flags"
for f in --tokens --repeat --sample --gpus; do
    for v in 0 -1 -99999999999999999999 99999999999999999999 9223372036854775808 abc 12abc 1.5 1e3 0x10 "" "-"; do
        expect2 "$f '$v'" "${base[@]}" $f "$v"
    done
    expect2 "$f missing (last)" "${base[@]}" $f
    expect2 "$f followed by a flag" "${base[@]}" $f --cpu
done
expect2 "--tokens above 4194304" "${base[@]}" --tokens 4194305
expect2 "--repeat above 100000" "${base[@]}" --repeat 100001
expect2 "--sample above 4194304" "${base[@]}" --sample 4194305
expect2 "--gpus above 8" "${base[@]}" --gpus 9
expect2 "--gpus 2 on the CPU path" "${base[@]}" --gpus 2
expect2 "--gpus 2 --check stages" --weights "$W" --quiet --gpus 2 --check stages
expect2 "--sp-one-device without --gpus" "${base[@]}" --sp-one-device
for f in --seed --warmup; do # zero is meaningful for these
    for v in -1 -99999999999999999999 99999999999999999999 abc 12abc 1.5 "" "-"; do
        expect2 "$f '$v'" "${base[@]}" $f "$v"
    done
    expect2 "$f missing (last)" "${base[@]}" $f
    expect2 "$f followed by a flag" "${base[@]}" $f --cpu
done
expect2 "--warmup above 100000" "${base[@]}" --warmup 100001
expect2 "--seed 2^63" "${base[@]}" --seed 9223372036854775808
expect_ok "--seed 0 is legal" "${base[@]}" --tokens 32 --seed 0
expect_ok "--warmup 0 is legal" "${base[@]}" --tokens 32 --warmup 0

# Lenient forms: reported, not failed (a design choice of the CLI: core/opts.c
# reads a leading '+' as a sign and refuses blanks).
for v in " 8" "+8"; do
    run "${base[@]}" --tokens "$v"
    if [ $? -ne 2 ]; then echo "  note: --tokens '$v' is accepted (a leading '+' or blank)"; notes=$((notes + 1)); fi
done

echo "== enumerated flags"
expect2 "--check bogus" "${base[@]}" --check bogus
expect2 "--check ''" "${base[@]}" --check ""
expect2 "--check STAGES (case)" "${base[@]}" --check STAGES
expect2 "--check missing" "${base[@]}" --check
expect2 "--attn bogus" "${base[@]}" --attn bogus
expect2 "--attn missing" "${base[@]}" --attn
expect2 "--smooth-v bogus" "${base[@]}" --smooth-v bogus
expect2 "--smooth-v missing" "${base[@]}" --smooth-v
expect2 "--smooth-v on with --cpu" "${base[@]}" --smooth-v on --cpu
expect_ok "--smooth-v off on the CPU path" "${base[@]}" --smooth-v off --tokens 32
expect2 "--rotate-qk bogus" "${base[@]}" --rotate-qk bogus
expect2 "--rotate-qk missing" "${base[@]}" --rotate-qk
expect2 "--rotate-qk on with --cpu" "${base[@]}" --rotate-qk on --cpu
expect_ok "--rotate-qk off on the CPU path" "${base[@]}" --rotate-qk off --tokens 32
# --smooth-v on with --gpus P is legal (the ranks share V's column sums); a
# known usage error first, so the classification above is seen to bite.
n=$((n + 1))
run --quiet --weights "$W" --tokens 32 --smooth-v bogus --gpus 2
if is_usage_error $?; then printf '  ok  %-44s %s\n' "[--smooth-v bogus --gpus 2 is a usage error]" "$(cat "$err")"
else echo "FAIL [--smooth-v bogus --gpus 2]: not classified as a usage error:"; sed 's/^/    /' "$err" | head -n 3; fails=$((fails + 1)); fi
expect_parses "--smooth-v on --gpus 2 parses" --quiet --weights "$W" --tokens 32 --smooth-v on --gpus 2
expect2 "--qkv-layout bogus" "${base[@]}" --qkv-layout bogus
expect2 "--qkv-layout missing" "${base[@]}" --qkv-layout
expect2 "--qkv-layout stacked on a grouped file" "${base[@]}" --qkv-layout stacked --tokens 32
expect_ok "--qkv-layout grouped on a grouped file" "${base[@]}" --qkv-layout grouped --tokens 32
for v in -1 x 1.5 "" 1000000001; do expect2 "--block '$v'" "${base[@]}" --block "$v"; done
expect2 "--block 1 of a block-0 file" "${base[@]}" --block 1 --tokens 32
expect_ok "--block 0 of a block-0 file" "${base[@]}" --block 0 --tokens 32
expect2 "--gemm bogus" "${base[@]}" --gemm bogus
expect2 "--gemm FP8 (case)" "${base[@]}" --gemm FP8
expect_ok "--gemm fp8 on the CPU path" "${base[@]}" --gemm fp8 --tokens 32
expect2 "--gemm fp8 with --cpu-exact" "${base[@]}" --gemm fp8 --cpu-exact
expect2 "--gemm missing" "${base[@]}" --gemm
# --gemm fp8:LIST: a non-empty set of qkv, out, fc1, fc2, each once
expect_ok "--gemm fp8:qkv,out on the CPU path" "${base[@]}" --gemm fp8:qkv,out --tokens 32
expect_ok "--gemm fp8:fc2 (one GEMM)" "${base[@]}" --gemm fp8:fc2 --tokens 32
for v in "fp8:" "fp8:qkv," "fp8:,qkv" "fp8:qkv,,out" "fp8:qkv,qkv" "fp8:out,fc1,out" "fp8:qkv,bogus" "fp8:QKV" \
         "FP8:qkv" "bf16:qkv" "fp8=qkv" "fp8:qkv out" "mixed"; do
    expect2 "--gemm '$v'" "${base[@]}" --gemm "$v"
done
expect2 "--gemm fp8:qkv,out with --cpu-exact" "${base[@]}" --gemm fp8:qkv,out --cpu-exact
expect2 "--gemm-accum bogus" "${base[@]}" --gemm fp8 --gemm-accum bogus
expect2 "--gemm-accum FAST (case)" "${base[@]}" --gemm fp8 --gemm-accum FAST
expect2 "--gemm-accum missing" "${base[@]}" --gemm fp8 --gemm-accum
expect2 "--gemm-accum fast without FP8 GEMMs" "${base[@]}" --gemm-accum fast
expect2 "--gemm-accum fast with --cpu" "${base[@]}" --gemm fp8:fc2 --gemm-accum fast --cpu
expect_ok "--gemm-accum fp32 on the CPU path" "${base[@]}" --gemm fp8 --gemm-accum fp32 --tokens 32
expect2 "--gemm-scales bogus" "${base[@]}" --gemm fp8 --gemm-scales bogus
expect2 "--gemm-scales missing" "${base[@]}" --gemm fp8 --gemm-scales
expect2 "--gemm-scales blocks without FP8 GEMMs" "${base[@]}" --gemm-scales blocks
expect2 "--gemm-scales blocks with --gemm-accum fast" "${base[@]}" --gemm fp8 --gemm-scales blocks --gemm-accum fast
expect2 "--gemm-scales blocks with --gpus 2" "${base[@]}" --gemm fp8 --gemm-scales blocks --gpus 2
expect_ok "--gemm-scales auto on the CPU path" "${base[@]}" --gemm fp8 --gemm-scales auto --tokens 32
expect_ok "--gemm-scales rows on the CPU path" "${base[@]}" --gemm fp8 --gemm-scales rows --tokens 32
expect_ok "--gemm-scales blocks on the CPU path" "${base[@]}" --gemm fp8:qkv,fc2 --gemm-scales blocks --tokens 32

echo "== --gemm precision lists reach the CPU chain"
# fp8:LIST naming all four is --gemm fp8, bit for bit; a subset is neither
# all-FP8 nor all-BF16, and the report names its FP8 and BF16 GEMMs.
for g in bf16 fp8 fp8:fc2,out,qkv,fc1 fp8:qkv,out; do
    run "${base[@]}" --tokens 32 --gemm "$g" --output "$work/gemm_${g//[:,]/_}.safetensors" \
        --json "$work/gemm_${g//[:,]/_}.json" || { echo "FAIL: --gemm $g run: exit $?"; fails=$((fails + 1)); }
done
for sc in blocks rows; do
    run "${base[@]}" --tokens 32 --gemm fp8 --gemm-scales $sc --output "$work/gemm_fp8_$sc.safetensors" \
        --json "$work/gemm_fp8_$sc.json" || { echo "FAIL: --gemm fp8 --gemm-scales $sc run: exit $?"; fails=$((fails + 1)); }
done
expect_same() { # DESC A B WANT: the outputs of runs A and B are identical (WANT 1) or differ (WANT 0)
    n=$((n + 1))
    if cmp -s "$work/gemm_$2.safetensors" "$work/gemm_$3.safetensors"; then same=1; else same=0; fi
    if [ $same -ne "$4" ]; then echo "FAIL [$1]"; fails=$((fails + 1)); else printf '  ok  %-44s\n' "[$1]"; fi
}
expect_same "fp8:<all four> output == fp8 output" fp8 fp8_fc2_out_qkv_fc1 1
expect_same "fp8:qkv,out output != fp8 output" fp8 fp8_qkv_out 0
expect_same "fp8:qkv,out output != bf16 output" bf16 fp8_qkv_out 0
expect_same "fp8 output (auto scales) == block-scale output" fp8 fp8_blocks 1
expect_same "row-scale output != block-scale output" fp8_rows fp8_blocks 0
n=$((n + 1))
if grep -q '"gemm":"fp8 emulated (e4m3 per 128x128 weight block x 1x128 input block, fp32 sums)"' "$work/gemm_fp8_blocks.json"; then
    printf '  ok  %-44s\n' "[JSON names the block scales]"
else
    echo "FAIL [JSON names the block scales]: $(grep -o '"gemm":"[^"]*"' "$work/gemm_fp8_blocks.json")"; fails=$((fails + 1))
fi
n=$((n + 1))
if grep -q '"gemm":"fp8 emulated (e4m3 per channel x per token, fp32 sums)"' "$work/gemm_fp8_rows.json"; then
    printf '  ok  %-44s\n' "[JSON names the row scales]"
else
    echo "FAIL [JSON names the row scales]: $(grep -o '"gemm":"[^"]*"' "$work/gemm_fp8_rows.json")"; fails=$((fails + 1))
fi
n=$((n + 1))
if grep -q '"gemm":"fp8 emulated qkv,out (.*), fp32 fc1,fc2 (bf16 in)"' "$work/gemm_fp8_qkv_out.json" &&
   grep -q '"gemm":"fp8 emulated (e4m3' "$work/gemm_fp8_fc2_out_qkv_fc1.json"; then
    printf '  ok  %-44s %s\n' "[JSON names the FP8 GEMMs]" "$(grep -o '"gemm":"[^"]*"' "$work/gemm_fp8_qkv_out.json")"
else
    echo "FAIL [JSON names the FP8 GEMMs]: $(grep -o '"gemm":"[^"]*"' "$work"/gemm_fp8*.json)"; fails=$((fails + 1))
fi

echo "== file flags without a value, unknown flags"
for f in --weights --input --output --json; do
    expect2 "$f missing (last)" --cpu "$f"
    expect2 "$f followed by a flag" --cpu "$f" --quiet
done
expect2 "no --weights" --cpu --tokens 32
expect2 "unknown --bogus" "${base[@]}" --bogus
expect2 "unknown -x" "${base[@]}" -x
expect2 "positional argument" "${base[@]}" stray
expect_ok "--tokens=32 is --tokens 32" "${base[@]}" --tokens=32
expect_ok "--weights=FILE --json=FILE" --cpu --quiet --weights="$W" --tokens=8 --json="$work/eq.json"
expect2 "--cpu=1 (a flag without a value)" "${base[@]}" --cpu=1
expect2 "--tok 32 (abbreviated)" "${base[@]}" --tok 32
expect2 "--tokens= (empty after =)" "${base[@]}" --tokens=
expect2 "empty argument" "${base[@]}" ""
expect2 "--tokens with --input" "${base[@]}" --input "$I" --tokens 32

echo "== odd files"
mkdir -p "$work/adir"
: >"$work/empty.safetensors"
cp "$W" "$work/noread.safetensors"
chmod 000 "$work/noread.safetensors"
for f in --weights --input; do
    if [ $f = --weights ]; then pre=(--cpu --quiet); else pre=("${base[@]}"); fi
    expect2 "$f a directory" "${pre[@]}" $f "$work/adir"
    expect2 "$f /dev/null" "${pre[@]}" $f /dev/null
    expect2 "$f empty file" "${pre[@]}" $f "$work/empty.safetensors"
    expect2 "$f missing file" "${pre[@]}" $f "$work/does_not_exist.safetensors"
    expect2 "$f empty path" "${pre[@]}" $f ""
    if [ ! -r "$work/noread.safetensors" ]; then
        expect2 "$f unreadable (chmod 000)" "${pre[@]}" $f "$work/noread.safetensors"
    elif [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
         setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
        # root reads through chmod 000: drop to nobody for this case only
        chmod 755 "$work"; chmod 644 "$W" "$I"
        (cd / && setpriv --reuid=65534 --regid=65534 --clear-groups "$bin" "${pre[@]}" $f "$work/noread.safetensors") \
            >"$out" 2>"$err"; rc=$?
        n=$((n + 1))
        if [ $rc -ne 2 ] || [ "$(wc -l <"$err")" -ne 1 ] || ! grep -q 'Permission denied' "$err"; then
            echo "FAIL [$f unreadable, as nobody]: exit $rc:"; sed 's/^/    /' "$err" | head -n 3; fails=$((fails + 1))
        else
            printf '  ok  %-44s %s\n' "[$f unreadable (as nobody)]" "$(cat "$err")"
        fi
    else
        echo "  skip [$f unreadable]: running as root, chmod 000 does not stop reads (no setpriv to drop to nobody)"
    fi
done
expect2 "--input is the weights file" "${base[@]}" --input "$W"
expect2 "--weights is the inputs file" --cpu --quiet --weights "$I"

# Output files that cannot be written: exit 2, error names the file, and no
# partial file is left behind. (The run itself prints to stderr first, so
# only the last line is checked.)
expect_last2() {
    local desc=$1 file=$2; shift 2
    n=$((n + 1))
    run "$@"; local rc=$?
    if [ $rc -ne 2 ] || ! tail -n 1 "$err" | grep -qF -- "$file"; then
        echo "FAIL [$desc] dit_block $*: exit $rc (want 2), last stderr line lacks '$file':"
        tail -n 3 "$err" | sed 's/^/    /'
        fails=$((fails + 1))
    else
        printf '  ok  %-44s %s\n' "[$desc]" "$(tail -n 1 "$err")"
    fi
}
expect_last2 "--output a directory" "$work/adir" "${base[@]}" --tokens 32 --output "$work/adir"
expect_last2 "--output in a missing dir" "$work/nodir/o.safetensors" "${base[@]}" --tokens 32 --output "$work/nodir/o.safetensors"
expect_last2 "--json a directory" "$work/adir" "${base[@]}" --tokens 32 --json "$work/adir"
expect_last2 "--json in a missing dir" "$work/nodir/r.json" "${base[@]}" --tokens 32 --json "$work/nodir/r.json"
[ -e "$work/nodir" ] && { echo "FAIL: a partial output was left in $work/nodir"; fails=$((fails + 1)); }

echo "== non-finite values"
# Byte offset (from the file start) of tensor NAME's data: 8 + header length + begin.
data_off() {
    local file=$1 name=$2
    local hl; hl=$(od -An -t u8 -N 8 "$file" | tr -d ' ')
    local begin
    begin=$(head -c $((8 + hl)) "$file" | tail -c "$hl" | grep -o "\"$name\":{[^}]*}" |
            sed -n 's/.*"data_offsets":\[\([0-9]*\),.*/\1/p')
    [ -n "$begin" ] || return 1
    echo $((8 + hl + begin))
}
# patch FILE OFFSET OCTAL-ESCAPES: overwrite bytes in place.
patch() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
# expect_nonfinite DESC WANT ARGS...: non-zero exit and WANT on stderr.
expect_nonfinite() {
    local desc=$1 want=$2; shift 2
    n=$((n + 1))
    run "$@"; local rc=$?
    if [ $rc -eq 0 ]; then
        echo "FAIL [$desc]: dit_block exited 0: a non-finite value passed silently"
        fails=$((fails + 1))
    elif ! grep -qiE -- "$want" "$err"; then
        echo "FAIL [$desc]: exit $rc but stderr does not match '$want':"; tail -n 3 "$err" | sed 's/^/    /'
        fails=$((fails + 1))
    else
        printf '  ok  %-44s exit %d: %s\n' "[$desc]" $rc "$(grep -iE -- "$want" "$err" | head -n 1)"
    fi
}
nf='non-finite|nan|inf'
for case in "x NaN:x:\300\177:1234" "x +Inf:x:\200\177:0" "x -Inf:x:\200\377:8190" \
            "temb NaN:temb:\000\000\300\177:40" "temb +Inf:temb:\000\000\200\177:0" \
            "positions NaN:positions:\000\000\300\177:7"; do
    IFS=: read -r desc name bytes elem <<<"$case"
    cp "$I" "$work/nf.safetensors"
    off=$(data_off "$work/nf.safetensors" "$name") || { echo "FAIL: no tensor '$name' in $I"; fails=$((fails + 1)); continue; }
    esz=2; [ "$name" != x ] && esz=4
    patch "$work/nf.safetensors" $((off + elem * esz)) "$bytes"
    expect_nonfinite "$desc in the inputs" "$nf" "${base[@]}" --input "$work/nf.safetensors"
done
# A weight: the first BF16 tensor named ...qkv.weight, element 100 set to NaN.
cp "$W" "$work/nfw.safetensors"
qkv=$(head -c 4096 "$W" | grep -ao '"[^"]*qkv[^"]*weight"' | head -n 1 | tr -d '"')
if off=$(data_off "$work/nfw.safetensors" "$qkv"); then
    patch "$work/nfw.safetensors" $((off + 200)) '\300\177'
    expect_nonfinite "NaN in weight $qkv" "$nf" --cpu --quiet --weights "$work/nfw.safetensors" --tokens 32
else
    echo "FAIL: no qkv weight found in $W"; fails=$((fails + 1))
fi
# Finite inputs that overflow inside the block: one token of x at the BF16
# maximum (3.39e38): RMSNorm's sum of squares overflows FP32. The output must
# not be a silent NaN: either the run reports it or the output is finite.
cp "$I" "$work/big.safetensors"
off=$(data_off "$work/big.safetensors" x)
big=""; for i in $(seq 256); do big="$big\177\177"; done
patch "$work/big.safetensors" "$off" "$big"
n=$((n + 1))
run "${base[@]}" --input "$work/big.safetensors" --output "$work/big_out.safetensors"; rc=$?
if [ $rc -eq 0 ] && [ -f "$work/big_out.safetensors" ]; then
    ooff=$(data_off "$work/big_out.safetensors" x)
    # bf16 words with the exponent all ones: 7f80..7fff, ff80..ffff
    bad=$(tail -c +$((ooff + 1)) "$work/big_out.safetensors" | od -An -v -tx2 | tr -s ' ' '\n' |
          grep -cE '^(7f[89a-f]|ff[89a-f])' || true)
    if [ "$bad" -gt 0 ]; then
        echo "FAIL [x at the BF16 maximum]: exit 0, but the output holds $bad non-finite values (not reported)"
        fails=$((fails + 1))
    else
        echo "  ok  [x at the BF16 maximum]                  exit 0, output finite"
    fi
elif grep -qiE "$nf" "$err"; then
    printf '  ok  %-44s exit %d: %s\n' "[x at the BF16 maximum]" $rc "$(grep -iE "$nf" "$err" | head -n 1)"
else
    echo "FAIL [x at the BF16 maximum]: exit $rc without naming the non-finite value:"; tail -n 3 "$err" | sed 's/^/    /'
    fails=$((fails + 1))
fi

echo "== every tool: --help, --version, --flag=value, bad flags"
version=$(head -n 1 "$root/VERSION")
# tool_case DESC WANT_RC CHECK TOOL ARGS...: TOOL ARGS exits WANT_RC (parsed:
# any exit but a usage error's 2 or a crash) and the shell test CHECK holds
# over $out and $err (the run's stdout and stderr).
tool_case() {
    local desc=$1 want=$2 cond=$3; shift 3
    n=$((n + 1))
    "$@" >"$out" 2>"$err"; local rc=$? bad=0
    if [ "$want" = parsed ]; then [ $rc -eq 2 ] || [ $rc -ge 124 ] && bad=1; else [ $rc -ne "$want" ] && bad=1; fi
    if [ $bad = 1 ] || ! eval "$cond"; then
        echo "FAIL [$desc] $*: exit $rc (want $want) or not: $cond"
        sed 's/^/    /' "$err" | head -n 3; head -n 3 "$out" | sed 's/^/    stdout: /'
        fails=$((fails + 1))
    else
        printf '  ok  %-52s %s\n' "[$desc]" "$(head -n 1 "$err" "$out" 2>/dev/null | grep -v '^==>' | grep . | head -n 1)"
    fi
}
one_line() { [ "$(wc -l <"$err")" -eq 1 ] && grep -qx -- "$1" "$err"; }
# A run of each tool with every value given as --flag=value (a run that
# succeeds; bench_attn needs a GPU and may only get past its parsing).
eq_run() {
    case $1 in
    dit_block) echo "0|--cpu --quiet --weights=$W --tokens=8 --seed=2" ;;
    gen_weights) echo "0|--config=tiny --seed=3 --force --out=$work/eq_w.safetensors" ;;
    gen_inputs) echo "0|--config=tiny --tokens=32 --seed=4 --force --out=$work/eq_i.safetensors" ;;
    extract_block) echo "0|--checkpoint=$W --block=0 --out=$work/eq_x.safetensors" ;;
    fp8_error) echo "0|--weights=$W --tokens=8 --seed=2 --profile=uniform" ;;
    attn_error) echo "0|--seq=64 --heads=1 --seed=2 --mix=normal" ;;
    bench_attn) echo "parse|--seqs=128 --heads=1 --reps=1 --warmup=0 --kernels=mma --no-selfcheck" ;;
    esac
}
for t in "${tools[@]}"; do
    name=$(basename "$t")
    tool_case "$name --help" 0 '[ ! -s "$err" ] && head -n 1 "$out" | grep -q "^usage: $name "' "$t" --help
    cp "$out" "$work/help.txt"
    tool_case "$name -h" 0 'cmp -s "$out" "$work/help.txt"' "$t" -h
    tool_case "$name --version" 0 '[ "$(sed -n 1p "$out")" = "$name (h3block) $version" ] &&
        sed -n 2p "$out" | grep -q "^commit ." && sed -n 3p "$out" | grep -qE "^built (with CUDA .* for sm_|without CUDA)" &&
        { ! grep -q "^built with CUDA" "$out" || case $name in dit_block | bench_attn) grep -q "CUDA runtime" "$out" ;; *) true ;; esac; }' \
        "$t" --version
    tool_case "$name --bogus" 2 "[ ! -s \"\$out\" ] && one_line \"$name: unknown flag '--bogus' (see --help)\"" "$t" --bogus
    tool_case "$name --vers (abbreviated)" 2 \
        "one_line \"$name: unknown flag '--vers' (flags are spelt in full: --version) (see --help)\"" "$t" --vers
    tool_case "$name --help=1" 2 "one_line \"$name: --help takes no value (see --help)\"" "$t" --help=1
    tool_case "$name stray" 2 "one_line \"$name: unexpected argument 'stray' (see --help)\"" "$t" stray
    spec=$(eq_run "$name")
    [ -n "$spec" ] || { echo "FAIL [$name]: no --flag=value run for it in test_cli.sh"; fails=$((fails + 1)); continue; }
    IFS='|' read -r want args <<<"$spec"
    # the last flag with a value, given none: "needs a value"
    last=$(tr ' ' '\n' <<<"$args" | grep = | tail -n 1); last=${last%%=*}
    tool_case "$name $last (no value)" 2 "one_line \"$name: $last needs a value (see --help)\"" "$t" "$last"
    # shellcheck disable=SC2086
    if [ "$want" = parse ]; then
        tool_case "$name --flag=value parses" parsed '! grep -q "(see --help)" "$err"' timeout 120 "$t" $args
    else
        tool_case "$name --flag=value" 0 true "$t" $args
    fi
done
# the = forms wrote what the spaced forms did
n=$((n + 1))
if cmp -s "$work/eq_w.safetensors" "$W" && cmp -s "$work/eq_i.safetensors" "$I"; then
    printf '  ok  %-52s\n' "[gen_weights, gen_inputs: --flag=value == --flag value]"
else
    echo "FAIL [gen_weights, gen_inputs: --flag=value files differ from --flag value ones]"; fails=$((fails + 1))
fi

# The Python tools (tools/bench, tools/bench/h3cli.py): the same convention
# through argparse; an =-form flag before a bad one leaves the bad one the
# only complaint. Standard library only until the flags are read.
py=$(command -v python3 || true)
if [ -z "$py" ]; then
    echo "  skip [Python tools]: no python3"
else
    for spec in "torch_block.py|--reps=3" "peers_attention.py|--seqs=128" "peers_gemm.py|--tokens=512" \
                "compare_outputs.py|a.st b.st --json=r.json" "plot_breakdown.py|--out=x.png" \
                "summary.py|out steps.tsv" "profiles_table.py|out --json=r.json" \
                "make_qkv.py|--dist=randn --tokens=4 --heads=1 --out=x.st"; do
        IFS='|' read -r name args <<<"$spec"
        t=$root/tools/bench/$name
        tool_case "$name --help" 0 '[ ! -s "$err" ] && head -n 1 "$out" | grep -q "^usage: $name "' "$py" "$t" --help
        tool_case "$name --version" 0 '[ "$(sed -n 1p "$out")" = "$name (h3block) $version" ] &&
            sed -n 2p "$out" | grep -q "^commit ."' "$py" "$t" --version
        # shellcheck disable=SC2086
        tool_case "$name $args --bogus" 2 \
            "one_line \"$name: unrecognized arguments: --bogus (see --help)\"" "$py" "$t" $args --bogus
    done
fi

chmod 600 "$work/noread.safetensors" 2>/dev/null
echo "test_cli: $n cases, $fails failed, $notes notes"
[ -z "${4:-}" ] && rm -rf "$work"
[ $fails -eq 0 ]
