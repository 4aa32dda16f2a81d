#!/usr/bin/env bash
# A kind cluster of one control-plane and two worker nodes, for leaseguard's
# e2e, Helm and fault tests, on the node image of $KIND_NODE_IMAGE or, where
# none is given, the project's own offline one (hack/kind/node-image.sh).
#
# The two-cluster stage adds a second cluster beside it, of one node, with
#   KIND_CLUSTER=<its name> KIND_WORKERS=0 KIND_POD_SUBNET=<a CIDR of its own>
#   KIND_SHARE_ADMISSION=1
# (its pods must not share the first cluster's CIDR: the host routes to both;
# it shares the first cluster's admission CA and client certificate, which
# its `up` keeps and its `down` leaves to the first cluster's).
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
# The fault tests' node faults (test/cluster/faults, CLUSTER_NODE_FAULT):
#   node-kill NODE         the node's container killed (SIGKILL: a power loss;
#                          its pods are neither stopped nor deleted)
#   node-start NODE        started again, its network re-applied, Ready again
#   partition NODE POD_IP [PORT]
#                          inside NODE, traffic between the pod and the
#                          control-plane node dropped both ways (the kubelet,
#                          on the node's own address, still reaches the API
#                          server and still probes the pod: it stays Ready);
#                          with PORT, checked from the control-plane node
#   heal NODE POD_IP [PORT]  those rules removed (and the port checked again)
#
# Usage: hack/kind/cluster.sh up | network | restart-apiserver | down
#        hack/kind/cluster.sh node-kill|node-start NODE | partition|heal NODE POD_IP [PORT]
set -uo pipefail
# shellcheck source=hack/kind/lib.sh
. "$(dirname "$0")/lib.sh"

admission=$KIND_STATE/admission
admission_in_node=/etc/kubernetes/leaseguard-admission
workers=${KIND_WORKERS:-2}
pod_subnet=${KIND_POD_SUBNET:-}
share_admission=${KIND_SHARE_ADMISSION:-}

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
		${pod_subnet:+  podSubnet: $pod_subnet}
		# kube-controller-manager and kube-scheduler elect through
		# LeaseCandidates and the API server's election controller (KEP-4355,
		# beta and off by default): the faults show leaseguard never delays or
		# refuses their elections (docs/reliability.md).
		featureGates:
		  CoordinatedLeaderElection: true
		runtimeConfig:
		  coordination.k8s.io/v1beta1: "true"
		nodes:
		- role: control-plane
		  extraMounts:
		  - hostPath: $admission
		    containerPath: $admission_in_node
		    readOnly: true
	CFG
	local i
	for ((i = 0; i < workers; i++)); do
		echo "- role: worker"
	done
	cat <<-CFG
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
	# The kubelet refreshes mounted ConfigMaps every 10 s instead of every
	# minute (syncFrequency), so that a policy edit reaches the replicas in
	# seconds and the fault and Helm tests do not wait a minute for each;
	# docs/reliability.md gives what the default costs. A cgroup v1 host: the
	# kubelet runs there only when told so.
	cat <<-CFG
		- |
		  kind: KubeletConfiguration
		  syncFrequency: 10s
	CFG
	if cgroup_v1; then
		echo "  failCgroupV1: false"
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
		ip=$(node_ip "$node") || return 1
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
	if [ -n "$share_admission" ]; then
		[ -f "$admission/ca.crt" ] || die "KIND_SHARE_ADMISSION: no admission identity in $admission to share (bring the first cluster up first)"
	else
		admission_identity || die "could not make the API server's admission client certificate"
	fi
	config "$offline" >"$KIND_STATE/$KIND_CLUSTER-config.yaml"
	"$kind_bin" delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1
	log "creating cluster $KIND_CLUSTER from $image (1 control plane, $workers workers${pod_subnet:+, pods $pod_subnet})"
	"$kind_bin" create cluster --name "$KIND_CLUSTER" --image "$image" --config "$KIND_STATE/$KIND_CLUSTER-config.yaml" \
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

node_ip() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }

node_kill() {
	local node=${1:?node-kill NODE}
	docker kill "$node" >/dev/null || return 1
	log "node $node killed"
}

node_start() {
	local node=${1:?node-start NODE}
	docker start "$node" >/dev/null || return 1
	# The node's routes and CNI configuration lived in its network namespace
	# (and its address may have changed): re-applied on every node.
	network "$([ -n "${KIND_NODE_IMAGE:-}" ] && echo false || echo true)" >/dev/null || return 1
	kubectl_kind wait --for=condition=Ready "node/$node" --timeout=180s >/dev/null || return 1
	log "node $node started and Ready"
}

# partition_rules ACTION NODE POD_IP: add (-I) or delete (-D) the two rules.
partition_rules() {
	local action=$1 node=${2:?partition NODE POD_IP} pod=${3:?partition NODE POD_IP} cp
	cp=$(node_ip "$KIND_CLUSTER-control-plane") || return 1
	[ -n "$cp" ] || die "no address for $KIND_CLUSTER-control-plane"
	docker exec "$node" iptables "$action" FORWARD -s "$pod" -d "$cp" -m comment --comment leaseguard-partition -j DROP &&
		docker exec "$node" iptables "$action" FORWARD -s "$cp" -d "$pod" -m comment --comment leaseguard-partition -j DROP
}

# reachable POD_IP PORT: whether the control-plane node (where the API
# server runs) opens a TCP connection to the pod within 2 s.
reachable() {
	docker exec "$KIND_CLUSTER-control-plane" timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

partition() {
	partition_rules -I "$1" "$2" || return 1
	if [ -n "${3:-}" ] && reachable "$2" "$3"; then
		partition_rules -D "$1" "$2"
		die "partition: the control-plane node still reaches $2:$3"
	fi
	log "partition: $2 cut off from the control plane inside $1${3:+ (checked: $2:$3 unreachable from it)}"
}

heal() {
	partition_rules -D "$1" "$2" || return 1
	if [ -n "${3:-}" ] && ! reachable "$2" "$3"; then
		die "heal: the control-plane node still cannot reach $2:$3"
	fi
	log "partition healed: $2 on $1${3:+ (checked: $2:$3 reachable again)}"
}

down() {
	[ -x "$kind_bin" ] || return 0
	"$kind_bin" delete cluster --name "$KIND_CLUSTER" --kubeconfig "$KIND_KUBECONFIG" || return 1
	[ -n "$share_admission" ] || rm -rf "$admission"
	rm -f "$KIND_KUBECONFIG" "$KIND_STATE/$KIND_CLUSTER-config.yaml"
}

mkdir -p "$KIND_STATE"
case "${1:-}" in
up) up ;;
network) network "$([ -n "${KIND_NODE_IMAGE:-}" ] && echo false || echo true)" ;;
restart-apiserver) restart_apiserver ;;
node-kill) node_kill "${@:2}" ;;
node-start) node_start "${@:2}" ;;
partition) partition "${@:2}" ;;
heal) heal "${@:2}" ;;
down) down ;;
*)
	echo "usage: hack/kind/cluster.sh up | network | restart-apiserver | down | node-kill|node-start NODE | partition|heal NODE POD_IP [PORT]" >&2
	exit 2
	;;
esac
