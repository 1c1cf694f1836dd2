#!/usr/bin/env bash
# scale.sh: podbayd with N pods (each with a running container) for
# podbay-scale. It sets up bench.sh's environment (temp dirs, registry,
# bridge pbscale0 on 10.197.0.0/16, cgroup parent /pbscale-*), makes the
# pods with $BASE_PODBAYD (default: the worktree's build) and then waits for
# commands in $CTL/cmd (default /tmp/scalework/ctl), one at a time:
#   idle BIN     RSS of BIN with no pods (its own dirs)
#   measure BIN  restart on BIN (the pods keep running), time the RPCs
#   start BIN | stop    a daemon to profile (debug_pprof is on)
#   quit         remove the pods, check that nothing is left, exit
# so that several daemon builds are measured against the same pods.
#   N=1000 ./hack/scale.sh
set -euo pipefail

N=${N:-50}
CONCURRENCY=${CONCURRENCY:-"1 10"}
MODES=${MODES:-"pods containers restart"}
RESTART_PODS=${RESTART_PODS:-100}

readonly net_name=pbscale
readonly bridge=pbscale0

log() { echo "scale.sh: $*" >&2; }
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
if [ "$N" -gt 200 ]; then subnet=10.197.0.0/16; else subnet=10.197.0.0/16; fi
if ip -4 route show | grep -q '^10\.197\.'; then
	die "a route into 10.197.0.0/16 already exists; the bench network would clash with it"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d /tmp/pbscale.XXXXXX)
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
cgroup_parent=/pbscale-${tmp##*.}
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
		keep=$(mktemp -d /tmp/pbscale-logs.XXXXXX)
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
	go build -o "$bin/podbay-scale" ./cmd/podbay-scale; cp "${BASE_PODBAYD:-$bin/podbayd}" "$bin/podbayd.base"
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
sed -i "1i debug_pprof = true" "$config"
if [ "$HANDLER_TYPE" = vm ]; then
	printf '\n[runtimes.runc]\ntype = "vm"\npath = "%s"\nruntime_path = "%s"\nruntime_root = "%s"\n' \
		"$(command -v containerd-shim-runc-v2)" "$(command -v "$runtime_bin")" "$shim_runc_root" >>"$config"
elif [ -n "${RUNTIME:-}" ]; then
	printf '\n[runtimes.runc]\npath = "%s"\n' "$RUNTIME" >>"$config"
fi
write_conflist

port=$(free_port)
start_daemon() { # binary, log name
	rm -f "$sock"
	setsid "$1" --config "$config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--registries-conf "$registries_conf" --metrics-address "127.0.0.1:$port" --log-level warn >"$tmp/$2.log" 2>&1 &
	daemon_pid=$!
	local t0=$SECONDS
	for _ in $(seq 1200); do
		alive "$daemon_pid" || break
		if [ -S "$sock" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "== $2: podbayd pid $daemon_pid serving after $((SECONDS - t0)) s"
			return 0
		fi
		sleep 0.1
	done
	tail -n 30 "$tmp/$2.log" >&2
	die "podbayd did not start"
}
rss() { echo "$1: $(grep -E 'VmRSS' /proc/$daemon_pid/status | tr -s ' \t' ' ') threads $(grep Threads /proc/$daemon_pid/status | awk '{print $2}')"; }
scale() { "$bin/podbay-scale" --socket "$sock" -n "$N" -image "$image" -log-dir "$pod_log_dir" -pid "$daemon_pid" -samples "${SAMPLES:-200}" "$@"; }

ctl=${CTL:-/tmp/scalework/ctl}
mkdir -p "$ctl"
rm -f "$ctl/cmd"
echo "port=$port sock=$sock bin=$bin" >"$ctl/env"
start_daemon "$bin/podbayd.base" up
scale -phase up -concurrency 10
stop_daemon
echo "ready: write commands to $ctl/cmd (idle BIN | measure BIN | start BIN | stop | quit)"
while :; do
	if [ ! -f "$ctl/cmd" ]; then sleep 1; continue; fi
	read -r verb arg <"$ctl/cmd" || true
	rm -f "$ctl/cmd"
	echo "### $verb $arg"
	case $verb in
	idle) # an empty daemon: its own dirs, network conf dir and cgroup parent
		(
			rm -rf "$tmp/idle"
			mkdir -p "$tmp/idle/net.d" "$tmp/idle/registries.conf.d"
			cp "$policy" "$tmp/idle/policy.json"
			sed -e "s#$tmp/#$tmp/idle/#g" -e "s#$tmp/idle/bin/#$bin/#g" -e "s#$cgroup_parent#$cgroup_parent-idle#" "$config" >"$tmp/idle/podbayd.toml"
			config=$tmp/idle/podbayd.toml root_dir=$tmp/idle/root state_dir=$tmp/idle/state
			start_daemon "$arg" idle
			sleep "${IDLE_WAIT:-10}"
			rss "idle $arg"
			stop_daemon
			find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "${cgroup_parent#/}-idle" | while read -r d; do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done
			if [ -n "$(awk -v t="$tmp/idle/" 'index($5, t) == 1' /proc/self/mountinfo)" ]; then log "idle daemon left mounts"; else rm -rf "$tmp/idle"; fi
		) ;;
	measure)
		start_daemon "$arg" measure
		sleep 5
		rss "loaded $arg after start"
		scale -phase measure || true
		rss "loaded $arg after measure"
		stop_daemon ;;
	start) start_daemon "$arg" manual ;;
	stop) stop_daemon ;;
	quit) break ;;
	esac
	echo "### done $verb"
done
start_daemon "$bin/podbayd.base" down
scale -phase down -concurrency 10
stop_daemon
