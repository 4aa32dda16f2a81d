# shellcheck shell=bash
# Shared settings of the kind scripts (sourced, never run).
#
# Where things live:
#   KIND_CACHE  ${XDG_CACHE_HOME:-~/.cache}/leaseguard/kind: what is built once
#               and kept (the node image's parts, the tools, the Docker engine's
#               images when this project runs it). Shared by every checkout on
#               the machine, as Go's build cache is, so a fresh clone finds the
#               node image built before; the image's tag is a hash of its
#               inputs, so a checkout that changes them builds its own.
#   KIND_STATE  ${TMPDIR:-/tmp}/leaseguard-kind: what one run starts and the
#               teardown removes (the engine's socket, PID file and logs).
# Environment a user may set:
#   KIND_NODE_IMAGE  a node image to use as is (e.g. a stock kindest/node where a
#                    registry is reachable); unset here: the project's own offline one.
#   DOCKER_HOST      an engine to use; unset and none answering at the default
#                    socket: hack/kind/docker.sh starts one of the project's own.

kind_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIND_CACHE=${KIND_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/leaseguard/kind}
KIND_STATE=${KIND_STATE:-${TMPDIR:-/tmp}/leaseguard-kind}
KIND_CLUSTER=${KIND_CLUSTER:-leaseguard-e2e}
# Pinned: the versions the node image and the scripts were written for.
KIND_VERSION=v0.33.0
CRICTL_VERSION=v1.37.0
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$kind_root/test/tools/go.mod")
CONTROLPLANE_DIR=${CONTROLPLANE_DIR:-$kind_root/bin/controlplane/$k8s_version}
KUBECTL=${KUBECTL:-$CONTROLPLANE_DIR/kubectl}
kind_bin=$KIND_CACHE/tools/kind
KIND_KUBECONFIG=$KIND_STATE/$KIND_CLUSTER.kubeconfig

# The engine this project starts listens on its own socket, so a user's
# engine (if any) is never touched.
own_docker_host=unix://$KIND_STATE/docker.sock
if [ -z "${DOCKER_HOST:-}" ] && [ -S "$KIND_STATE/docker.sock" ]; then
	export DOCKER_HOST=$own_docker_host
fi

log() { echo "kind: $*"; }
die() {
	echo "kind: $*" >&2
	exit 1
}

# go_tool NAME MODULE@VERSION: a pinned Go tool, built once into the cache.
go_tool() {
	local name=$1 pkg=$2
	if [ ! -x "$KIND_CACHE/tools/$name" ]; then
		log "building $pkg (first run only)"
		mkdir -p "$KIND_CACHE/tools"
		GOBIN=$KIND_CACHE/tools CGO_ENABLED=0 go install "$pkg" || return 1
	fi
}

# apt_install PACKAGE...: Debian packages the kind stage needs, refreshing
# apt's lists once when they are missing or stale.
apt_install() {
	command -v apt-get >/dev/null || die "missing $*, and no apt-get to install them"
	log "installing $* with apt-get"
	mkdir -p "$KIND_STATE"
	apt-get install -y -q --no-install-recommends "$@" >"$KIND_STATE/apt.log" 2>&1 && return 0
	apt-get update -q >>"$KIND_STATE/apt.log" 2>&1 &&
		apt-get install -y -q --no-install-recommends "$@" >>"$KIND_STATE/apt.log" 2>&1 && return 0
	tail -5 "$KIND_STATE/apt.log" >&2
	die "apt-get install $* failed (log: $KIND_STATE/apt.log)"
}

kind_tool() { go_tool kind "sigs.k8s.io/kind@$KIND_VERSION"; }

# cgroup_v1: whether the host runs cgroup v1 (or hybrid), where the kubelet
# must be told failCgroupV1: false.
cgroup_v1() { [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; }
