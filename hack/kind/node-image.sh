#!/usr/bin/env bash
# Builds the kind node image this project tests on where no registry can be
# reached, and prints its name. `kind build node-image` cannot work offline
# (it pulls its base image and the control-plane images), so this assembles
# the same thing from parts that can be had here:
#
#   - a Debian bookworm root filesystem (debootstrap, from the machine's own
#     apt sources) with systemd, containerd, runc and the CNI plugins; bookworm,
#     because trixie's systemd refuses a cgroup v1 host;
#   - kind's base files (entrypoint, systemd units, sysctls) from the
#     sigs.k8s.io/kind module, as kind's base image installs them;
#   - kubeadm, kubelet and kubectl, built from the k8s.io/kubernetes module
#     test/tools pins (hack/controlplane.sh --kind), and crictl;
#   - the images kubeadm runs (kube-apiserver, kube-controller-manager,
#     kube-scheduler, etcd, kube-proxy, CoreDNS, pause), each one layer made
#     with `docker import` from the same builds, under the names kubeadm
#     expects, imported into containerd at boot (node/import-images.service);
#     CoreDNS from hack/kind/coredns, with only the plugins kubeadm's
#     Corefile uses.
#
# The image is named leaseguard-kind-node:<Kubernetes version>-<hash of its
# inputs>; an engine that has it already is not asked again. First build
# about 15 minutes on a cold Go cache, then seconds.
#
# Usage: hack/kind/node-image.sh   (needs root for debootstrap and an engine: hack/kind/docker.sh up)
set -euo pipefail
# shellcheck source=hack/kind/lib.sh
. "$(dirname "$0")/lib.sh"

here=$kind_root/hack/kind
inputs_hash=$(cat "$here/node-image.sh" "$here"/node/* "$here"/coredns/* "$kind_root/test/tools/go.sum" | sha256sum | cut -c1-12)
image=leaseguard-kind-node:$k8s_version-$inputs_hash
if docker image inspect "$image" >/dev/null 2>&1; then
	log "node image $image is in the engine already" >&2
	echo "$image"
	exit 0
fi
log "building node image $image" >&2
# Earlier builds of this image (other inputs) are of no more use.
docker images --format '{{.Repository}}:{{.Tag}}' leaseguard-kind-node | xargs -r docker rmi >/dev/null 2>&1
exec 3>&1 1>&2 # progress to stderr; only the image's name to stdout

# 1. The root filesystem, kept across builds (it depends on nothing here).
rootfs=$KIND_CACHE/rootfs-bookworm
packages=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod
packages+=,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,e2fsprogs,containerd,runc,containernetworking-plugins
if [ ! -f "$rootfs/.complete" ]; then
	command -v debootstrap >/dev/null || apt_install debootstrap
	# The mirror this machine's apt uses (a deb822 URIs line or a one-line entry).
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list{,.d}: debootstrap needs one"
	log "debootstrap bookworm into $rootfs (about 2 minutes)"
	rm -rf "$rootfs.tmp"
	debootstrap --variant=minbase --include="$packages" bookworm "$rootfs.tmp" "$mirror" >"$KIND_CACHE/debootstrap.log" 2>&1 ||
		{ tail -5 "$KIND_CACHE/debootstrap.log"; die "debootstrap failed (log: $KIND_CACHE/debootstrap.log)"; }
	rm -rf "$rootfs" && mv "$rootfs.tmp" "$rootfs" && touch "$rootfs/.complete"
fi

# 2. The binaries.
"$kind_root/hack/controlplane.sh" "$CONTROLPLANE_DIR" --kind
k8s=$CONTROLPLANE_DIR
kubeadm_images=$("$k8s/kubeadm" config images list --kubernetes-version "$k8s_version" 2>/dev/null)
ref() { grep -m1 "/$1:" <<<"$kubeadm_images"; } # kubeadm's name for an image
coredns_ref=$(ref coredns) pause_ref=$(ref pause) etcd_ref=$(ref etcd)
go_tool crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
# CoreDNS with the plugins kubeadm's Corefile uses (hack/kind/coredns), at
# the version kubeadm deploys.
coredns_pinned=$(awk '$1 == "github.com/coredns/coredns" {print $2; exit}' "$here/coredns/go.mod")
[ "$coredns_pinned" = "${coredns_ref##*:}" ] ||
	die "kubeadm $k8s_version deploys CoreDNS ${coredns_ref##*:}, hack/kind/coredns/go.mod pins $coredns_pinned: pin the same (go get github.com/coredns/coredns@${coredns_ref##*:})"
(cd "$here/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$KIND_CACHE/tools/coredns" .)
(cd "$kind_root/test/cluster" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$KIND_CACHE/tools/pause" ./pause)

# 3. The images kubeadm runs: one layer each, imported into the engine and
# saved as archives for the node to import at boot.
build=$KIND_CACHE/build
rm -rf "$build" && mkdir -p "$build/images"
path_env='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
one_layer() { # NAME REF DIR [--change ...]: the image REF from DIR, saved as images/NAME.tar
	local name=$1 ref=$2 dir=$3
	shift 3
	tar -C "$dir" --numeric-owner -c . | docker import "$@" - "$ref" >/dev/null
	docker save -o "$build/images/$name.tar" "$ref" && docker rmi "$ref" >/dev/null
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
	mkdir -p "$build/$c/usr/local/bin" && cp "$k8s/$c" "$build/$c/usr/local/bin/"
	one_layer "$c" "$(ref "$c")" "$build/$c" --change "$path_env"
done
mkdir -p "$build/etcd/usr/local/bin" "$build/etcd/var/lib/etcd" "$build/etcd/tmp" && cp "$k8s/etcd" "$build/etcd/usr/local/bin/"
one_layer etcd "$etcd_ref" "$build/etcd" --change "$path_env"
mkdir -p "$build/coredns" && cp "$KIND_CACHE/tools/coredns" "$build/coredns/"
one_layer coredns "$coredns_ref" "$build/coredns" --change 'ENTRYPOINT ["/coredns"]'
mkdir -p "$build/pause" && cp "$KIND_CACHE/tools/pause" "$build/pause/"
one_layer pause "$pause_ref" "$build/pause" --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535'
# kube-proxy programs the node's iptables: its image carries iptables (nft and
# legacy), nft and conntrack with their libraries, from the node's rootfs.
kp=$build/kube-proxy
mkdir -p "$kp/usr/local/bin" "$kp/usr/sbin" "$kp/tmp" "$kp/run" "$kp/var/lib" "$kp/etc/alternatives"
ln -s usr/lib "$kp/lib" && ln -s usr/lib64 "$kp/lib64" && mkdir -p "$kp/usr/lib" "$kp/usr/lib64"
cp "$k8s/kube-proxy" "$kp/usr/local/bin/"
programs="/usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/sbin/conntrack /usr/sbin/nft"
for p in $programs; do cp -a "$rootfs$p" "$kp$p"; done
for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	ln -sf xtables-nft-multi "$kp/usr/sbin/$n" # kind's kube-proxy picks nft, as the nodes do
	ln -sf xtables-nft-multi "$kp/usr/sbin/${n/tables/tables-nft}"
	ln -sf xtables-legacy-multi "$kp/usr/sbin/${n/tables/tables-legacy}"
done
mkdir -p "$kp/usr/lib/x86_64-linux-gnu" && cp -a "$rootfs/usr/lib/x86_64-linux-gnu/xtables" "$kp/usr/lib/x86_64-linux-gnu/xtables"
# shellcheck disable=SC2016,SC2086
for lib in $(chroot "$rootfs" sh -c 'ldd '"$programs"' /usr/lib/x86_64-linux-gnu/xtables/*.so' | grep -v ':$' | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
	[ -e "$kp$lib" ] || { mkdir -p "$kp$(dirname "$lib")" && cp -aL "$rootfs$lib" "$kp$lib"; }
done
cp -a "$rootfs/etc/ethertypes" "$rootfs/etc/protocols" "$rootfs/etc/services" "$kp/etc/" 2>/dev/null || true
one_layer kube-proxy "$(ref kube-proxy)" "$kp" --change "$path_env"

# 4. The node: kind's base image steps (images/base/Dockerfile) on the rootfs.
kindsrc=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
base=$kindsrc/images/base/files
node=$build/node
cp -a "$rootfs" "$node" && rm -f "$node/.complete"
install -m0755 "$base"/usr/local/bin/* "$node/usr/local/bin/"
mkdir -p "$node/kind/bin" && install -m0755 "$base"/kind/bin/* "$node/kind/bin/"
install -m0644 "$base/etc/crictl.yaml" "$node/etc/"
mkdir -p "$node/etc/containerd" && sed "s|@PAUSE_IMAGE@|$pause_ref|" "$here/node/containerd-config.toml" >"$node/etc/containerd/config.toml"
install -m0644 "$base/etc/default/kubelet" "$node/etc/default/"
mkdir -p "$node/etc/sysctl.d" && install -m0644 "$base"/etc/sysctl.d/* "$node/etc/sysctl.d/"
for unit in kubelet.slice undo-mount-hacks.service kubelet.service containerd.service; do
	install -m0644 "$base/etc/systemd/system/$unit" "$node/etc/systemd/system/"
done
mkdir -p "$node/etc/systemd/system/kubelet.service.d" && install -m0644 "$base"/etc/systemd/system/kubelet.service.d/* "$node/etc/systemd/system/kubelet.service.d/"
ln -sf /usr/bin/containerd "$node/usr/local/bin/containerd" # kind's unit runs /usr/local/bin/containerd
# As kind's base image: no services that make no sense in a node container.
find "$node/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$node"/lib/systemd/system/multi-user.target.wants/* "$node"/etc/systemd/system/*.wants/* \
	"$node"/lib/systemd/system/local-fs.target.wants/* "$node"/lib/systemd/system/sockets.target.wants/*udev* \
	"$node"/lib/systemd/system/sockets.target.wants/*initctl* "$node"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$node/etc/systemd/journald.conf"
install -m0644 "$here/node/import-images.service" "$node/etc/systemd/system/leaseguard-import-images.service"
chroot "$node" systemctl enable kubelet.service containerd.service undo-mount-hacks.service leaseguard-import-images.service
chroot "$node" systemctl mask systemd-binfmt.service
mkdir -p "$node/etc/kubernetes/manifests"
chroot "$node" ctr oci spec |
	jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"} | del(.process.rlimits)' \
		>"$node/etc/containerd/cri-base.json"
mkdir -p "$node/opt/cni/bin" "$node/etc/cni/net.d"
cp -a "$node"/usr/lib/cni/{bridge,host-local,loopback,portmap,ptp} "$node/opt/cni/bin/"
install -m0755 "$k8s/kubeadm" "$k8s/kubelet" "$k8s/kubectl" "$node/usr/bin/"
install -m0755 "$KIND_CACHE/tools/crictl" "$node/usr/local/bin/"
printf '%s' "$k8s_version" >"$node/kind/version"
mkdir -p "$node/kind/images" && cp "$build"/images/*.tar "$node/kind/images/"
rm -rf "$node"/var/cache/apt/archives/*.deb "$node"/var/lib/apt/lists/* "$node/usr/share/doc" "$node/usr/share/man"
: >"$node/etc/machine-id"
tar -C "$node" --numeric-owner -c . | docker import \
	--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'ENV container=docker' - "$image-rootfs" >/dev/null
# systemd shuts down on SIGRTMIN+3 (kind's base image says so too); `docker
# import` cannot set a stop signal, a build step from the imported image can.
printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$image-rootfs" | DOCKER_BUILDKIT=0 docker build -q -t "$image" - >/dev/null
docker rmi "$image-rootfs" >/dev/null
rm -rf "$build"
log "built $image ($(docker image inspect -f '{{.Size}}' "$image" | numfmt --to=iec))"
echo "$image" >&3
