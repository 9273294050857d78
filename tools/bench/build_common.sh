# build_common.sh — what build_fa3.sh and build_flashinfer.sh share, sourced
# after `set -euo pipefail`: the usage text (the script's header comment), its
# one-line failure (exit 2 with the usage for a bad argument), the log and the
# Python preflight. The includer sets TOOL (its name, for messages), PY (the
# python with torch) and LOG (empty until the log file exists).

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

die() { # die MESSAGE [CODE]: one line naming the tool and, once there is one, the log
    local msg="$TOOL: FAILED: $1"
    [[ -n $LOG && -f $LOG ]] && msg+=" (log: $LOG)"
    echo "$msg" >&2
    exit "${2:-1}"
}

bad_args() { # bad_args WHAT: the usage on stderr, then die with exit 2
    usage >&2
    die "$1" 2
}

log() { echo "$*" | tee -a "$LOG"; }

# preflight [ARGS...] <<'EOF' ... EOF: runs the Python on stdin with ARGS; its
# one line of output is "OK what it found" or "FAIL why", logged; FAIL ends the
# script with that reason.
preflight() {
    local pre
    pre=$("$PY" - "$@" 2>>"$LOG") || die "preflight python failed to run ($PY)"
    log "$TOOL: preflight: $pre"
    [[ $pre == OK* ]] || die "preflight: ${pre#FAIL }"
}
