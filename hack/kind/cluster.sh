#!/usr/bin/env bash
# A kind cluster of one control-plane and two worker nodes, for leaseguard's
# e2e, Helm and fault tests, on the node image of $KIND_NODE_IMAGE or, where
# none is given, the project's own offline one (hack/kind/node-image.sh).
#
# The API server presents a client certificate to every webhook it calls (an
# AdmissionConfiguration, as docs/operations.md tells administrators), signed
# by a CA of the run's own: leaseguard is installed to hear only it
# ($KIND_STATE/admission/ca.crt, name kube-apiserver-admission).
#
# On the offline image there is no kindnetd (its source is not in the kind
# module): each node gets a bridge CNI configuration for the pod CIDR the
# controller manager gave it, and a route to every other node's pod CIDR,
# which `network` re-applies after a node restarts (kindnetd's job, done from
# the outside).
#
# The host gets a route to every node's pod CIDR (through the kind network's
# bridge, gone with it), so tests on the host reach the pods, as on a node.
#
# Usage: hack/kind/cluster.sh up | network | restart-apiserver | down
set -uo pipefail
# shellcheck source=hack/kind/lib.sh
. "$(dirname "$0")/lib.sh"

admission=$KIND_STATE/admission
admission_in_node=/etc/kubernetes/leaseguard-admission

kubectl_kind() { "$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" "$@"; }

# admission_identity: the CA, the API server's client certificate for
# webhooks, its kubeconfig (user "*": every webhook) and the
# AdmissionConfiguration naming it, as the node will see them; and a
# certificate of another name from the same CA (kubelet-client), which
# leaseguard must refuse (the fault tests' CLUSTER_PKI).
admission_identity() {
	rm -rf "$admission" && mkdir -p "$admission" && (
		cd "$admission" || exit 1
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=leaseguard-kind-admission-ca \
			-keyout ca.key -out ca.crt 2>/dev/null || exit 1
		for client in apiserver-admission-client:/CN=kube-apiserver-admission kubelet-client:/O=system:nodes/CN=system:node:intruder; do
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "${client#*:}" \
				-keyout "${client%%:*}.key" -out "${client%%:*}.csr" 2>/dev/null &&
				openssl x509 -req -in "${client%%:*}.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
					-extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n') -out "${client%%:*}.crt" 2>/dev/null || exit 1
		done
	) || return 1
	chmod 0644 "$admission"/*
	cat >"$admission/kubeconfig" <<-KC
		apiVersion: v1
		kind: Config
		users:
		- name: "*"
		  user:
		    client-certificate: $admission_in_node/apiserver-admission-client.crt
		    client-key: $admission_in_node/apiserver-admission-client.key
	KC
	{
		echo "apiVersion: apiserver.config.k8s.io/v1"
		echo "kind: AdmissionConfiguration"
		echo "plugins:"
		for plugin in ValidatingAdmissionWebhook MutatingAdmissionWebhook; do
			printf -- '- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n' "$plugin"
			printf '    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s/kubeconfig\n' "$admission_in_node"
		done
	} >"$admission/admission.yaml"
}

# config OFFLINE: the kind configuration.
config() {
	local offline=$1
	cat <<-CFG
		kind: Cluster
		apiVersion: kind.x-k8s.io/v1alpha4
		networking:
		  disableDefaultCNI: $offline
		nodes:
		- role: control-plane
		  extraMounts:
		  - hostPath: $admission
		    containerPath: $admission_in_node
		    readOnly: true
		- role: worker
		- role: worker
		kubeadmConfigPatches:
		- |
		  kind: ClusterConfiguration
		  apiServer:
		    extraArgs:
		    - name: admission-control-config-file
		      value: $admission_in_node/admission.yaml
		    # On SIGTERM, close watches after 5 s instead of waiting a minute
		    # for them (docs/reliability.md), as behind a load balancer.
		    - name: shutdown-watch-termination-grace-period
		      value: 5s
		    extraVolumes:
		    - name: leaseguard-admission
		      hostPath: $admission_in_node
		      mountPath: $admission_in_node
		      readOnly: true
		      pathType: Directory
	CFG
	# A cgroup v1 host: the kubelet runs there only when told so.
	if cgroup_v1; then
		cat <<-CFG
			- |
			  kind: KubeletConfiguration
			  failCgroupV1: false
		CFG
	fi
}

# network [OFFLINE]: the host's routes to the nodes' pod CIDRs; on the
# offline image also each node's CNI configuration for its pod CIDR and its
# routes to the other nodes' pod CIDRs.
network() {
	local offline=${1:-true} nodes node other cidr ip
	nodes=$("$kind_bin" get nodes --name "$KIND_CLUSTER") || return 1
	declare -A cidr_of ip_of
	for node in $nodes; do
		for _ in $(seq 1 60); do
			cidr=$(kubectl_kind get node "$node" -o jsonpath='{.spec.podCIDR}' 2>/dev/null)
			[ -n "$cidr" ] && break
			sleep 1
		done
		[ -n "$cidr" ] || die "node $node has no pod CIDR after 60s"
		ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$node") || return 1
		cidr_of[$node]=$cidr ip_of[$node]=$ip
	done
	for node in $nodes; do
		ip route replace "${cidr_of[$node]}" via "${ip_of[$node]}" || return 1
		[ "$offline" = true ] || continue
		docker exec -i "$node" sh -c 'cat >/etc/cni/net.d/10-leaseguard-bridge.conflist' <<-CNI || return 1
			{
			  "cniVersion": "1.0.0",
			  "name": "leaseguard-bridge",
			  "plugins": [
			    {
			      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
			      "ipam": {"type": "host-local", "ranges": [[{"subnet": "${cidr_of[$node]}"}]], "routes": [{"dst": "0.0.0.0/0"}]}
			    },
			    {"type": "portmap", "capabilities": {"portMappings": true}}
			  ]
			}
		CNI
		for other in $nodes; do
			[ "$other" = "$node" ] && continue
			docker exec "$node" ip route replace "${cidr_of[$other]}" via "${ip_of[$other]}" || return 1
		done
		log "network: $node ${ip_of[$node]} pods ${cidr_of[$node]}"
	done
}

up() {
	kind_tool || return 1
	local image=${KIND_NODE_IMAGE:-} offline=false
	if [ -z "$image" ]; then
		image=$("$kind_root/hack/kind/node-image.sh") || return 1
		offline=true
	fi
	admission_identity || die "could not make the API server's admission client certificate"
	config "$offline" >"$KIND_STATE/kind-config.yaml"
	"$kind_bin" delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1
	log "creating cluster $KIND_CLUSTER from $image (1 control plane, 2 workers)"
	"$kind_bin" create cluster --name "$KIND_CLUSTER" --image "$image" --config "$KIND_STATE/kind-config.yaml" \
		--kubeconfig "$KIND_KUBECONFIG" --retain || {
		"$kind_bin" export logs "$KIND_STATE/logs" --name "$KIND_CLUSTER" >/dev/null 2>&1
		die "kind create cluster failed (node logs: $KIND_STATE/logs)"
	}
	network "$offline" || return 1
	kubectl_kind wait --for=condition=Ready nodes --all --timeout=180s || return 1
	kubectl_kind -n kube-system rollout status deployment/coredns --timeout=180s || return 1
	log "cluster $KIND_CLUSTER ready (kubeconfig $KIND_KUBECONFIG)"
}

# restart_apiserver: SIGTERM to the control plane's kube-apiserver (it drains
# as in a rolling control-plane upgrade); the kubelet starts it again (a
# static pod); returns once /readyz answers ok.
restart_apiserver() {
	local node=$KIND_CLUSTER-control-plane
	docker exec "$node" sh -c 'kill -TERM $(pgrep -x kube-apiserver)' || return 1
	for _ in $(seq 1 300); do
		kubectl_kind get --raw /readyz >/dev/null 2>&1 || break
		sleep 0.1
	done
	for _ in $(seq 1 240); do
		kubectl_kind get --raw /readyz >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	die "kube-apiserver not ready again within 2 minutes"
}

down() {
	[ -x "$kind_bin" ] || return 0
	"$kind_bin" delete cluster --name "$KIND_CLUSTER" --kubeconfig "$KIND_KUBECONFIG" || return 1
	rm -rf "$admission" "$KIND_KUBECONFIG"
}

mkdir -p "$KIND_STATE"
case "${1:-}" in
up) up ;;
network) network "$([ -n "${KIND_NODE_IMAGE:-}" ] && echo false || echo true)" ;;
restart-apiserver) restart_apiserver ;;
down) down ;;
*)
	echo "usage: hack/kind/cluster.sh up | network | restart-apiserver | down" >&2
	exit 2
	;;
esac
