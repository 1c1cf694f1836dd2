#!/usr/bin/env bash
# bench.sh measures podbayd's pod and container lifecycles with
# podbay-bench. For each concurrency it runs two modes, each against a fresh
# podbayd (so that the daemon's latency summaries cover that mode alone):
#   pods        N pods run, stopped and removed;
#   restart     once, not per concurrency: podbay-bench starts podbayd,
#               SIGKILLs it and starts it again, 5 times with no pods and
#               5 times with RESTART_PODS (default 100) pods each running a
#               container, and prints the time from exec to answering
#               Version (restart to serving);
#   containers  N pods, each with one busybox container created, started,
#               stopped once its shell has logged that it traps SIGTERM (a
#               graceful stop: it exits 0; timeout 10 s) and removed, before
#               the pod is stopped and removed; the image is removed and
#               pulled once, timed, before the lifecycles.
# Each prints client-side RPC latencies, throughput and the daemon's
# per-phase latencies. Images come from podbay-testimages, an in-process
# registry on a free loopback port; the daemon's registries.conf blocks
# registry.k8s.io and docker.io, so nothing is pulled from past loopback (the
# pause image is made from podbay-pause). At the end it checks that nothing
# was left behind: network namespaces, veths, IP reservations, iptables
# rules, conmon processes, runc state, sandbox and container directories,
# containers/storage containers, cgroups, mounts (overlay ones included).
#
# Needs root, runc, conmon, the CNI plugins in /usr/lib/cni and a static
# busybox in /bin/busybox (Debian's busybox-static), which the test images
# are built from.
#
#   N=20 CONCURRENCY="1 10" ./hack/bench.sh
#
# Env: N pods per mode (default 50); CONCURRENCY, space-separated levels
# (default "1 10"); MODES, space-separated (default "pods containers");
# RUNTIME, the OCI runtime binary of the runc handler (default runc from
# PATH; e.g. crun, or a wrapper); HANDLER_TYPE=vm makes that handler a "vm"
# one: containerd-shim-runc-v2 driving the runtime over the shim v2 API;
# BENCH_MASQ=podbay gives the network the shape of podbay's default one
# (one podbay-owned masquerade for the subnet instead of the bridge
# plugin's ipMasq chain per pod; default plugin).
#
# Everything it makes lives in a temp dir (the pods' network namespaces
# included: a podbayd reclaims every unowned podbay-* namespace in its
# netns_dir, and so do the integration tests' leak checks, which would take
# live pods' namespaces from under each other in a shared /var/run/netns),
# a bridge pbbench0 on
# 10.198.0.0/24 (/16 when N > 200), a cgroup parent /pbbench-* and the
# registry process; all of it is removed on exit, failure or not. Exits
# non-zero when a mode fails, the daemon logs an error, or anything leaked;
# the daemon logs of a failed run are kept and their path printed.
set -euo pipefail

N=${N:-50}
CONCURRENCY=${CONCURRENCY:-"1 10"}
MODES=${MODES:-"pods containers restart"}
RESTART_PODS=${RESTART_PODS:-100}

readonly net_name=pbbench
readonly bridge=pbbench0

log() { echo "bench.sh: $*" >&2; }
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=hack/daemon-lib.sh
source "$(dirname "$0")/daemon-lib.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench_init pbbench 198 24

build_binaries podbay-bench

bench_configure

# bench_mode runs podbay-bench in mode $1 at concurrency $2 against a fresh
# podbayd, and stops the daemon.
bench_mode() {
	local mode=$1 c=$2 port daemon_log
	local -a args=(--socket "$sock" -mode "$mode" -n "$N" -concurrency "$c" -log-dir "$pod_log_dir")
	if [ "$mode" = containers ]; then
		# -fresh-pull: each mode's pull is a first pull, not a re-pull of
		# what the previous mode's daemon stored.
		args+=(-image "$image" -fresh-pull -stop-timeout 10s)
	fi
	port=$(free_port) || die "no free TCP port for the metrics endpoint"
	daemon_log=$tmp/podbayd-$mode-c$c.log
	start_podbayd "$bin/podbayd" "$daemon_log" info
	if ! wait_until 300 "$daemon_pid" serving "$sock" "$port"; then
		tail -n 30 "$daemon_log" >&2
		die "podbayd did not start serving on $sock and 127.0.0.1:$port within 30 s"
	fi

	if ! "$bin/podbay-bench" "${args[@]}" --metrics "http://127.0.0.1:$port/metrics"; then
		log "mode $mode, concurrency=$c failed"
		if grep -qE 'level=(ERROR|WARN)' "$daemon_log"; then
			log "daemon warnings and errors (last 20):"
			grep -E 'level=(ERROR|WARN)' "$daemon_log" | tail -n 20 >&2
		fi
		exit 1
	fi
	stop_daemon || exit 1
	if grep -q 'level=ERROR' "$daemon_log"; then
		log "podbayd logged errors during mode $mode, concurrency=$c:"
		grep 'level=ERROR' "$daemon_log" | head -n 20 >&2
		failed=1
	fi
}

echo "host: $(nproc) CPUs, Linux $(uname -r), $("$runtime_bin" --version | head -n1), $(conmon --version | head -n1)"
if [ "$HANDLER_TYPE" = vm ]; then
	echo "handler: vm, containerd-shim-runc-v2 $(containerd-shim-runc-v2 -v 2>/dev/null | awk '/Version/ {print $2; exit}') driving $runtime_bin"
fi
shim_sockets_before=$tmp/shim-sockets-before
shim_sockets >"$shim_sockets_before"
echo "bench: N=$N per mode, concurrency $CONCURRENCY, modes $MODES, network $subnet, fresh podbayd per mode, images from $registry"

for c in $CONCURRENCY; do
	for mode in $MODES; do
		[ "$mode" != restart ] || continue
		echo
		bench_mode "$mode" "$c"
	done
done

# bench_restart: podbay-bench owns the daemon here (it kills and restarts
# it by the PID it started).
bench_restart() {
	local daemon_log=$tmp/podbayd-restart.log
	rm -f "$sock"
	echo
	if ! "$bin/podbay-bench" --socket "$sock" -mode restart -n "$RESTART_PODS" -image "$image" -fresh-pull \
		-log-dir "$pod_log_dir" -daemon-log "$daemon_log" -- \
		"$bin/podbayd" --config "$config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--registries-conf "$registries_conf" --log-level info; then
		log "mode restart failed"
		exit 1
	fi
	if grep -q 'level=ERROR' "$daemon_log"; then
		log "podbayd logged errors during mode restart:"
		grep 'level=ERROR' "$daemon_log" | head -n 20 >&2
		failed=1
	fi
}
case " $MODES " in *" restart "*) bench_restart ;; esac
