#!/usr/bin/env bash
# make test-e2e-kind: leaseguard on a kind cluster (one control plane, two
# workers), installed with its Helm chart as docs/helm.md installs it, then
# the e2e suite, Config Connector's namespace mode on the real lock
# (test/cluster/namespacemode), the fault tests (test/cluster/faults), a
# second one-node cluster whose installation shares the first one's global
# lock (test/cluster/twoclusters), and helm upgrade and uninstall
# (test/cluster/chartinstall) against it, and always the teardown (both
# clusters, and the Docker engine when this run started it), also after a
# failure or Ctrl-C. Prints the time of every stage.
#
# Node image: $KIND_NODE_IMAGE when set (a stock kindest/node where a
# registry is reachable), else the project's own, built offline
# (hack/kind/node-image.sh, cached in the engine). The leaseguard image is
# the project's own (make image-tar: hack/image, no Dockerfile, nothing
# pulled) and loaded into the nodes. After the chart's tests, leaseguard's cert-manager overlay
# (config/e2e, kustomize) is installed and the suite runs again: with the
# real cert-manager from KIND_CERT_MANAGER_MANIFEST (its images need a
# registry), else with test/cluster's stand-in (cert-manager's own CA
# injector, and the Secret its selfSigned issuer would write).
#
# Usage: hack/kind/e2e.sh [--keep]   (--keep: leave the cluster up for a look; hack/kind/e2e.sh down removes it)
#        hack/kind/e2e.sh --or-skip  (make test: exits 0 with "skipped: <reason>" only where the machine
#                                     truly cannot: not Linux, or no Docker engine and not root to start one)
#        hack/kind/e2e.sh down
set -uo pipefail
# shellcheck source=hack/kind/lib.sh
. "$(dirname "$0")/lib.sh"

timings=$KIND_STATE/stages.txt
report=$kind_root/bin/kind/faults-report.md
mode=${1:-run}
mkdir -p "$KIND_STATE" "$kind_root/bin/kind"

stage() { # NAME COMMAND...: run one stage, print and record its time
	local name=$1 start status took result=ok
	shift
	start=$(date +%s)
	echo "==> kind stage: $name"
	"$@"
	status=$?
	took=$(($(date +%s) - start))
	[ "$status" -eq 0 ] || result="FAILED (exit $status)"
	printf '%-22s %5ss  %s\n' "$name" "$took" "$result" >>"$timings"
	echo "<== kind stage: $name: ${took}s, $result"
	return "$status"
}

standin=$KIND_CACHE/tools/cert-manager-standin

# The two-cluster stage's second cluster: one node, its own pod CIDR (the
# host routes to both clusters' pods), the first cluster's admission CA.
second=$KIND_CLUSTER-b
second_kubeconfig=$KIND_STATE/$second.kubeconfig
second_cluster() { # ARGS...: hack/kind/cluster.sh on the second cluster
	env KIND_CLUSTER="$second" KIND_WORKERS=0 KIND_POD_SUBNET=10.245.0.0/16 KIND_SHARE_ADMISSION=1 \
		"$kind_root/hack/kind/cluster.sh" "$@"
}

# stop_cainjector: the stand-in's CA injector, by the PID it was started with.
stop_cainjector() {
	local pid_file=$KIND_STATE/cainjector.pid pid
	[ -f "$pid_file" ] || return 0
	pid=$(cat "$pid_file")
	if kill -0 "$pid" 2>/dev/null && [ "$(readlink "/proc/$pid/exe")" = "$standin" ]; then
		kill -TERM "$pid"
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$pid_file"
}

teardown_all() {
	local status=0
	stop_cainjector || status=1
	second_cluster down || status=1
	"$kind_root/hack/kind/cluster.sh" down || status=1
	"$kind_root/hack/kind/docker.sh" down || status=1
	return "$status"
}

case "$mode" in
down)
	teardown_all
	exit $?
	;;
run | --keep) ;;
--or-skip)
	reason=""
	if [ "$(uname -s)" != Linux ]; then
		reason="kind stage: not Linux"
	elif ! timeout 10 docker info >/dev/null 2>&1 && [ "$(id -u)" != 0 ]; then
		reason="kind stage: no Docker engine answers and not root to start one"
	fi
	if [ -n "$reason" ]; then
		echo "skipped: $reason"
		[ -n "${STAGE_NOTE:-}" ] && echo "skipped: $reason" >"$kind_root/$STAGE_NOTE"
		exit 0
	fi
	mode=run
	;;
*)
	echo "usage: hack/kind/e2e.sh [--keep | --or-skip] | down" >&2
	exit 2
	;;
esac

# A fault report is only ever this run's.
rm -f "$timings" "$report"
overall=0
teardown() {
	trap - EXIT INT TERM
	if [ "$mode" = --keep ]; then
		echo "kind: --keep: cluster left up (KUBECONFIG=$KIND_KUBECONFIG; $(hack/kind/docker.sh env 2>/dev/null)); hack/kind/e2e.sh down removes it"
	else
		stage down teardown_all || overall=1
	fi
	echo "kind stages:"
	cat "$timings"
	[ -f "$report" ] && { echo "fault report ($report):"; cat "$report"; }
	exit "$overall"
}
trap teardown EXIT
trap 'echo "interrupted: tearing down"; overall=130; exit 130' INT TERM

cd "$kind_root" || exit 1
chart_dir=$KIND_STATE/chart
unreachable=$kind_root/hack/unreachable-kubeconfig.yaml

# The chart's arguments: self-managed certificates, the e2e suite's policy
# and the webhook configurations the generator renders for it (docs/helm.md),
# the image this run loaded, the API server's admission client CA.
chart_args=("$kind_root/charts/leaseguard" -n leaseguard-system
	--set certificates.mode=selfManaged --set image.repository=leaseguard --set image.tag=e2e
	--set-file "policy=$kind_root/config/e2e-policy/policy.yaml" --set-file "webhookConfigurations=$chart_dir/webhooks.yaml"
	--set-file "apiServerAuthentication.clientCA=$KIND_STATE/admission/ca.crt" --set "apiServerAuthentication.clientNames={kube-apiserver-admission}")
# The namespace-mode workload's image (build_kcc_image).
kcc_image=kcc-workload:e2e
cluster_env=(KUBECONFIG="$unreachable" CLUSTER_KCC_IMAGE="$kcc_image" CLUSTER_COORDINATED_ELECTION=1 CLUSTER_KUBECONFIG="$KIND_KUBECONFIG" CLUSTER_PKI="$KIND_STATE/admission"
	CLUSTER_RESTART_APISERVER="$kind_root/hack/kind/cluster.sh restart-apiserver" CLUSTER_NODE_FAULT="$kind_root/hack/kind/cluster.sh"
	KUBECTL="$KUBECTL")

helm_install() { # [KUBECONFIG]: the first cluster's unless given
	local kubeconfig=${1:-$KIND_KUBECONFIG}
	mkdir -p "$chart_dir"
	go run ./cmd/leaseguard manifests --config config/e2e-policy/policy.yaml \
		--leaseguard-namespace leaseguard-system --coalesce policy --output-file "$chart_dir/webhooks.yaml" || return 1
	# The namespace as docs/helm.md creates it: restricted pod security.
	"$KUBECTL" --kubeconfig "$kubeconfig" apply -f - <<-NS || return 1
		apiVersion: v1
		kind: Namespace
		metadata:
		  name: leaseguard-system
		  labels:
		    pod-security.kubernetes.io/enforce: restricted
	NS
	bin/helm --kubeconfig "$kubeconfig" install leaseguard "${chart_args[@]}" --wait --timeout 3m || return 1
	"$KUBECTL" --kubeconfig "$kubeconfig" -n leaseguard-system rollout status deployment/leaseguard --timeout=3m
}

# cert_manager_crds: the Issuer and Certificate CRDs of the cert-manager
# module leaseguard builds against, so that the suite's server-side dry-run of
# config/default is answered (the controller itself needs a registry).
cert_manager_crds() {
	local dir
	dir=$(go mod download -json github.com/cert-manager/cert-manager | jq -r .Dir) || return 1
	"$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" apply --server-side \
		-f "$dir/deploy/crds/cert-manager.io_issuers.yaml" -f "$dir/deploy/crds/cert-manager.io_certificates.yaml" || return 1
	# Polled rather than `kubectl wait`: a CRD read before the API server
	# wrote its first status makes `kubectl wait --for=condition` fail with
	# ".status.conditions accessor error" instead of waiting (seen once).
	local crd
	for crd in issuers.cert-manager.io certificates.cert-manager.io; do
		for _ in $(seq 1 60); do
			[ "$("$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" get crd "$crd" \
				-o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && continue 2
			sleep 1
		done
		echo "kind: CRD $crd not Established after 60 s" >&2
		return 1
	done
}

# multiclusterlease_crd: Config Connector's MultiClusterLease CRD, which
# this cluster lacks and the suite needs; applied here, explicitly, since
# neither the chart nor config/default installs it (docs/helm.md). The
# opt-in component carries the annotations that keep it on uninstall;
# config/e2e, deployed later, includes the same component.
multiclusterlease_crd() { # [KUBECONFIG]: the first cluster's unless given
	local crd=multiclusterleases.multicluster.core.cnrm.cloud.google.com kubeconfig=${1:-$KIND_KUBECONFIG}
	"$KUBECTL" --kubeconfig "$kubeconfig" apply --server-side -k config/components/multiclusterlease-crd || return 1
	# Polled, as cert_manager_crds does, rather than `kubectl wait`.
	for _ in $(seq 1 60); do
		[ "$("$KUBECTL" --kubeconfig "$kubeconfig" get crd "$crd" \
			-o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && return 0
		sleep 1
	done
	echo "kind: CRD $crd not Established after 60 s" >&2
	return 1
}

e2e_suite() { # the suite, unchanged; KUBECONFIG points nowhere: it may only use the cluster it is given
	env KUBECONFIG="$unreachable" E2E_KUBECONFIG="$KIND_KUBECONFIG" KUBECTL="$KUBECTL" \
		go test -count=1 -race ./test/e2e/ -ginkgo.v
}

# cert_manager: the real cert-manager where its manifest is given (its
# images need a registry); else test/cluster's stand-in, which writes the
# Secret cert-manager's selfSigned issuer would and runs cert-manager's own
# CA injector from its module, on the host, until the teardown stops it by PID.
cert_manager() {
	if [ -n "${KIND_CERT_MANAGER_MANIFEST:-}" ]; then
		"$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" apply -f "$KIND_CERT_MANAGER_MANIFEST" || return 1
		"$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" -n cert-manager wait --for=condition=Available deployment --all --timeout=5m
		return
	fi
	go -C test/cluster build -o "$standin" ./cmd/cert-manager-standin || return 1
	"$standin" issue --kubeconfig "$KIND_KUBECONFIG" --repo "$kind_root" || return 1
	setsid "$standin" cainjector --kubeconfig "$KIND_KUBECONFIG" >"$KIND_STATE/cainjector.log" 2>&1 &
	echo $! >"$KIND_STATE/cainjector.pid"
	log "cert-manager's CA injector running (PID $!, log $KIND_STATE/cainjector.log)"
}

cert_manager_overlay() {
	make --no-print-directory deploy OVERLAY=config/e2e IMG=leaseguard:e2e KUBECTL="$KUBECTL" KUBECONFIG="$KIND_KUBECONFIG" || return 1
	"$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" -n leaseguard-system rollout status deployment/leaseguard --timeout=3m || return 1
	# The CA injector has put the Secret's CA into both configurations.
	local cfg
	for cfg in validatingwebhookconfiguration/leaseguard-validating-webhook-configuration mutatingwebhookconfiguration/leaseguard-mutating-webhook-configuration; do
		for _ in $(seq 1 60); do
			[ -n "$("$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" get "$cfg" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null)" ] && continue 2
			sleep 1
		done
		echo "kind: no caBundle injected into $cfg after 60 s (log: $KIND_STATE/cainjector.log)" >&2
		return 1
	done
}

# load_images: leaseguard:e2e into the nodes, and the same image as
# leaseguard:e2e-next, the "new image" the faults' helm upgrade rolls to
# (CLUSTER_NEXT_IMAGE_TAG): a new tag is what an upgrade changes in the
# Deployment, whatever the image holds.
load_images() {
	docker tag leaseguard:e2e leaseguard:e2e-next || return 1
	"$kind_bin" load docker-image leaseguard:e2e leaseguard:e2e-next --name "$KIND_CLUSTER"
}

# build_image: leaseguard:e2e as the project ships it: `make image-tar`
# (hack/image: no Dockerfile, no engine, nothing pulled; the host
# platform's image of `make image`'s index), loaded into the engine for
# kind. The previous run's image of that tag is removed first, so runs do
# not pile up untagged images in the engine's cache.
build_image() {
	docker image rm leaseguard:e2e >/dev/null 2>&1
	make --no-print-directory image-tar IMAGE_TAR_TAG=leaseguard:e2e || return 1
	docker load -i dist/image/leaseguard-docker.tar
}

# build_kcc_image: kcc-workload:e2e, the namespace-mode workload on the
# real lock (test/multicluster/cmd/kcc: the managers, the MultiClusterLease
# controller, the GCS emulator) as one static binary in one layer, as the
# node image's own images are made; nothing pulled.
build_kcc_image() {
	local dir=$KIND_STATE/kcc-image
	rm -rf "$dir" && mkdir -p "$dir" || return 1
	CGO_ENABLED=0 go -C test/multicluster build -trimpath -ldflags "-s -w" -o "$dir/kcc" ./cmd/kcc || return 1
	docker image rm "$kcc_image" >/dev/null 2>&1
	tar -C "$dir" --numeric-owner --owner=0 --group=0 -c kcc |
		docker import --change 'ENTRYPOINT ["/kcc"]' --change 'USER 65532:65532' - "$kcc_image" >/dev/null || return 1
	"$kind_bin" load docker-image "$kcc_image" --name "$KIND_CLUSTER"
}

# second_cluster_up: the second cluster, with leaseguard installed by the
# same chart and policy, the MultiClusterLease CRD and the workload's image:
# a second Config Connector installation that contends for the same global
# lock through the first cluster's GCS emulator.
second_cluster_up() {
	second_cluster up || return 1
	"$kind_bin" load docker-image leaseguard:e2e "$kcc_image" --name "$second" || return 1
	multiclusterlease_crd "$second_kubeconfig" || return 1
	helm_install "$second_kubeconfig"
}

run_stages() {
	# The harness's own tests first (the fault report's classification, the
	# target's environment); the cluster tests themselves skip there and run below.
	stage harness-unit-tests env -u CLUSTER_KUBECONFIG go -C test/cluster test -count=1 -race ./... || return 1
	stage kubernetes-binaries hack/controlplane.sh "$CONTROLPLANE_DIR" || return 1
	stage docker hack/kind/docker.sh up || return 1
	eval "$(hack/kind/docker.sh env)"
	stage cluster-up hack/kind/cluster.sh up || return 1
	stage image build_image || return 1
	stage image-load load_images || return 1
	stage helm-build make --no-print-directory helm || return 1
	[ -n "${KIND_CERT_MANAGER_MANIFEST:-}" ] || { stage cert-manager-crds cert_manager_crds || return 1; }
	stage multiclusterlease-crd multiclusterlease_crd || return 1
	stage deploy helm_install || return 1
	stage e2e e2e_suite || return 1
	# Config Connector's namespace mode on the real lock, as Pods, beside the
	# same workload unguarded.
	stage kcc-image build_kcc_image || return 1
	stage namespace-mode env -C test/cluster "${cluster_env[@]}" CLUSTER_KCC_KEEP=1 NAMESPACEMODE_REPORT="$kind_root/bin/kind/namespacemode-report.md" \
		go test -count=1 -race -timeout 10m -v ./namespacemode/ || return 1
	# The fault tests under real lease traffic, then what operators do next:
	# helm upgrade (an edited policy, 3 replicas) and helm uninstall, which
	# must leave nothing that holds up a write.
	stage faults env -C test/cluster "${cluster_env[@]}" FAULTS_REPORT="$report" HELM="$kind_root/bin/helm" \
		LEASEGUARD_CHART_ARGS="${chart_args[*]}" CLUSTER_NEXT_IMAGE_TAG=e2e-next \
		go test -count=1 -race -timeout 20m -v ./faults/ || return 1
	# Two Config Connector installations, one per cluster, sharing the
	# global lock: exactly one active, and failover when the active one's
	# managers all stop, guarded and unguarded side by side.
	stage second-cluster-up second_cluster_up || return 1
	stage two-clusters env -C test/cluster "${cluster_env[@]}" CLUSTER_B_KUBECONFIG="$second_kubeconfig" \
		TWOCLUSTERS_REPORT="$kind_root/bin/kind/twoclusters-report.md" go test -count=1 -race -timeout 15m -v ./twoclusters/ || return 1
	stage second-cluster-down second_cluster down || return 1
	stage helm-upgrade-uninstall env -C test/cluster "${cluster_env[@]}" HELM="$kind_root/bin/helm" \
		LEASEGUARD_CHART_ARGS="${chart_args[*]}" go test -count=1 -race -timeout 10m -v ./chartinstall/ || return 1
	# Then the kustomize install with cert-manager (config/e2e), and the
	# suite again.
	stage cert-manager cert_manager || return 1
	stage deploy-cert-manager cert_manager_overlay || return 1
	stage e2e-cert-manager e2e_suite || return 1
}
run_stages || overall=1
