#!/usr/bin/env bash
# bench.sh measures podbayd's pod lifecycle with podbay-bench: for each
# concurrency it starts a fresh podbayd (so that the daemon's latency
# summaries cover that mode alone), runs, stops and removes N pods, prints
# client-side RPC latencies, throughput and the daemon's per-phase latencies,
# and stops the daemon. At the end it checks that nothing was left behind:
# network namespaces, veths, IP reservations, iptables rules, conmon and
# runc containers, sandbox directories, cgroups, mounts.
#
# Needs root, runc, conmon and the CNI plugins in /usr/lib/cni.
#
#   N=20 CONCURRENCY="1 10" ./hack/bench.sh
#
# Env: N pods per mode (default 50); CONCURRENCY, space-separated levels
# (default "1 10"); RUNTIME, the OCI runtime binary of the runc handler
# (default runc from PATH; e.g. crun, or a wrapper).
#
# Everything it makes lives in a temp dir, a bridge pbbench0 on
# 10.198.0.0/24 (/16 when N > 200) and a cgroup parent /pbbench-*; all of it
# is removed on exit, failure or not. Exits non-zero when a mode fails, the
# daemon logs an error, or anything leaked; the daemon logs of a failed run
# are kept and their path printed.
set -euo pipefail

N=${N:-50}
CONCURRENCY=${CONCURRENCY:-"1 10"}

readonly net_name=pbbench
readonly bridge=pbbench0
readonly netns_dir=/var/run/netns

log() { echo "bench.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it creates network namespaces, a bridge and containers)"
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
for c in $CONCURRENCY; do
	[[ $c =~ ^[1-9][0-9]*$ ]] || die "CONCURRENCY must list positive integers, got '$CONCURRENCY'"
done
for tool in go "${RUNTIME:-runc}" conmon ip ss iptables-save iptables-restore setsid; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni"
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
sock=$tmp/podbayd.sock
cgroup_parent=/pbbench-${tmp##*.}
runtime_root=$state_dir/runtimes/runc
runtime_bin=${RUNTIME:-runc}

daemon_pid=
failed=0
netns_before=$(find "$netns_dir" -maxdepth 1 -name 'podbay-*' -printf '%f\n' 2>/dev/null | sort || true)

# alive reports whether PID is a running (not zombie) process.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]
}

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

# our_ids prints the IDs of our daemons' sandboxes, one a line, from their
# directories and logs, so that podbay-* namespaces of another podbayd on
# this host are not taken for ours.
our_ids() {
	{
		find "$root_dir/sandboxes" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null
		cat "$tmp"/podbayd-*.log 2>/dev/null | grep -oE '\b[0-9a-f]{64}\b'
	} | sort -u || true
}

# remove_nat_rules deletes the NAT rules and chains the bridge plugin made
# for our network (ipMasq), which only a CNI DEL would otherwise remove.
remove_nat_rules() {
	local rules chains c
	rules=$(iptables-save -t nat 2>/dev/null | grep -F "name: \\\"$net_name\\\"" | grep '^-A ' || true)
	[ -n "$rules" ] || return 0
	chains=$(awk '$2 ~ /^CNI-/ {print $2}' <<<"$rules" | sort -u)
	{
		echo '*nat'
		grep '^-A POSTROUTING ' <<<"$rules" | sed 's/^-A /-D /'
		for c in $chains; do
			echo "-F $c"
			echo "-X $c"
		done
		echo COMMIT
	} | iptables-restore --noflush
}

# find_leaks prints one line per thing the run left behind.
find_leaks() {
	local ids new f pids
	ids=$(our_ids)
	new=$(comm -13 <(echo "$netns_before") \
		<(find "$netns_dir" -maxdepth 1 -name 'podbay-*' -printf '%f\n' 2>/dev/null | sort))
	for f in $new; do
		if grep -qxF "${f#podbay-}" <<<"$ids"; then
			echo "network namespace $netns_dir/$f"
		else
			log "note: $netns_dir/$f appeared during the run but is not this bench's (another podbayd?)"
		fi
	done
	if [ -d "$ipam_dir/$net_name" ]; then
		find "$ipam_dir/$net_name" -type f ! -name 'last_reserved_ip*' ! -name lock -printf 'IP reservation %f (host-local %p)\n'
	fi
	if ip link show "$bridge" >/dev/null 2>&1; then
		ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{print "veth " $2 " on '"$bridge"'"}'
	fi
	iptables-save 2>/dev/null | grep -F "name: \\\"$net_name\\\"" | sed 's/^/iptables rule: /' || true
	pids=$(grep -lF "$tmp" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true)
	for f in $pids; do
		if [ "$(cat "/proc/$f/comm" 2>/dev/null)" = conmon ]; then
			echo "conmon process $f: $(tr '\0' ' ' <"/proc/$f/cmdline" 2>/dev/null)"
		fi
	done
	if [ -d "$runtime_root" ]; then
		"$runtime_bin" --root "$runtime_root" list -q 2>/dev/null | sed 's/^/container in the runtime: /' || true
	fi
	if [ -d "$root_dir/sandboxes" ]; then
		find "$root_dir/sandboxes" -mindepth 1 -maxdepth 1 -printf 'sandbox dir %p\n'
	fi
	# <parent>/conmon is the daemon's shared cgroup for conmon; a pod's own
	# cgroup, or any cgroup still holding a process, is a leak.
	find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -path "*$cgroup_parent/*" 2>/dev/null |
		while read -r f; do
			if [[ ${f##*/} == podbay-* ]] || [ -n "$(cat "$f/cgroup.procs" 2>/dev/null)" ]; then
				echo "cgroup $f"
			fi
		done
	awk -v t="$tmp" 'index($5, t) == 1 {print "mount " $5}' /proc/self/mountinfo
}

# remove_leaks undoes what find_leaks can find, best effort, so that a failed
# run does not leave pause processes and mounts on the host.
remove_leaks() {
	local ids id f pid
	if [ -d "$runtime_root" ]; then
		for id in $("$runtime_bin" --root "$runtime_root" list -q 2>/dev/null || true); do
			"$runtime_bin" --root "$runtime_root" delete --force "$id" || true
		done
	fi
	for pid in $(grep -lF "$tmp" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true); do
		if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = conmon ]; then
			kill -TERM "$pid" 2>/dev/null || true
		fi
	done
	ids=$(our_ids)
	for id in $ids; do
		f=$netns_dir/podbay-$id
		if [ -e "$f" ]; then
			umount "$f" 2>/dev/null || true
			rm -f "$f"
		fi
	done
	awk -v t="$tmp" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r f; do
		umount -l "$f" || true
	done
	remove_nat_rules || log "could not remove the NAT rules of network $net_name"
}

finish() {
	local rc=$? leaks line
	set +e
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || failed=1
	stop_daemon || failed=1

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

	if [ "$failed" -ne 0 ] && compgen -G "$tmp/podbayd-*.log" >/dev/null; then
		local keep
		keep=$(mktemp -d /tmp/pbbench-logs.XXXXXX)
		cp "$tmp"/podbayd-*.log "$keep"/
		log "daemon logs kept in $keep"
	fi
	if awk -v t="$tmp" 'index($5, t) == 1 {found=1} END {exit !found}' /proc/self/mountinfo; then
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

mkdir -p "$bin" "$root_dir" "$state_dir" "$conf_dir" "$ipam_dir" "$cache_dir"

log "building into $bin"
(
	cd "$repo"
	go build -o "$bin/podbayd" ./cmd/podbayd
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/podbay-pause" ./cmd/podbay-pause
	go build -o "$bin/podbay-bench" ./cmd/podbay-bench
)

plugin_dirs='"/usr/lib/cni"'
[ -d /opt/cni/bin ] && plugin_dirs+=', "/opt/cni/bin"'
cat >"$config" <<EOF
conmon = "$(command -v conmon)"
pause_binary = "$bin/podbay-pause"
default_cgroup_parent = "$cgroup_parent"

[network]
conf_dir = "$conf_dir"
plugin_dirs = [$plugin_dirs]
cache_dir = "$cache_dir"
write_default_config = false
EOF
if [ -n "${RUNTIME:-}" ]; then
	printf '\n[runtimes.runc]\npath = "%s"\n' "$RUNTIME" >>"$config"
fi
cat >"$conf_dir/10-$net_name.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$net_name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$ipam_dir",
        "ranges": [[{"subnet": "$subnet"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

echo "host: $(nproc) CPUs, Linux $(uname -r), $("$runtime_bin" --version | head -n1), $(conmon --version | head -n1)"
echo "bench: N=$N per mode, concurrency $CONCURRENCY, network $subnet, fresh podbayd per mode"

for c in $CONCURRENCY; do
	port=$(free_port) || die "no free TCP port for the metrics endpoint"
	daemon_log=$tmp/podbayd-c$c.log
	rm -f "$sock"
	# setsid: its own session, so that a Ctrl-C reaches podbay-bench (which
	# then removes its pods) but not the daemon it still needs.
	setsid "$bin/podbayd" --config "$config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--metrics-address "127.0.0.1:$port" --log-level info >"$daemon_log" 2>&1 &
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

	if ! "$bin/podbay-bench" --socket "$sock" -n "$N" -concurrency "$c" \
		--metrics "http://127.0.0.1:$port/metrics"; then
		log "mode concurrency=$c failed"
		if grep -qE 'level=(ERROR|WARN)' "$daemon_log"; then
			log "daemon warnings and errors (last 20):"
			grep -E 'level=(ERROR|WARN)' "$daemon_log" | tail -n 20 >&2
		fi
		exit 1
	fi
	stop_daemon || exit 1
	if grep -q 'level=ERROR' "$daemon_log"; then
		log "podbayd logged errors during concurrency=$c:"
		grep 'level=ERROR' "$daemon_log" | head -n 20 >&2
		failed=1
	fi
done
