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
# shellcheck source=hack/daemon-lib.sh
source "$(dirname "$0")/daemon-lib.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench_init pbscale 197 16

build_binaries podbay-scale
(cd "$repo" && cp "${BASE_PODBAYD:-$bin/podbayd}" "$bin/podbayd.base")

bench_configure
sed -i "1i debug_pprof = true" "$config"

port=$(free_port)
start_daemon() { # binary, log name
	start_podbayd "$1" "$tmp/$2.log" warn
	local t0=$SECONDS
	if wait_until 1200 "$daemon_pid" serving "$sock" "$port"; then
		echo "== $2: podbayd pid $daemon_pid serving after $((SECONDS - t0)) s"
		return 0
	fi
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
			remove_cgroups "$cgroup_parent-idle"
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
