#!/usr/bin/env bash
# leaseguard in a real single-node cluster (test/cluster) built from
# binaries, installed with kustomize's cert-manager overlay (config/e2e):
# cert-manager's controller images cannot be pulled here, so the harness
# issues the Certificate's Secret and runs cert-manager's real CA injector;
# then the e2e suite, and always the teardown, also after a failure or
# Ctrl-C. Prints the time of every stage. (The Helm install, the e2e suite on
# it, the fault tests and helm upgrade/uninstall run on kind's three nodes:
# hack/kind, docs/kind.md.)
#
# Usage:
#   hack/e2e-cluster.sh            # make test-e2e-cluster
#   hack/e2e-cluster.sh --or-skip  # the same, but exit 0 with "skipped: <reason>" where the machine cannot
#   hack/e2e-cluster.sh down       # make test-e2e-cluster-down: remove what a run left
#
# Environment: CLUSTER_STATE_DIR (default ${TMPDIR:-/tmp}/leaseguard-cluster),
# CONTROLPLANE_DIR (the Kubernetes binaries, built there when missing).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$root/test/tools/go.mod")
assets=${CONTROLPLANE_DIR:-$root/bin/controlplane/$k8s_version}
state=${CLUSTER_STATE_DIR:-${TMPDIR:-/tmp}/leaseguard-cluster}
harness=$root/bin/leaseguard-cluster
timings=$root/bin/cluster/stages.txt
mode=${1:-run}

mkdir -p "$root/bin/cluster"

# stage NAME COMMAND...: run one stage, print and record its time.
stage() {
	local name=$1 start status
	shift
	start=$(date +%s)
	echo "==> cluster stage: $name"
	"$@"
	status=$?
	local took=$(($(date +%s) - start)) result=ok
	[ "$status" -eq 0 ] || result="FAILED (exit $status)"
	printf '%-22s %5ss  %s\n' "$name" "$took" "$result" >>"$timings"
	echo "<== cluster stage: $name: ${took}s, $result"
	return "$status"
}

build_harness() {
	(cd "$root/test/cluster" && go build -o "$harness" ./cmd/leaseguard-cluster)
}

cluster() { # the harness runs in its module folder (it builds the pause program there)
	(cd "$root/test/cluster" && "$harness" "$@" --state-dir "$state")
}

case "$mode" in
down)
	build_harness && cluster down
	exit $?
	;;
run | --or-skip) ;;
*)
	echo "usage: hack/e2e-cluster.sh [--or-skip | down]" >&2
	exit 2
	;;
esac

rm -f "$timings"
stage harness-unit-tests env -u CLUSTER_STATE_DIR -C "$root/test/cluster" go test -count=1 -race ./... || exit 1
stage harness-build build_harness || exit 1
# preflight exits 3 with "skipped: <reason>" only where the machine truly
# cannot (not Linux, not root, no cgroups); a root machine with cgroups runs
# the stage or fails. --or-skip puts the reason in make test's summary.
preflight_out=$(cluster preflight)
status=$?
echo "$preflight_out"
if [ "$status" -eq 3 ]; then
	if [ "$mode" = --or-skip ]; then
		[ -n "${STAGE_NOTE:-}" ] && grep -m1 '^skipped:' <<<"$preflight_out" >"$root/$STAGE_NOTE"
		exit 0
	fi
	exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

# From here on the machine changes: tear down on any exit.
overall=0
teardown() {
	trap - EXIT INT TERM
	stage down cluster down || overall=1
	echo "cluster stages:"
	cat "$timings"
	exit "$overall"
}
trap teardown EXIT
trap 'echo "interrupted: tearing down"; overall=130; exit 130' INT TERM

run_stages() {
	stage kubernetes-binaries "$root/hack/controlplane.sh" "$assets" --node || return 1
	stage up cluster up --assets "$assets" || return 1
	local kubeconfig=$state/admin.kubeconfig
	# The cert-manager overlay, with kustomize: cert-manager's images cannot
	# be pulled here, so the harness issues the Certificate's Secret and runs
	# cert-manager's real CA injector; then the same e2e suite again.
	stage cert-manager cluster cert-manager || return 1
	stage deploy-cert-manager make -C "$root" --no-print-directory deploy OVERLAY=config/e2e IMG=leaseguard:e2e \
		KUBECTL="$assets/kubectl" KUBECONFIG="$kubeconfig" || return 1
	stage e2e-cert-manager env -C "$root" KUBECONFIG="$root/hack/unreachable-kubeconfig.yaml" E2E_KUBECONFIG="$kubeconfig" \
		KUBECTL="$assets/kubectl" go test -count=1 -race ./test/e2e/ -ginkgo.v || return 1
}
run_stages || overall=1
