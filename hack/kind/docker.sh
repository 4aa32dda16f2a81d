#!/usr/bin/env bash
# The Docker engine kind needs. Uses the engine of $DOCKER_HOST or the default
# socket when one answers; otherwise starts one of the project's own (Debian's
# Docker engine package, installed with apt-get when missing) on its own socket, with its
# images under $KIND_CACHE/docker, and `down` stops it by its PID and removes what
# it added to the host: its iptables chains and rules, its network
# interfaces, its mounts, and the FORWARD policy it may have changed.
#
# Usage: hack/kind/docker.sh up | down | env
#   env prints the DOCKER_HOST line to eval when the engine is the project's.
set -uo pipefail
# shellcheck source=hack/kind/lib.sh
. "$(dirname "$0")/lib.sh"

pidfile=$KIND_STATE/dockerd.pid

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

up() {
	mkdir -p "$KIND_STATE"
	if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		export DOCKER_HOST=$own_docker_host
		engine_answers && { log "the project's engine is up (pid $(cat "$pidfile"))"; return 0; }
	fi
	if [ "${DOCKER_HOST:-}" != "$own_docker_host" ] && engine_answers; then
		log "using the Docker engine at ${DOCKER_HOST:-the default socket}"
		return 0
	fi
	[ "$(id -u)" = 0 ] || die "no Docker engine answers and starting one needs root"
	# Debian's engine package, named by apt's pattern (the package's name is a
	# registry's host name too).
	local need_pkgs=()
	command -v dockerd >/dev/null && command -v docker >/dev/null || need_pkgs+=('^docker\.io$')
	command -v jq >/dev/null || need_pkgs+=(jq)
	if [ ${#need_pkgs[@]} -gt 0 ]; then apt_install "${need_pkgs[@]}"; fi
	# What the teardown restores: the engine turns IP forwarding on and may
	# set the FORWARD policy to DROP when it does.
	cat /proc/sys/net/ipv4/ip_forward >"$KIND_STATE/ip_forward.before"
	iptables -w 5 -S FORWARD | awk '$1 == "-P" {print $3}' >"$KIND_STATE/forward-policy.before"
	local runtime=()
	# CAP_SYS_RESOURCE is capability 24.
	if ! (($(printf '%d' "0x$(awk '/^CapBnd/ {print $2}' /proc/self/status)") & (1 << 24))); then
		log "root lacks CAP_SYS_RESOURCE: privileged containers run through hack/kind/runc-nosysres"
		runtime=(--add-runtime "runc-nosysres=$kind_root/hack/kind/runc-nosysres" --default-runtime runc-nosysres)
	fi
	mkdir -p "$KIND_CACHE/docker"
	log "starting dockerd (data in $KIND_CACHE/docker, socket $KIND_STATE/docker.sock)"
	setsid dockerd --host "$own_docker_host" --pidfile "$pidfile" --data-root "$KIND_CACHE/docker" \
		--exec-root "$KIND_STATE/exec" --bridge none --log-level warn "${runtime[@]}" \
		>"$KIND_STATE/dockerd.log" 2>&1 </dev/null &
	export DOCKER_HOST=$own_docker_host
	for _ in $(seq 1 60); do
		engine_answers && { log "dockerd up (pid $(cat "$pidfile"))"; return 0; }
		sleep 1
	done
	tail -20 "$KIND_STATE/dockerd.log" >&2
	die "dockerd did not answer within 60s (log: $KIND_STATE/dockerd.log)"
}

# remove_docker_chains: every rule that jumps to a DOCKER* chain, then the
# chains themselves, in the tables the engine writes.
remove_docker_chains() {
	local table rule chain
	for table in filter nat raw; do
		iptables -w 5 -t "$table" -S 2>/dev/null | grep -E '^-A ' | grep -vE '^-A DOCKER' | grep -E -- '-j DOCKER' |
			while read -r rule; do
				# shellcheck disable=SC2086 # the rule is iptables' own words
				iptables -w 5 -t "$table" -D ${rule#-A }
			done
		for chain in $(iptables -w 5 -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ {print $2}'); do
			iptables -w 5 -t "$table" -F "$chain"
		done
		for chain in $(iptables -w 5 -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ {print $2}'); do
			iptables -w 5 -t "$table" -X "$chain"
		done
	done
}

down() {
	if [ ! -f "$pidfile" ]; then
		log "no engine of the project's to stop"
		return 0
	fi
	local pid status=0
	pid=$(cat "$pidfile")
	export DOCKER_HOST=$own_docker_host
	if kill -0 "$pid" 2>/dev/null; then
		# Containers first (kind's nodes), then the networks they leave.
		local ids
		ids=$(timeout 60 docker ps -aq 2>/dev/null)
		# shellcheck disable=SC2086
		[ -z "$ids" ] || timeout 120 docker rm -f $ids >/dev/null || status=1
		timeout 60 docker network prune -f >/dev/null 2>&1 || status=1
		kill -TERM "$pid"
		for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
		if kill -0 "$pid" 2>/dev/null; then
			log "dockerd (pid $pid) did not stop in 30s: killing it"
			kill -KILL "$pid"
			status=1
		fi
	fi
	rm -f "$pidfile"
	# Whatever the engine left mounted (overlays, network namespaces).
	local m
	for m in $(awk -v a="$KIND_CACHE/docker" -v b="$KIND_STATE/exec" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/mounts | sort -r); do
		umount -l "$m" || status=1
	done
	remove_docker_chains || status=1
	[ -f "$KIND_STATE/forward-policy.before" ] && iptables -w 5 -P FORWARD "$(cat "$KIND_STATE/forward-policy.before")"
	[ -f "$KIND_STATE/ip_forward.before" ] && cat "$KIND_STATE/ip_forward.before" >/proc/sys/net/ipv4/ip_forward
	rm -rf "$KIND_STATE/exec" "$KIND_STATE/docker.sock" "$KIND_STATE"/*.before
	log "engine stopped and its host changes removed"
	return "$status"
}

case "${1:-}" in
up) up ;;
down) down ;;
env) [ -f "$pidfile" ] && echo "export DOCKER_HOST=$own_docker_host" ;;
*)
	echo "usage: hack/kind/docker.sh up | down | env" >&2
	exit 2
	;;
esac
