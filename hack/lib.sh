# Shared by hack/bench.sh, hack/scale.sh, hack/bench-compare.sh and
# hack/critest.sh: process helpers and the leak checks and cleanup of a run
# that started its own podbayd in $tmp. Expects the caller to define log()
# and set tmp, netns_dir, ipam_dir, net_name, bridge, runtime_root, root_dir,
# state_dir, storage_root and cgroup_parent, and podbay_config and sock for a
# podbayd run (its leaks are podbay doctor's); registry_pid, daemon_pid, pod_log_dir and
# runtime_bin (default runc) are optional; build_binaries and
# start_registry use repo and bin.
# shellcheck shell=bash disable=SC2154

die() {
	log "$*"
	exit 1
}

# alive reports whether PID is a running (not zombie) process.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]
}

# stop_process PID NAME TENTHS stops a process this script started:
# SIGTERM, then SIGKILL after TENTHS tenths of a second. It returns the
# process's exit status.
stop_process() {
	local pid=$1 name=$2 wait_tenths=$3 rc=0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq "$wait_tenths"); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "$name (pid $pid) still running $((wait_tenths / 10)) s after SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || rc=$?
	return "$rc"
}

# stop_daemon stops the podbayd of $daemon_pid, if any (30 s), and fails
# when it did not exit 0.
stop_daemon() {
	[ -n "${daemon_pid:-}" ] || return 0
	local pid=$daemon_pid rc=0
	daemon_pid=
	stop_process "$pid" podbayd 300 || rc=$?
	if [ "$rc" -ne 0 ]; then
		log "podbayd (pid $pid) exited with status $rc after SIGTERM"
		return 1
	fi
}

# stop_registry stops the podbay-testimages of $registry_pid, if any (5 s).
stop_registry() {
	[ -n "${registry_pid:-}" ] || return 0
	local pid=$registry_pid
	registry_pid=
	stop_process "$pid" podbay-testimages 50 || true
}

# wait_until TENTHS PIDS CMD... runs CMD every tenth of a second, for at
# most TENTHS tenths, while every process of PIDS (space-separated) is
# alive. It succeeds once CMD does.
wait_until() {
	local tenths=$1 pids=$2 p
	shift 2
	for _ in $(seq "$tenths"); do
		for p in $pids; do
			alive "$p" || return 1
		done
		if "$@"; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# serving SOCK PORT: the daemon's socket exists and something accepts on
# 127.0.0.1:PORT (its metrics endpoint).
serving() {
	[ -S "$1" ] && (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null
}

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

# build_binaries CMD... builds podbayd, podbay-pause, podbay-testimages and
# the given ./cmd/CMDs into $bin.
build_binaries() {
	local c
	log "building into $bin"
	(
		cd "$repo"
		go build -o "$bin/podbayd" ./cmd/podbayd
		go build -o "$bin/podbay" ./cmd/podbay
		CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/podbay-pause" ./cmd/podbay-pause
		for c in "$@"; do
			go build -o "$bin/$c" "./cmd/$c"
		done
		go build -o "$bin/podbay-testimages" ./cmd/podbay-testimages
	)
}

# start_registry REF [ARG...] starts podbay-testimages (with ARGs) and sets
# registry_image to the reference 127.0.0.1:PORT/REF it prints once it
# serves. Port 0: the kernel picks a free loopback port, and the references
# it prints carry it. setsid, like the daemon: a Ctrl-C must not take it
# away before the cleanup.
start_registry() {
	local ref=$1
	shift
	setsid "$bin/podbay-testimages" --listen 127.0.0.1:0 "$@" >"$tmp/testimages.out" 2>"$tmp/testimages.log" &
	registry_pid=$!
	registry_image=
	for _ in $(seq 300); do
		registry_image=$(grep -oE "^127\\.0\\.0\\.1:[0-9]+/$ref" "$tmp/testimages.out" || true)
		if [ -n "$registry_image" ] || ! alive "$registry_pid"; then
			break
		fi
		sleep 0.1
	done
	if [ -z "$registry_image" ]; then
		cat "$tmp/testimages.log" >&2
		die "podbay-testimages did not serve $ref within 30 s"
	fi
}

# wait_registries_conf SECONDS waits until the registry of $registry_pid
# (podbay-testimages) has written $registries_conf, which it does once it
# serves; it dies with the registry's log when that does not happen.
wait_registries_conf() {
	for _ in $(seq $(($1 * 10))); do
		if [ -f "$registries_conf" ] || ! alive "$registry_pid"; then
			break
		fi
		sleep 0.1
	done
	if [ ! -f "$registries_conf" ]; then
		cat "$tmp/testimages.log" >&2
		die "podbay-testimages did not start serving within $1 s"
	fi
}

# write_crictl_conf writes $crictl_conf: crictl on the daemon's $sock, with
# a timeout long enough for a pull.
write_crictl_conf() {
	cat >"$crictl_conf" <<EOF
runtime-endpoint: unix://$sock
image-endpoint: unix://$sock
timeout: 120
EOF
}

# tmp_paths sets the paths of a run's podbayd in $tmp: bin, root_dir (with
# storage_root), state_dir, conf_dir, ipam_dir, cache_dir, netns_dir,
# config (and podbay_config, for find_leaks), registries_conf,
# registries_dir, policy and sock.
tmp_paths() {
	bin=$tmp/bin
	root_dir=$tmp/root
	state_dir=$tmp/state
	conf_dir=$tmp/net.d
	ipam_dir=$tmp/ipam
	cache_dir=$tmp/cnicache
	config=$tmp/podbayd.toml
	podbay_config=$config
	registries_conf=$tmp/registries.conf
	registries_dir=$tmp/registries.conf.d
	policy=$tmp/policy.json
	sock=$tmp/podbayd.sock
	netns_dir=$tmp/netns
	storage_root=$root_dir/storage
}

# remove_nat_rules deletes the NAT rules and chains the bridge plugin made
# for our network (ipMasq), which only a CNI DEL would otherwise remove, and
# podbay's masquerade of it (BENCH_MASQ=podbay), which podbayd's clean stop
# with no pods left removes.
remove_nat_rules() {
	local rules chains c
	rules=$(iptables-save -t nat 2>/dev/null | grep -F "name: \\\"$net_name\\\"" | grep '^-A ' || true)
	[ -n "$rules" ] || return 0
	chains=$(awk '$2 ~ /^(CNI-|PODBAY-MASQ-)/ {print $2}' <<<"$rules" | sort -u)
	{
		echo '*nat'
		grep -E '^-A (POSTROUTING|PREROUTING|OUTPUT|CNI-HOSTPORT-DNAT|CNI-HOSTPORT-SETMARK|CNI-HOSTPORT-MASQ) ' <<<"$rules" | sed 's/^-A /-D /'
		for c in $chains; do
			echo "-F $c"
			echo "-X $c"
		done
		echo COMMIT
	} | iptables-restore --noflush
}

# our_mounts prints the mount points under the temp dir, deepest last, each
# prefixed with its filesystem type; not the tmpfs mounts the script made
# itself for the daemons' run-time state ($run_tmpfs, space-separated).
our_mounts() {
	awk -v t="$tmp/" -v skip=" ${run_tmpfs:-} " 'index($5, t) == 1 && index(skip, " " $5 " ") == 0 {
		# The filesystem type follows the " - " separator.
		for (i = 7; i <= NF; i++) if ($i == "-") break
		print $(i + 1), $5
	}' /proc/self/mountinfo
}

# write_daemon_config writes a podbayd configuration to $config that keeps
# everything in the run's temp dir: the run root ($1), the storage, CNI
# and netns dirs, the NRI socket and plugin dirs, the cgroup parent,
# registries and policy. The caller
# appends its [runtimes] tables.
write_daemon_config() {
	local plugin_dirs='"/usr/lib/cni"'
	[ -d /opt/cni/bin ] && plugin_dirs+=', "/opt/cni/bin"'
	cat >"$config" <<EOF
conmon = "$(command -v conmon)"
pause_binary = "$bin/podbay-pause"
default_cgroup_parent = "$cgroup_parent"
netns_dir = "$netns_dir"

[image]
storage_root = "$storage_root"
run_root = "$1"
registries_conf_dir = "$registries_dir"
signature_policy = "$policy"

[network]
conf_dir = "$conf_dir"
plugin_dirs = [$plugin_dirs]
cache_dir = "$cache_dir"
write_default_config = false

[nri]
socket_path = "$tmp/nri.sock"
plugin_path = "$tmp/nri-plugins"
plugin_config_path = "$tmp/nri-conf.d"
EOF
}

# write_conflist writes the run's CNI network $net_name: bridge $bridge on
# $subnet with host-local IPAM in $ipam_dir, and portmap. With
# BENCH_MASQ=podbay it has the shape of podbay's default network: the
# bridge plugin's ipMasq off, and podbayd masquerades the subnet with its
# own rules (podbayMasquerade); the default, BENCH_MASQ=plugin, is the
# plugin's ipMasq, a chain per pod.
write_conflist() {
	local masq=true marker=
	case "${BENCH_MASQ:-plugin}" in
	plugin) ;;
	podbay) masq=false marker='"generatedBy": "podbay", "podbayMasquerade": true,' ;;
	*) die "BENCH_MASQ must be plugin or podbay, got '$BENCH_MASQ'" ;;
	esac
	cat >"$conf_dir/10-$net_name.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$net_name",
  $marker
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": $masq,
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
}

# shim_sockets lists the shim v2 sockets on the host, sorted.
# A host that never ran a shim has no /run/containerd/s: an empty list, not a failure.
shim_sockets() { { ls /run/containerd/s 2>/dev/null || true; } | sort; }

# find_leaks prints one line per thing the run left behind. What of
# podbay's the host holds is podbay doctor's inventory (doctor_leaks) when
# the run is podbayd's ($podbay_config set); another engine's run
# (bench-compare.sh's containerd) is listed by engine_leaks. Then what only
# the script knows: new shim sockets, its registry, pod log dirs.
find_leaks() {
	if [ -n "${podbay_config:-}" ]; then
		doctor_leaks
	else
		engine_leaks
	fi
	# Shim v2 sockets (/run/containerd/s) that appeared during the run.
	if [ -n "${shim_sockets_before:-}" ] && [ -f "$shim_sockets_before" ]; then
		comm -13 "$shim_sockets_before" <(shim_sockets) | sed 's|^|shim socket /run/containerd/s/|'
	fi
	if [ -n "${registry_pid:-}" ] && alive "$registry_pid"; then
		echo "podbay-testimages process $registry_pid"
	fi
	# Pod log directories are the client's (kubelet's) to remove; their
	# container logs, the daemon's.
	if [ -n "${pod_log_dir:-}" ] && [ -d "$pod_log_dir" ]; then
		find "$pod_log_dir" -mindepth 1 -maxdepth 1 -printf 'pod log dir %p\n'
	fi
}

# doctor_leaks prints what `podbay doctor --json` finds of the stopped
# podbayd of $podbay_config ($sock, $root_dir, $state_dir), records or not (a
# pod the daemon still holds is left behind too): the run's temp dir and
# cgroup parent are wholly podbay's, so a mount or process there is a leak
# even when it names no ID; not the tmpfs mounts the script made itself
# ($run_tmpfs).
doctor_leaks() {
	local json rc=0
	json=$("$bin/podbay" doctor --config "$podbay_config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--only leaks --json --own-dir "$tmp" --cgroup-root "$cgroup_parent" --no-records 2>&1) || rc=$?
	# 3: leaks found; 1: the report could not be made (leakError says why).
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$rc" -ne 1 ] || ! jq -e . >/dev/null 2>&1 <<<"$json"; then
		echo "podbay doctor failed (status $rc): $json"
		return
	fi
	jq -r --arg skip " ${run_tmpfs:-} " '
		(.leakError // empty | "podbay doctor: " + .),
		(.scanErrors[]? | "podbay doctor: " + .),
		(.leaks[] | (.object // "") as $o | select(.kind != "mount" or ($skip | contains(" " + $o + " ") | not)) | .kind + " " + .what)
	' <<<"$json"
}

# engine_leaks lists, for a run of another engine, its network namespaces,
# IPs, veths, rules, monitor processes, runtime state, cgroups and mounts.
engine_leaks() {
	local f pids
	if [ -d "$netns_dir" ]; then
		find "$netns_dir" -mindepth 1 -maxdepth 1 -printf 'network namespace %p\n'
	fi
	if [ -d "$ipam_dir/$net_name" ]; then
		find "$ipam_dir/$net_name" -type f ! -name 'last_reserved_ip*' ! -name lock -printf 'IP reservation %f (host-local %p)\n'
	fi
	if ip link show "$bridge" >/dev/null 2>&1; then
		ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{print "veth " $2 " on '"$bridge"'"}'
	fi
	iptables-save 2>/dev/null | grep -F "name: \\\"$net_name\\\"" | sed 's/^/iptables rule: /' || true
	pids=$(grep -lF "$tmp" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true)
	for f in $pids; do
		case "$(cat "/proc/$f/comm" 2>/dev/null)" in
		conmon | containerd-shim*)
			[ "$(awk '{print $3}' "/proc/$f/stat" 2>/dev/null)" = Z ] ||
				echo "$(cat "/proc/$f/comm") process $f: $(tr '\0' ' ' <"/proc/$f/cmdline" 2>/dev/null)"
			;;
		esac
	done
	if [ -d "$runtime_root" ]; then
		"${runtime_bin:-runc}" --root "$runtime_root" list -q 2>/dev/null | sed 's/^/container in the runtime: /' || true
		find "$runtime_root" -mindepth 1 -maxdepth 1 -printf 'runtime state %p\n'
	fi
	find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -path "*$cgroup_parent/*" 2>/dev/null |
		while read -r f; do
			if [[ ${f##*/} == podbay-* ]] || [ -n "$(cat "$f/cgroup.procs" 2>/dev/null)" ]; then
				echo "cgroup $f"
			fi
		done
	our_mounts | awk '{print $1 " mount " $2}'
}

# print_leaks prints the leaks ($1, a line each) in a banner to stderr.
print_leaks() {
	local line
	{
		echo
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
		echo "!!! LEAK: the run left these behind:"
		while read -r line; do echo "!!!   $line"; done <<<"$1"
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
	} >&2
}

# remove_cgroups PARENT removes the cgroup PARENT (/name) and the empty
# cgroups below it, in every hierarchy.
remove_cgroups() {
	find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "${1#/}" 2>/dev/null |
		while read -r d; do
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
		done
}

# clean_run_host [LEAKS]: the leaks find_leaks finds (and LEAKS, lines a
# caller found already) are printed and removed, failing the run
# (failed=1); then the run's bridge ($bridge) and cgroups ($cgroup_parent)
# go.
clean_run_host() {
	local leaks
	leaks=$(
		[ -z "${1:-}" ] || echo "$1"
		find_leaks
	)
	if [ -n "$leaks" ]; then
		failed=1
		print_leaks "$leaks"
		remove_leaks
	fi
	ip link del "$bridge" 2>/dev/null
	remove_cgroups "$cgroup_parent"
}

# keep_logs NAME WHAT [FILE...] copies the run's logs ($tmp/*.log) and the
# FILEs that exist into a new /tmp/NAME.XXXXXX and says so; nothing when
# there are no logs.
keep_logs() {
	local keep f
	compgen -G "$tmp/*.log" >/dev/null || return 0
	keep=$(mktemp -d "/tmp/$1.XXXXXX")
	cp "$tmp"/*.log "$keep"/
	for f in "${@:3}"; do
		[ ! -f "$f" ] || cp "$f" "$keep"/
	done
	log "$2 logs kept in $keep"
}

# remove_tmp removes $tmp unless mounts remain under it (then failed=1).
remove_tmp() {
	if [ -n "$(our_mounts)" ]; then
		log "mounts remain under $tmp; not removing it"
		failed=1
	else
		rm -rf "$tmp"
	fi
}

# vm_runtime_table RUNTIME SHIM_ROOT prints the [runtimes.runc] table of a
# "vm" handler: containerd-shim-runc-v2 driving RUNTIME with its state in
# SHIM_ROOT.
vm_runtime_table() {
	printf '\n[runtimes.runc]\ntype = "vm"\npath = "%s"\nruntime_path = "%s"\nruntime_root = "%s"\n' \
		"$(command -v containerd-shim-runc-v2)" "$(command -v "$1")" "$2"
}

# remove_leaks undoes what find_leaks can find, best effort, so that a failed
# run does not leave processes and mounts on the host. What is left in the
# temp dir (storage records, directories) goes with it.
remove_leaks() {
	local id f pid
	if [ -d "$runtime_root" ]; then
		for id in $("${runtime_bin:-runc}" --root "$runtime_root" list -q 2>/dev/null || true); do
			"${runtime_bin:-runc}" --root "$runtime_root" delete --force "$id" || true
		done
	fi
	for pid in $(grep -lF "$tmp" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true); do
		case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
		conmon | containerd-shim*) kill -TERM "$pid" 2>/dev/null || true ;;
		esac
	done
	if [ -n "${shim_sockets_before:-}" ] && [ -f "$shim_sockets_before" ]; then
		for f in $(comm -13 "$shim_sockets_before" <(shim_sockets)); do
			rm -f "/run/containerd/s/$f"
		done
	fi
	our_mounts | awk '{print $2}' | sort -r | while read -r f; do
		umount -l "$f" || true
	done
	remove_nat_rules || log "could not remove the NAT rules of network $net_name"
}

# fetch_debian_busybox DIR WORKDIR: unpacks Debian's busybox package into
# DIR (DIR/bin/busybox) unless it is there: the dynamically linked build,
# whose shell looks commands up in PATH as the official busybox image's does
# (busybox-static's runs its own ls even where /bin/ls is masked, which
# critest's MaskedPaths spec sees). It conflicts with busybox-static, so it
# is unpacked, not installed.
fetch_debian_busybox() {
	local dir=$1 work=$2
	[ -x "$dir/bin/busybox" ] && return 0
	log "fetching Debian's busybox package into $dir"
	mkdir -p "$work"
	if ! (cd "$work" && apt-get download -q -o APT::Sandbox::User=root busybox >/dev/null); then
		apt-get update -qq
		(cd "$work" && apt-get download -q -o APT::Sandbox::User=root busybox >/dev/null)
	fi
	rm -rf "$dir.new"
	# On a fresh clone bin/ does not exist yet; dpkg-deb makes only the
	# last path element.
	mkdir -p "$(dirname "$dir")"
	dpkg-deb -x "$work"/busybox_*.deb "$dir.new"
	rm -rf "$dir"
	mv "$dir.new" "$dir"
}
