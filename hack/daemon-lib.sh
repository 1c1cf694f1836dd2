# Shared by hack/bench.sh and hack/scale.sh (after hack/lib.sh): the
# environment of a podbayd run with podbay-testimages' busybox, everything
# in a temp dir. Expects the caller to define log(), to set net_name and
# bridge, and N, CONCURRENCY and MODES (checked here, as bench.sh has them).
# shellcheck shell=bash disable=SC2034,SC2154

# check_bench_host OCTET SMALL_BITS checks the knobs and the host, and sets
# subnet: 10.OCTET.0.0/SMALL_BITS, or /16 when N > 200.
check_bench_host() {
	local c m tool
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
	if [ "$N" -gt 200 ]; then subnet=10.$1.0.0/16; else subnet=10.$1.0.0/$2; fi
	if ip -4 route show | grep -q "^10\\.$1\\."; then
		die "a route into 10.$1.0.0/16 already exists; the bench network would clash with it"
	fi
}

# bench_dirs NAME makes the temp dir /tmp/NAME.XXXXXX and sets the paths of
# the run in it, the cgroup parent /NAME-XXXXXX, the runtime (RUNTIME,
# HANDLER_TYPE) and the run's state (daemon_pid, registry_pid, failed).
bench_dirs() {
	run_name=$1
	tmp=$(mktemp -d "/tmp/$run_name.XXXXXX")
	tmp_paths
	pod_log_dir=$tmp/podlogs
	cgroup_parent=/$run_name-${tmp##*.}
	runtime_root=$state_dir/runtimes/runc
	runtime_bin=${RUNTIME:-runc}
	HANDLER_TYPE=${HANDLER_TYPE:-oci}
	[[ $HANDLER_TYPE == oci || $HANDLER_TYPE == vm ]] || die "HANDLER_TYPE must be oci or vm, got '$HANDLER_TYPE'"
	if [ "$HANDLER_TYPE" = vm ]; then
		command -v containerd-shim-runc-v2 >/dev/null || die "containerd-shim-runc-v2 not found (Debian package containerd)"
		shim_runc_root=$state_dir/shim-runc
		runtime_root=$shim_runc_root/podbay
	fi
	storage_run_root=$state_dir/storage

	daemon_pid=
	registry_pid=
	failed=0
}

# bench_init NAME OCTET SMALL_BITS: check_bench_host OCTET SMALL_BITS,
# bench_dirs NAME, bench_finish as the EXIT trap, and the run's dirs made.
bench_init() {
	check_bench_host "$2" "$3"
	bench_dirs "$1"
	trap bench_finish EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	mkdir -p "$bin" "$root_dir" "$state_dir" "$conf_dir" "$ipam_dir" "$cache_dir" "$registries_dir" "$pod_log_dir" "$netns_dir"
}

# bench_configure starts the registry (image: its busybox, registry: its
# host:port) and writes registries.conf, policy.json, podbayd's config
# with the runc handler's table, and the CNI network.
bench_configure() {
	start_registry test/busybox:latest
	image=$registry_image
	registry=${image%%/*}
	write_bench_registries
	write_daemon_config "$storage_run_root"
	write_runtime_config
	write_conflist
}

# bench_finish, the EXIT trap: stops the daemon and the registry, reports
# and removes leaks, removes the bridge, the cgroups and the temp dir (the
# logs of a failed run are kept) and exits 1 when anything failed.
bench_finish() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || failed=1
	stop_daemon || failed=1
	stop_registry

	clean_run_host

	[ "$failed" -eq 0 ] || keep_logs "$run_name-logs" "daemon and registry"
	remove_tmp
	if [ "$failed" -ne 0 ]; then
		log "FAILED"
		exit 1
	fi
	log "ok: nothing left behind"
	exit 0
}

# write_bench_registries writes registries.conf and policy.json: only
# $registry is reachable; registry.k8s.io (the default pause image) and
# docker.io (short names) are blocked, so nothing leaves the machine. The
# empty drop-in dir keeps the host's registries.conf.d out, and the policy
# the host's policy.json.
write_bench_registries() {
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
}

# write_runtime_config appends the runc handler's table to $config: a "vm"
# one with HANDLER_TYPE=vm, the RUNTIME binary with RUNTIME set.
write_runtime_config() {
	if [ "$HANDLER_TYPE" = vm ]; then
		vm_runtime_table "$runtime_bin" "$shim_runc_root" >>"$config"
	elif [ -n "${RUNTIME:-}" ]; then
		printf '\n[runtimes.runc]\npath = "%s"\n' "$RUNTIME" >>"$config"
	fi
}

# start_podbayd BIN LOG LEVEL starts podbayd BIN on $sock with its metrics
# on $port, logging to LOG, and sets daemon_pid. setsid: its own session,
# so that a Ctrl-C reaches the client (which then removes its containers
# and pods) but not the daemon it still needs.
start_podbayd() {
	rm -f "$sock"
	setsid "$1" --config "$config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--registries-conf "$registries_conf" --metrics-address "127.0.0.1:$port" --log-level "$3" >"$2" 2>&1 &
	daemon_pid=$!
}
