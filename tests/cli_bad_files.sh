#!/bin/sh
# cli_bad_files.sh — dit_block refuses every malformed fixture: non-zero exit
# and the loader's expected message (and the file name) on stderr.
# Run alone: ctest -R test_cli_bad_files
#   (or: sh tests/cli_bad_files.sh build/dit_block tests/data)
# --cpu keeps it off the GPU; loading fails long before anything runs.
bin=$1
data=$2
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
# A CUDA build cannot even start without libcuda (the loader exits 127).
"$bin" --help >/dev/null 2>&1
[ $? -eq 127 ] && { echo "skip: $bin cannot start here (missing shared libraries)"; exit 77; }
fails=0
n=0
err=$(mktemp)
while IFS= read -r line; do
    case "$line" in '#'* | '') continue ;; esac
    file=${line%% *}
    want=${line#* }
    n=$((n + 1))
    "$bin" --cpu --weights "$data/$file" >/dev/null 2>"$err"
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "FAIL $file: dit_block exited 0"
        fails=$((fails + 1))
    elif ! grep -qF -- "$want" "$err" || ! grep -qF -- "$file" "$err"; then
        echo "FAIL $file: exit $rc, stderr lacks '$want' or the file name:"
        sed 's/^/    /' "$err"
        fails=$((fails + 1))
    fi
done <"$data/expected_errors.txt"
rm -f "$err"
echo "$n malformed files given to dit_block, $fails failures"
[ $fails -eq 0 ]
