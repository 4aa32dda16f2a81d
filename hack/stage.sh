#!/usr/bin/env bash
# Runs one stage of `make test`, printing how long it took, and records the
# result in bin/test-stages.txt for the summary at the end.
#
# Usage: hack/stage.sh NAME COMMAND [ARG...]
set -uo pipefail
name=$1
shift
mkdir -p bin
start=$(date +%s)
# TEST_PROGRESS (hack/test.sh): a file that gets one line per stage start
# and end, shown live while stages run side by side.
progress() { [ -z "${TEST_PROGRESS:-}" ] || echo "$(date +%T) $*" >>"$TEST_PROGRESS"; }
echo "==> $name"
progress "==> $name"
# A stage that skips part of itself (only where the machine truly cannot run
# it) writes why to STAGE_NOTE, and the summary says so.
export STAGE_NOTE=bin/stage-note.$name
rm -f "$STAGE_NOTE"
"$@"
status=$?
took=$(($(date +%s) - start))
result=ok
[ -s "$STAGE_NOTE" ] && result="ok, $(cat "$STAGE_NOTE")"
rm -f "$STAGE_NOTE"
[ "$status" -eq 0 ] || result="FAILED (exit $status)"
printf '%-28s %5ss  %s\n' "$name" "$took" "$result" >>bin/test-stages.txt
echo "<== $name: ${took}s, $result"
progress "<== $name: ${took}s, $result"
exit "$status"
