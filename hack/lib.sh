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

# build_containerd builds containerd and containerd-shim-runc-v2 (the
# version tools/containerd pins, 2.4.x) into $ctr_out (default
# $repo/_output/containerd) unless they are newer than that module's go.mod
# and go.sum; without the graph drivers whose C libraries the host lacks, as
# containerd's own static builds. hack/e2e-node.sh and
# hack/bench-compare.sh run it.
build_containerd() {
	: "${ctr_out:=$repo/_output/containerd}"
	local mod=$repo/tools/containerd f stale=0 start
	for f in containerd containerd-shim-runc-v2; do
		if [ ! -x "$ctr_out/$f" ] || [ "$mod/go.mod" -nt "$ctr_out/$f" ] || [ "$mod/go.sum" -nt "$ctr_out/$f" ]; then
			stale=1
		fi
	done
	[ "$stale" -eq 1 ] || return 0
	start=$SECONDS
	log "building containerd $(cd "$mod" && GOFLAGS='' go list -m -f '{{.Version}}' github.com/containerd/containerd/v2) into $ctr_out"
	mkdir -p "$ctr_out"
	(
		cd "$mod"
		export GOFLAGS=
		nice -n 19 go build -trimpath -tags no_btrfs,no_devmapper,no_zfs,no_aufs -o "$ctr_out/" \
			github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
	)
	log "containerd built in $((SECONDS - start)) s"
}

# write_containerd_hosts REGISTRIES_CONF HOSTS_DIR writes a hosts.toml per
# registry that REGISTRIES_CONF mirrors ("prefix" then "location" of each
# [[registry]]) into HOSTS_DIR/<registry>/: the mirror at the location's
# host, plain HTTP, its path (override_path; the location may have none,
# when the mirror serves at its root).
write_containerd_hosts() {
	local conf=$1 dir=$2 r loc path
	awk '/^prefix = / {gsub(/"/, "", $3); p = $3} /^location = / && p != "" {gsub(/"/, "", $3); print p, $3; p = ""}' "$conf" |
		while read -r r loc; do
			path=
			[[ $loc != */* ]] || path=/${loc#*/}
			mkdir -p "$dir/$r"
			printf 'server = "https://%s"\n\n[host."http://%s/v2%s"]\n  capabilities = ["pull", "resolve"]\n  override_path = true\n' \
				"$r" "${loc%%/*}" "$path" >"$dir/$r/hosts.toml"
		done
	[ -f "$dir/registry.k8s.io/hosts.toml" ] || die "no registry.k8s.io mirror in $conf"
}

# write_containerd_config FILE writes the version-3 configuration of a
# containerd 2.x (tools/containerd) as containerd's node e2e job configures
# it, on a run's paths: its CRI plugin with io.containerd.runc.v2 and the
# host's runc for each handler of $ctr_handlers (default runc), cgroupfs,
# overlayfs, the sandbox image $ctr_pause_image, the registry mirrors of
# $ctr_hosts (write_containerd_hosts), restrict_oom_score_adj (this host
# lacks CAP_SYS_RESOURCE; podbayd clamps too), NRI off (no socket under
# /var/run/nri), the CNI conflist of $conf_dir. Paths: $ctr_root,
# $ctr_state, $ctr_runc_root, $ctr_opt, $sock.
write_containerd_config() {
	local rt handlers=
	mkdir -p "$ctr_root" "$ctr_state" "$ctr_runc_root" "$ctr_opt"
	for rt in ${ctr_handlers:-runc}; do
		handlers+="
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'$rt']
  runtime_type = 'io.containerd.runc.v2'
  runtime_path = '$ctr_out/containerd-shim-runc-v2'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'$rt'.options]
  BinaryName = '$(command -v runc)'
  Root = '$ctr_runc_root'
  SystemdCgroup = false
"
	done
	cat >"$1" <<EOC
version = 3
root = '$ctr_root'
state = '$ctr_state'
disabled_plugins = ['io.containerd.snapshotter.v1.aufs', 'io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.nri.v1.nri']

[grpc]
  address = '$sock'

[ttrpc]
  address = '$sock.ttrpc'

[plugins.'io.containerd.internal.v1.opt']
  path = '$ctr_opt'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '$ctr_pause_image'
[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '$ctr_hosts'

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
$handlers
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['/usr/lib/cni']
  conf_dir = '$conf_dir'
  max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
EOC
}

# build_crio builds CRI-O's crio (the version tools/crio pins) and its
# pinns (C, in the same module, with its Makefile: static, so gcc and the
# static libc of libc6-dev) into $crio_out (default $repo/_output/crio)
# unless they are newer than that module's go.mod and go.sum. Tags: no
# btrfs, devicemapper or ostree, OpenPGP in Go (no libgpgme), seccomp
# (libseccomp-dev: CRI-O then applies RuntimeDefault as the others do).
build_crio() {
	: "${crio_out:=$repo/_output/crio}"
	local mod=$repo/tools/crio f stale=0 start version src work
	for f in crio pinns; do
		if [ ! -x "$crio_out/$f" ] || [ "$mod/go.mod" -nt "$crio_out/$f" ] || [ "$mod/go.sum" -nt "$crio_out/$f" ]; then
			stale=1
		fi
	done
	[ "$stale" -eq 1 ] || return 0
	for f in gcc make; do
		command -v "$f" >/dev/null || die "$f not found: CRI-O's pinns is C (apt-get install gcc make)"
	done
	[ -f /usr/include/seccomp.h ] || die "CRI-O builds with seccomp: apt-get install libseccomp-dev"
	start=$SECONDS
	version=$(cd "$mod" && GOFLAGS='' go list -m -f '{{.Version}}' github.com/cri-o/cri-o)
	log "building CRI-O $version into $crio_out"
	mkdir -p "$crio_out"
	(
		cd "$mod"
		export GOFLAGS=
		nice -n 19 go build -trimpath \
			-tags 'containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp' \
			-o "$crio_out/" github.com/cri-o/cri-o/cmd/crio
	)
	src=$(cd "$mod" && GOFLAGS='' go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)
	# The module cache is read-only: pinns is built in a copy.
	work=$(mktemp -d /tmp/pbcrio-pinns.XXXXXX)
	cp -r "$src/pinns" "$work/"
	chmod -R u+w "$work"
	if ! nice -n 19 make -s -C "$work/pinns" >"$work/make.log" 2>&1; then
		cat "$work/make.log" >&2
		rm -rf "$work"
		die "building CRI-O's pinns failed"
	fi
	cp "$work/bin/pinns" "$crio_out/pinns.new"
	mv "$crio_out/pinns.new" "$crio_out/pinns"
	rm -rf "$work"
	log "CRI-O built in $((SECONDS - start)) s"
}

# write_crio_config FILE writes a crio.conf that keeps CRI-O in a run's temp
# dir: root and runroot ($crio_root, $crio_state; overlay), its socket
# $sock, runc through conmon with cgroupfs (conmon in the pod's cgroup),
# pinns and exits/attach/namespace dirs under its state, the pause image
# $crio_pause_image, drop_infra_ctr (its default: pods whose PID namespace
# is per container get no pause container), the CNI conflist of $conf_dir,
# the registries.conf $registries_conf (mirrors) and signature policy
# $policy, no NRI, metrics, hooks or irqbalance.
write_crio_config() {
	mkdir -p "$crio_root" "$crio_state" "$crio_log_dir"
	cat >"$1" <<EOC
[crio]
root = "$crio_root"
runroot = "$crio_state/storage"
storage_driver = "overlay"
log_dir = "$crio_log_dir"
version_file = "$crio_state/version"
version_file_persist = "$crio_root/version"
clean_shutdown_file = "$crio_root/clean.shutdown"

[crio.api]
listen = "$sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
drop_infra_ctr = true
pinns_path = "$crio_out/pinns"
namespaces_dir = "$crio_state/ns"
container_exits_dir = "$crio_state/exits"
container_attach_socket_dir = "$crio_state/attach"
hooks_dir = []
log_to_journald = false
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"

[crio.runtime.runtimes.runc]
runtime_path = "$(command -v runc)"
runtime_type = "oci"
runtime_root = "$crio_state/runc"
monitor_path = "$(command -v conmon)"
monitor_cgroup = "pod"

[crio.image]
pause_image = "$crio_pause_image"
signature_policy = "$policy"

[crio.network]
network_dir = "$conf_dir"
plugin_dirs = ["/usr/lib/cni"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
EOC
}

# The layers of the realistic bench image (bench-compare.sh): a Python 3.11
# runtime from Debian's packages on top of the busybox layer the registry
# adds, about 100 MB unpacked, in four layers as a Dockerfile's RUN steps
# make them.
bench_image_layers=(
	"libc6 libgcc-s1 libstdc++6 libssl3 zlib1g libffi8 libexpat1 libbz2-1.0 liblzma5 libzstd1 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libuuid1 libcrypt1 libdb5.3 libgdbm6 libnsl2 libtirpc3 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 perl-base tzdata media-types"
	"python3.11-minimal libpython3.11-minimal"
	"libpython3.11-stdlib libpython3.11 python3.11"
	"libpython3.11-dev"
)

# build_bench_image DIR writes the realistic image's layers as
# DIR/layer-N.tar.gz (gzip -n, files owned by root, fixed mtimes) unless DIR
# holds them for the same package lists: the packages from apt
# (apt-get download, dpkg-deb -x), or, offline, the files the host's
# installed packages list (dpkg -L).
build_bench_image() {
	local dir=$1 work i pkg want f
	want=$(printf '%s\n' "${bench_image_layers[@]}")
	if [ -f "$dir/packages" ] && [ "$(cat "$dir/packages")" = "$want" ]; then
		return 0
	fi
	log "building the realistic bench image's layers into $dir"
	work=$(mktemp -d /tmp/pbbenchimg.XXXXXX)
	mkdir -p "$work/debs"
	rm -rf "$dir"
	mkdir -p "$dir"
	for i in "${!bench_image_layers[@]}"; do
		mkdir -p "$work/layer-$i"
		for pkg in ${bench_image_layers[$i]}; do
			if (cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null 2>&1) ||
				(apt-get update -qq >/dev/null 2>&1 && cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null 2>&1); then
				dpkg-deb -x "$work/debs/${pkg}"_*.deb "$work/layer-$i"
			elif dpkg -s "$pkg" >/dev/null 2>&1; then
				log "apt-get download $pkg failed; taking the host's installed files"
				dpkg -L "$pkg" | while read -r f; do
					[ -f "$f" ] || [ -L "$f" ] || continue
					mkdir -p "$work/layer-$i$(dirname "$f")"
					cp -a "$f" "$work/layer-$i$f"
				done
			else
				rm -rf "$work"
				die "cannot download $pkg and it is not installed"
			fi
		done
		# usrmerge, as in Debian 12's images: the packages' /bin, /sbin,
		# /lib and /lib64 files go to /usr, and the first layer has /lib and
		# /lib64 as links into it (the busybox layer's /bin stays a
		# directory).
		for f in bin sbin lib lib64; do
			if [ -d "$work/layer-$i/$f" ] && [ ! -L "$work/layer-$i/$f" ]; then
				mkdir -p "$work/layer-$i/usr/$f"
				cp -a "$work/layer-$i/$f/." "$work/layer-$i/usr/$f/"
				rm -rf "${work:?}/layer-$i/$f"
			fi
		done
		if [ "$i" -eq 0 ]; then
			ln -s usr/lib "$work/layer-0/lib"
			ln -s usr/lib64 "$work/layer-0/lib64"
		fi
		tar -C "$work/layer-$i" --sort=name --mtime=@1704067200 --owner=0 --group=0 --numeric-owner -cf - . |
			gzip -n >"$dir/layer-$((i + 1)).tar.gz"
	done
	du -sb "$work"/layer-* | awk '{s += $1} END {printf "%.1f MB unpacked\n", s / 1e6}' >"$dir/size"
	rm -rf "$work"
	echo "$want" >"$dir/packages"
	log "realistic bench image: $(cat "$dir/size") in ${#bench_image_layers[@]} layers over busybox"
}
