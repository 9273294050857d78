#!/usr/bin/env bash
# gpu_call.sh [STEPS...] — the command of one device call: tools/gpu_session.sh
# STEPS in the background, its logs under /tmp/gpu_out (kept while the machine
# stays warm), packed into $OUT/out.tgz every 15 s and at the end. A call cut
# short by its time limit or the device budget still returns what it had, and
# the many logs come back as one file.
# Env: as gpu_session.sh, plus H3_CALL_LIMIT (seconds for gpu_session.sh,
# default 560: under the device's 600 s per call).
#   run: tools/gpu_call.sh build tests blocks      (carry .debs, .whl, ...)
set -uo pipefail
cd "$(dirname "$0")/.."
R=${OUT:?gpu_call.sh: OUT, the folder a device call returns, is not set}
export OUT=/tmp/gpu_out
mkdir -p "$OUT"
(timeout "${H3_CALL_LIMIT:-560}" tools/gpu_session.sh "$@" >"$OUT/o.log" 2>&1) &
pid=$!
pack() { tar czf "$R/t.tgz" -C "$OUT" . 2>/dev/null && mv "$R/t.tgz" "$R/out.tgz"; }
while kill -0 "$pid" 2>/dev/null; do
  sleep 15
  pack
done
wait "$pid"
rc=$?
pack
tail -40 "$OUT/o.log"
exit $rc
