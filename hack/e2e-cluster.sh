#!/usr/bin/env bash
# leaseguard in a real single-node cluster (test/cluster): bring it up from
# binaries, install leaseguard with its Helm chart (self-managed certificates,
# the e2e suite's policy, image leaseguard:e2e), run the fault tests against
# it (the e2e suite on the Helm install runs on kind: hack/kind), helm upgrade and helm uninstall it
# (test/cluster/chartinstall), then reinstall it with kustomize's
# cert-manager overlay (config/e2e; the harness issues the Secret and runs
# cert-manager's CA injector) and run the e2e suite again, and always tear it all down, also after a failure or Ctrl-C.
# Prints the time of every stage.
#
# Usage:
#   hack/e2e-cluster.sh            # make test-e2e-cluster
#   hack/e2e-cluster.sh --or-skip  # the same, but exit 0 with "skipped: <reason>" where the machine cannot
#   hack/e2e-cluster.sh down       # make test-e2e-cluster-down: remove what a run left
#
# Environment: CLUSTER_STATE_DIR (default ${TMPDIR:-/tmp}/leaseguard-cluster),
# CONTROLPLANE_DIR (the Kubernetes binaries, built there when missing),
# FAULTS_REPORT (where the fault table goes, default bin/cluster/faults-report.md).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$root/test/tools/go.mod")
assets=${CONTROLPLANE_DIR:-$root/bin/controlplane/$k8s_version}
state=${CLUSTER_STATE_DIR:-${TMPDIR:-/tmp}/leaseguard-cluster}
harness=$root/bin/leaseguard-cluster
report=${FAULTS_REPORT:-$root/bin/cluster/faults-report.md}
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
	[ -f "$report" ] && { echo "fault report ($report):"; cat "$report"; }
	exit "$overall"
}
trap teardown EXIT
trap 'echo "interrupted: tearing down"; overall=130; exit 130' INT TERM

# The chart's arguments for the first install: self-managed certificates,
# the e2e suite's policy and the webhook configurations the generator
# renders for it (docs/helm.md), the image the harness loaded.
chart_dir=$root/bin/cluster/chart
chart_args=("$root/charts/leaseguard" -n leaseguard-system
	--set certificates.mode=selfManaged --set image.repository=leaseguard --set image.tag=e2e
	--set-file "policy=$root/config/e2e-policy/policy.yaml" --set-file "webhookConfigurations=$chart_dir/webhooks.yaml"
	--set-file "apiServerAuthentication.clientCA=$state/pki/ca.crt" --set "apiServerAuthentication.clientNames={kube-apiserver-admission}")

helm_install() { # KUBECONFIG
	local kubeconfig=$1
	mkdir -p "$chart_dir"
	(cd "$root" && go run ./cmd/leaseguard manifests --config config/e2e-policy/policy.yaml \
		--namespace leaseguard-system --coalesce policy -o "$chart_dir/webhooks.yaml") || return 1
	# The namespace as docs/helm.md creates it: restricted pod security.
	"$assets/kubectl" --kubeconfig "$kubeconfig" apply -f - <<-EOF || return 1
		apiVersion: v1
		kind: Namespace
		metadata:
		  name: leaseguard-system
		  labels:
		    pod-security.kubernetes.io/enforce: restricted
	EOF
	"$root/bin/helm" --kubeconfig "$kubeconfig" install leaseguard "${chart_args[@]}" --wait --timeout 3m || return 1
	"$assets/kubectl" --kubeconfig "$kubeconfig" -n leaseguard-system rollout status deployment/leaseguard --timeout=3m
}

run_stages() {
	stage kubernetes-binaries "$root/hack/controlplane.sh" "$assets" --node || return 1
	stage up cluster up --assets "$assets" || return 1
	local kubeconfig=$state/admin.kubeconfig
	stage helm-build make -C "$root" --no-print-directory helm || return 1
	stage deploy helm_install "$kubeconfig" || return 1
	# The e2e suite against the Helm install runs on kind's three nodes (the
	# kind stage, hack/kind); here it runs once, on the cert-manager overlay below.
	rm -f "$report"
	stage faults env -C "$root/test/cluster" KUBECONFIG="$root/hack/unreachable-kubeconfig.yaml" CLUSTER_STATE_DIR="$state" \
		CLUSTER_ASSETS="$assets" FAULTS_REPORT="$report" go test -count=1 -race -timeout 15m -v ./faults/ || return 1

	# What operators do next: helm upgrade (an edited policy, 3 replicas),
	# then helm uninstall, which must leave nothing that holds up a write.
	stage helm-upgrade-uninstall env -C "$root/test/cluster" KUBECONFIG="$root/hack/unreachable-kubeconfig.yaml" CLUSTER_STATE_DIR="$state" \
		HELM="$root/bin/helm" KUBECTL="$assets/kubectl" LEASEGUARD_CHART_ARGS="${chart_args[*]}" go test -count=1 -race -timeout 10m -v ./chartinstall/ || return 1

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
