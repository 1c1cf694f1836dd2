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

[ "$(id -u)" -eq 0 ] || die "must run as root (it creates network namespaces, a bridge and containers)"
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
for c in $CONCURRENCY; do
	[[ $c =~ ^[1-9][0-9]*$ ]] || die "CONCURRENCY must list positive integers, got '$CONCURRENCY'"
done
for m in $MODES; do
	[[ $m == pods || $m == containers || $m == restart ]] || die "MODES must list pods, containers and/or restart, got '$MODES'"
done
for tool in go "${RUNTIME:-runc}" conmon ip ss iptables-save iptables-restore setsid; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni"
[ -x /bin/busybox ] || die "/bin/busybox not found: the test images are built from it (apt-get install busybox-static)"
if ip link show "$bridge" >/dev/null 2>&1; then
	die "bridge $bridge already exists: another bench is running, or an earlier one leaked it (ip link del $bridge)"
fi
if [ "$N" -gt 200 ]; then subnet=10.198.0.0/16; else subnet=10.198.0.0/24; fi
if ip -4 route show | grep -q '^10\.198\.'; then
	die "a route into 10.198.0.0/16 already exists; the bench network would clash with it"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d /tmp/pbbench.XXXXXX)
bin=$tmp/bin
root_dir=$tmp/root
state_dir=$tmp/state
conf_dir=$tmp/net.d
ipam_dir=$tmp/ipam
cache_dir=$tmp/cnicache
config=$tmp/podbayd.toml
registries_conf=$tmp/registries.conf
registries_dir=$tmp/registries.conf.d
policy=$tmp/policy.json
pod_log_dir=$tmp/podlogs
sock=$tmp/podbayd.sock
cgroup_parent=/pbbench-${tmp##*.}
runtime_root=$state_dir/runtimes/runc
runtime_bin=${RUNTIME:-runc}
HANDLER_TYPE=${HANDLER_TYPE:-oci}
[[ $HANDLER_TYPE == oci || $HANDLER_TYPE == vm ]] || die "HANDLER_TYPE must be oci or vm, got '$HANDLER_TYPE'"
if [ "$HANDLER_TYPE" = vm ]; then
	command -v containerd-shim-runc-v2 >/dev/null || die "containerd-shim-runc-v2 not found (Debian package containerd)"
	shim_runc_root=$state_dir/shim-runc
	runtime_root=$shim_runc_root/podbay
fi
storage_root=$root_dir/storage
storage_run_root=$state_dir/storage
netns_dir=$tmp/netns

daemon_pid=
registry_pid=
failed=0


stop_daemon() {
	[ -n "$daemon_pid" ] || return 0
	local pid=$daemon_pid rc=0
	daemon_pid=
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 300); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "podbayd (pid $pid) still running 30 s after SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		log "podbayd (pid $pid) exited with status $rc after SIGTERM"
		return 1
	fi
}

# stop_registry stops podbay-testimages by its PID.
stop_registry() {
	[ -n "$registry_pid" ] || return 0
	local pid=$registry_pid
	registry_pid=
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "podbay-testimages (pid $pid) still running 5 s after SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}






finish() {
	local rc=$? leaks line
	set +e
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || failed=1
	stop_daemon || failed=1
	stop_registry

	leaks=$(find_leaks)
	if [ -n "$leaks" ]; then
		failed=1
		{
			echo
			echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
			echo "!!! LEAK: the run left these behind:"
			while read -r line; do echo "!!!   $line"; done <<<"$leaks"
			echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
		} >&2
		remove_leaks
	fi

	ip link del "$bridge" 2>/dev/null
	find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "${cgroup_parent#/}" 2>/dev/null |
		while read -r d; do
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
		done

	if [ "$failed" -ne 0 ] && compgen -G "$tmp/*.log" >/dev/null; then
		local keep
		keep=$(mktemp -d /tmp/pbbench-logs.XXXXXX)
		cp "$tmp"/*.log "$keep"/
		log "daemon and registry logs kept in $keep"
	fi
	if [ -n "$(our_mounts)" ]; then
		log "mounts remain under $tmp; not removing it"
		failed=1
	else
		rm -rf "$tmp"
	fi
	if [ "$failed" -ne 0 ]; then
		log "FAILED"
		exit 1
	fi
	log "ok: nothing left behind"
	exit 0
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port prints a TCP port nothing listens on.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 40000))
		if [ -z "$(ss -Hltn "sport = :$p")" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

mkdir -p "$bin" "$root_dir" "$state_dir" "$conf_dir" "$ipam_dir" "$cache_dir" "$registries_dir" "$pod_log_dir" "$netns_dir"

log "building into $bin"
(
	cd "$repo"
	go build -o "$bin/podbayd" ./cmd/podbayd
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/podbay-pause" ./cmd/podbay-pause
	go build -o "$bin/podbay-bench" ./cmd/podbay-bench
	go build -o "$bin/podbay-testimages" ./cmd/podbay-testimages
)

# The registry. Port 0: the kernel picks a free loopback port, and the
# references it prints carry it. setsid, like the daemon: a Ctrl-C must not
# take it away before the cleanup.
setsid "$bin/podbay-testimages" --listen 127.0.0.1:0 >"$tmp/testimages.out" 2>"$tmp/testimages.log" &
registry_pid=$!
image=
for _ in $(seq 300); do
	image=$(grep -oE '^127\.0\.0\.1:[0-9]+/test/busybox:latest' "$tmp/testimages.out" || true)
	if [ -n "$image" ] || ! alive "$registry_pid"; then
		break
	fi
	sleep 0.1
done
if [ -z "$image" ]; then
	cat "$tmp/testimages.log" >&2
	die "podbay-testimages did not serve test/busybox:latest within 30 s"
fi
registry=${image%%/*}

# Only the bench's registry is reachable: registry.k8s.io (the default
# pause image) and docker.io (short names) are blocked, so nothing leaves
# the machine. The empty drop-in dir keeps the host's registries.conf.d
# out, and the policy the host's policy.json.
cat >"$registries_conf" <<EOF
unqualified-search-registries = []

[[registry]]
location = "$registry"
insecure = true

[[registry]]
prefix = "registry.k8s.io"
location = "registry.k8s.io"
blocked = true

[[registry]]
prefix = "docker.io"
location = "docker.io"
blocked = true
EOF
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$policy"

write_daemon_config "$storage_run_root"
if [ "$HANDLER_TYPE" = vm ]; then
	printf '\n[runtimes.runc]\ntype = "vm"\npath = "%s"\nruntime_path = "%s"\nruntime_root = "%s"\n' \
		"$(command -v containerd-shim-runc-v2)" "$(command -v "$runtime_bin")" "$shim_runc_root" >>"$config"
elif [ -n "${RUNTIME:-}" ]; then
	printf '\n[runtimes.runc]\npath = "%s"\n' "$RUNTIME" >>"$config"
fi
write_conflist

# bench_mode runs podbay-bench in mode $1 at concurrency $2 against a fresh
# podbayd, and stops the daemon.
bench_mode() {
	local mode=$1 c=$2 port daemon_log ready
	local -a args=(--socket "$sock" -mode "$mode" -n "$N" -concurrency "$c" -log-dir "$pod_log_dir")
	if [ "$mode" = containers ]; then
		# -fresh-pull: each mode's pull is a first pull, not a re-pull of
		# what the previous mode's daemon stored.
		args+=(-image "$image" -fresh-pull -stop-timeout 10s)
	fi
	port=$(free_port) || die "no free TCP port for the metrics endpoint"
	daemon_log=$tmp/podbayd-$mode-c$c.log
	rm -f "$sock"
	# setsid: its own session, so that a Ctrl-C reaches podbay-bench (which
	# then removes its containers and pods) but not the daemon it still
	# needs.
	setsid "$bin/podbayd" --config "$config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--registries-conf "$registries_conf" --metrics-address "127.0.0.1:$port" --log-level info >"$daemon_log" 2>&1 &
	daemon_pid=$!
	ready=0
	for _ in $(seq 300); do
		if ! alive "$daemon_pid"; then
			break
		fi
		if [ -S "$sock" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			ready=1
			break
		fi
		sleep 0.1
	done
	if [ "$ready" -ne 1 ]; then
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
