#!/usr/bin/env bash
# make test: every stage of the suite, each printing its time, and a summary.
#
# The control plane is built first (every suite after it runs against it),
# and every package the tests build is compiled once; then three tracks run
# side by side, each a chain of stages that stops at its first failure while
# the other tracks go on:
#
#   api     integration, multicluster        real API servers; they mostly wait
#                                            (lease expiries, steady states)
#   checks  fmt-vet, lint, chart-alerts,     compiling and analysing, mostly;
#           unit, vap, perf-programs,        the e2e suite last (it waits: it
#           image-repro, fuzz, e2e           evens out the tracks)
#   kind    the kind stage                   a 3-node cluster, Helm, e2e, faults
#
# Side by side because on two cores neither the waiting suites nor the
# cluster keep the CPU busy (measured: the api track averages 40 % of it),
# and on a cold cache the node image's builds fill what they leave. No
# stage asserts wall-clock speed, so sharing the machine changes their
# times, not their verdicts (run under load before this schedule: two
# suites at once).
#
# Live: one line per stage start and end (bin/test-progress.log); each
# track's full output is printed when the track ends (bin/test-<track>.log).
#
# Environment (from the Makefile): GOTEST, the `go test` command with the
# suite's environment (KUBECONFIG pointing nowhere); MAKE.
set -uo pipefail
# shellcheck disable=SC2086 # $GOTEST is a command line, split on purpose
cd "$(dirname "$0")/.." || exit 1
: "${GOTEST:?GOTEST unset: run make test}"
MAKE=${MAKE:-make}
mkdir -p bin
rm -f bin/test-stages.txt bin/test-progress.log bin/test-{api,checks,kind}.{log,rc}
: >bin/test-progress.log
export TEST_PROGRESS=$PWD/bin/test-progress.log
started=$(date +%s)

M=("$MAKE" --no-print-directory) # a stage runs in hack/stage.sh: a command, not a function
stage() { hack/stage.sh "$@"; }

stage controlplane "${M[@]}" controlplane || { cat bin/test-stages.txt; exit 1; }
stage check-tracked-files "${M[@]}" check-tracked-files || { cat bin/test-stages.txt; exit 1; }
# Every package the tracks' tests build, compiled once here: on a cold cache
# the tracks would each compile the same ones at the same time (Go does not
# share a compile between processes); on a warm one this only reads the cache.
stage compile "${M[@]}" compile || { cat bin/test-stages.txt; exit 1; }

track_api() {
	stage integration $GOTEST ./test/integration/... ./test/certs/... &&
		stage multicluster "${M[@]}" test-multicluster
}
track_checks() {
	stage fmt-vet "${M[@]}" fmt-check vet &&
		stage lint "${M[@]}" lint &&
		stage chart-alerts "${M[@]}" test-chart test-alerts &&
		stage unit "${M[@]}" test-unit &&
		stage vap "${M[@]}" test-vap &&
		stage perf-programs "${M[@]}" test-perf &&
		stage image-repro "${M[@]}" test-image &&
		stage fuzz "${M[@]}" fuzz &&
		stage e2e $GOTEST ./test/e2e/... # a local control plane; here to even out the tracks
}
track_kind() { stage kind hack/kind/e2e.sh --or-skip; }

# The checks track only compiles and computes; the api and kind tracks run
# control planes whose clients renew leases on deadlines. On two cores the
# three saturate the machine (a load of 15 to 27 measured), and the kind
# nodes' cgroup then weighs no more than this whole session (the
# scheduler's autogroup): one CI run's kind API server stalled 38 of 249
# ConfigMap writes over 3.5 minutes of a rolling restart. So the checks
# track runs in a cpu cgroup of a quarter of the default weight: it yields
# under contention and still takes every idle cycle (no time is lost
# overall: the machine stays busy). Where no cgroup can be made (not root,
# cgroup v2 below the root), it runs niced instead, which yields only
# within this session; the summary says which.
checks_group="" checks_weight_note=""
checks_weight() {
	local cpu=/sys/fs/cgroup/cpu line
	if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]; then
		line=$(grep -E '^[0-9]+:([^:]*,)?cpu(,[^:]*)?:' /proc/self/cgroup)
		checks_group=$cpu${line##*:}
		checks_group=${checks_group%/}/leaseguard-test-$$-checks
		mkdir "$checks_group" 2>/dev/null && echo 256 >"$checks_group/cpu.shares" && return 0
	elif [ "$(grep '^0::' /proc/self/cgroup)" = 0::/ ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
		checks_group=/sys/fs/cgroup/leaseguard-test-$$-checks
		mkdir "$checks_group" 2>/dev/null && echo 25 >"$checks_group/cpu.weight" && return 0
	fi
	[ -d "$checks_group" ] && rmdir "$checks_group"
	checks_group="" checks_weight_note="no cpu cgroup could be made for it (not root, or cgroup v2 below the root): it ran niced"
}
checks_weight
# join_checks_group: the calling (sub)shell, and all it starts, yields.
join_checks_group() {
	if [ -n "$checks_group" ]; then
		echo "$BASHPID" >"$checks_group/cgroup.procs"
	else
		renice -n 10 -p "$BASHPID" >/dev/null
	fi
}
remove_checks_group() {
	[ -z "$checks_group" ] || rmdir "$checks_group" 2>/dev/null ||
		echo "make test: cpu cgroup $checks_group still holds PIDs $(tr '\n' ' ' <"$checks_group/cgroup.procs"): left in place"
}

# Each track runs in a process group of its own (job control on): a
# script's background jobs otherwise ignore SIGINT, so Ctrl-C would stop
# this script and leave the tracks running. An interrupt (INT or TERM) is
# passed on to every track's group as TERM, which every process there
# heeds (the kind stage then tears its cluster down).
set -m
# Progress lines as stages start and end, while the tracks run.
tail -n +1 -f bin/test-progress.log &
tail_pid=$!
track_pids=()
interrupted() {
	trap - INT TERM
	echo "make test: interrupted: stopping the tracks"
	for pid in "${track_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
	wait "${track_pids[@]}"
	kill "$tail_pid" 2>/dev/null
	remove_checks_group
	exit 130
}
trap interrupted INT TERM
# Each track writes its exit status to bin/test-<track>.rc when it ends
# (polled: bash's `wait -n` cannot name a job that ended before it was
# called).
for t in api checks kind; do
	{
		[ "$t" != checks ] || join_checks_group
		"track_$t"
		echo $? >"bin/test-$t.rc"
	} >"bin/test-$t.log" 2>&1 &
	track_pids+=($!)
done
status=0
running=(api checks kind)
while [ "${#running[@]}" -gt 0 ]; do
	sleep 2
	still=()
	for t in "${running[@]}"; do
		if [ ! -s "bin/test-$t.rc" ]; then
			still+=("$t")
			continue
		fi
		rc=$(cat "bin/test-$t.rc")
		[ "$rc" = 0 ] || status=1
		echo
		echo "------ track $t ended ($([ "$rc" = 0 ] && echo ok || echo "FAILED, exit $rc")): its output ------"
		cat "bin/test-$t.log"
		echo "------ end of track $t ------"
	done
	running=("${still[@]}")
done
wait "${track_pids[@]}" # their shells, all ended
sleep 0.2
kill "$tail_pid" 2>/dev/null
wait "$tail_pid" 2>/dev/null
remove_checks_group

echo
echo "make test: $([ "$status" -eq 0 ] && echo "every stage passed" || echo FAILED) in $(($(date +%s) - started))s" \
	"(controlplane, check-tracked-files and compile, then the api, checks and kind tracks side by side;" \
	"the checks track ${checks_weight_note:-at a quarter of the CPU weight})"
cat bin/test-stages.txt
# Why, in a few lines, after the table: a CI log cut short in the middle
# still shows which test failed and its message.
for t in api checks kind; do
	[ "$(cat "bin/test-$t.rc" 2>/dev/null)" = 0 ] && continue
	echo
	echo "------ why track $t failed (failing tests and their messages; the whole output is above) ------"
	# The failing tests first, then the messages without the reports'
	# table rows (a fault report's table once filled every line shown).
	grep -E -e '^\s*--- FAIL' -e 'FAILED \(exit' "bin/test-$t.log" | head -n 20
	grep -E -A6 -e '^\s+[A-Za-z0-9_]+_test\.go:[0-9]+: ' -e '^(panic|fatal error):' "bin/test-$t.log" | grep -Ev '^\s*\|' | cut -c1-400 | head -n 80
done
exit "$status"
