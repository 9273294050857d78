#!/usr/bin/env bash
# test_layers.sh — the layers include only what their direction allows
# (docs/DESIGN.md "Layout"): every #include "X" of a layer's C/CUDA source
# must resolve to a file of the folders it may use:
#   core/      core/ only
#   cpu_ref/   cpu_ref/, core/
#   kernels/   kernels/ (and kernels/attn/), core/'s plain headers (config.h,
#              numerics.h, rng.h: no files, no JSON)
#   runtime/   runtime/, core/, kernels/ (never app/ or cpu_ref/)
#   lib/       include/ (the public header), core/, runtime/, kernels/ (the
#              library's C API: never app/, cpu_ref/ or lab/)
#   lab/       lab/, kernels/, core/ (never app/, runtime/ or cpu_ref/)
# and no production folder (kernels/, runtime/, core/, app/) carries the
# lab's vocabulary: EXPERIMENT, DIAGNOSTIC, ABLATION or a variant number vNN.
# Plain text, so this runs anywhere (CI too).
# Run alone: ctest -R test_layers   (or: bash tests/test_layers.sh)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
fail=0 n=0
# check LAYER DIR...: each include of LAYER's files must be found in one of DIRs
check() {
    local layer=$1; shift
    local f inc ok d
    for f in $(find "$layer" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort); do
        while IFS= read -r inc; do
            n=$((n + 1))
            ok=0
            [ -f "$(dirname "$f")/$inc" ] && ok=1
            for d in "$@"; do
                case $d in
                core:plain) case $inc in config.h | numerics.h | rng.h) [ -f "core/$inc" ] && ok=1 ;; esac ;;
                *) [ -f "$d/$inc" ] && ok=1 ;;
                esac
            done
            if [ $ok -eq 0 ]; then
                echo "FAIL: $f includes \"$inc\", which is not in ${*:-its own folder} (the layer's allowed folders)"
                fail=1
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
}
check core
check cpu_ref core
check kernels kernels kernels/attn core:plain
check runtime core kernels
check lib include core runtime kernels
check lab lab kernels kernels/attn core
vocab=$(grep -rnE "EXPERIMENT|DIAGNOSTIC|ABLATION|\bv[0-9]{2,3}\b" kernels runtime core app lib include)
if [ -n "$vocab" ]; then
    echo "FAIL: the lab's vocabulary in production code:"; echo "$vocab"; fail=1
fi
[ $fail -eq 0 ] && echo "ok: $n includes of core/, cpu_ref/, kernels/, runtime/, lib/ and lab/ follow the layer directions; no lab vocabulary in kernels/, runtime/, core/, app/, lib/, include/"
exit $fail
