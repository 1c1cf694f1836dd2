#!/usr/bin/env bash
# bench-compare.sh (make bench-compare) runs one CRI workload against
# Debian's containerd (1.6, its CRI plugin) and against podbayd on this
# host, alternating between them, and prints per operation the p50/p95 of
# each, the ratio podbay/containerd and whether issue 12's target is met.
#
# Both daemons run side by side, each fresh, in its own temp root and state
# dir, with its own socket, bridge and subnet, cgroup parent and pod log
# dir, and the same images from one local registry (podbay-testimages on a
# free loopback port, serving at its root):
#   containerd  CRI plugin, runc through io.containerd.runc.v2
#               (containerd-shim-runc-v2), overlayfs, restrict_oom_score_adj
#               (this host denies CAP_SYS_RESOURCE), sandbox_image
#               registry.k8s.io/pause:3.10, registry mirrors for
#               registry.k8s.io, docker.io, gcr.io and public.ecr.aws to the
#               local registry (plain HTTP), CNI bin_dir /usr/lib/cni and a
#               conflist equivalent to podbay's default network (bridge
#               pbcmp-ctr0 + host-local + portmap + bandwidth, ipMasq true
#               as containerd's template has), netns under its state dir;
#   podbayd     its own default network (write_default_config: bridge
#               pbcmp-pb0, host-local, portmap, bandwidth, masquerading as
#               podbay does it), the same registries mirrored through
#               registries.conf, the same pause image pulled from there.
# The workload (podbay-bench compare): in ROUNDS rounds, block by block and
# alternating which daemon goes first, the CRI RPCs one by one, pod +
# container from scratch and throughput at 10-way; then one daemon at a
# time PODS_SCALE pods, each with a running container, and the latency of
# ListPodSandbox, ListContainers, PodSandboxStatus and ListContainerStats
# with them; and each daemon's RSS (and its per-pod processes': conmon vs
# containerd-shim-runc-v2). The table is printed and written as Markdown to
# OUT.
#
# Afterwards it checks that neither daemon left anything behind (network
# namespaces, IP reservations, veths, iptables rules, conmon and shim
# processes, runtime state, mounts, cgroups, CNI cache entries), removes
# what it finds, and exits non-zero then. It ends only the processes it
# started.
#
#   make bench-compare                      # N=50, PODS_SCALE=1000: about 30 min
#   SMALL=1 ./hack/bench-compare.sh         # development: N=10, 2 rounds, 30 pods
#   HANDLER_TYPE=vm ./hack/bench-compare.sh # podbay's handler as vm (containerd-shim-runc-v2)
#
# Env: N samples per RPC (default 50), ROUNDS (5), THROUGHPUT_N lifecycles
# per round and daemon (20), CONCURRENCY (10), PODS_SCALE (1000; 0 skips
# the scale phase), SCALE_SAMPLES per RPC (200), HANDLER_TYPE (oci or vm),
# OUT (bin/bench-compare.md), SMALL=1 (smaller defaults for development).
#
# Needs root, containerd and containerd-shim-runc-v2 (Debian package
# containerd), runc, conmon, the CNI plugins in /usr/lib/cni and
# /bin/busybox (busybox-static).
set -euo pipefail

if [ "${SMALL:-0}" = 1 ]; then
	N=${N:-10} ROUNDS=${ROUNDS:-2} THROUGHPUT_N=${THROUGHPUT_N:-10} PODS_SCALE=${PODS_SCALE:-30} SCALE_SAMPLES=${SCALE_SAMPLES:-50}
fi
N=${N:-50}
ROUNDS=${ROUNDS:-5}
THROUGHPUT_N=${THROUGHPUT_N:-20}
CONCURRENCY=${CONCURRENCY:-10}
PODS_SCALE=${PODS_SCALE:-1000}
SCALE_SAMPLES=${SCALE_SAMPLES:-200}
HANDLER_TYPE=${HANDLER_TYPE:-oci}

log() { echo "bench-compare.sh: $*" >&2; }
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$repo/bin/bench-compare.md}
mkdir -p "$(dirname "$OUT")"

[ "$(id -u)" -eq 0 ] || die "must run as root (it runs two container runtimes)"
for v in N ROUNDS THROUGHPUT_N CONCURRENCY SCALE_SAMPLES; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $PODS_SCALE =~ ^[0-9]+$ ]] || die "PODS_SCALE must be a non-negative integer, got '$PODS_SCALE'"
[[ $HANDLER_TYPE == oci || $HANDLER_TYPE == vm ]] || die "HANDLER_TYPE must be oci or vm, got '$HANDLER_TYPE'"
for tool in go containerd containerd-shim-runc-v2 runc conmon ip ss iptables-save iptables-restore setsid; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH (make deps-test installs containerd)"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni"
[ -x /bin/busybox ] || die "/bin/busybox not found: the test images are built from it (apt-get install busybox-static)"

# The networks: two subnets of 10.196.0.0/16, each big enough for
# PODS_SCALE pods and the throughput block's.
readonly pb_net=pbcmp-podbay ctr_net=pbcmp-containerd
readonly pb_bridge=pbcmp-pb0 ctr_bridge=pbcmp-ctr0
need=$((PODS_SCALE + 4 * CONCURRENCY + 16))
bits=8
while [ $((1 << bits)) -lt "$need" ]; do bits=$((bits + 1)); done
[ "$bits" -le 15 ] || die "PODS_SCALE=$PODS_SCALE needs more than a /17 per daemon"
pb_subnet=10.196.0.0/$((32 - bits))
ctr_subnet=10.196.128.0/$((32 - bits))
for b in "$pb_bridge" "$ctr_bridge"; do
	if ip link show "$b" >/dev/null 2>&1; then
		die "bridge $b already exists: another bench-compare is running, or an earlier one leaked it (ip link del $b)"
	fi
done
if ip -4 route show | grep -q '^10\.196\.'; then
	die "a route into 10.196.0.0/16 already exists; the bench networks would clash with it"
fi
if [ -n "$(find "/var/lib/cni/networks/$pb_net" -type f ! -name 'last_reserved_ip*' ! -name lock 2>/dev/null)" ]; then
	die "/var/lib/cni/networks/$pb_net holds IP reservations of an earlier run"
fi

tmp=$(mktemp -d /tmp/pbcmp.XXXXXX)
top=$tmp
bin=$tmp/bin
pb=$tmp/pb
ctr=$tmp/ctr
readonly cgroup_base=/pbcmp-${tmp##*.}
registries_conf=$tmp/registries.conf
policy=$tmp/policy.json
image=registry.k8s.io/busybox:latest
pause_image=registry.k8s.io/pause:3.10

registry_pid=
pb_pid=
ctr_pid=
run_tmpfs=
failed=0

# stop_pid stops a process this script started: SIGTERM, then SIGKILL
# after $2 tenths of a second. It returns non-zero when it had to kill.
stop_pid() {
	local pid=$1 what=$2 tenths=${3:-300}
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq "$tenths"); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "$what (pid $pid) still running after SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		return 1
	fi
	wait "$pid" 2>/dev/null || true
}

# The leak checks of lib.sh, once per daemon: its functions read these
# names, which each wrapper sets for its daemon (bash's dynamic scope).
pb_vars() {
	tmp=$pb net_name=$pb_net bridge=$pb_bridge ipam_dir=/var/lib/cni/networks netns_dir=$pb/netns
	root_dir=$pb/root state_dir=$pb/state storage_root=$pb/root/storage cgroup_parent=$cgroup_base/pb pod_log_dir=$top/podlogs/pb
	podbay_config=$pb/podbayd.toml sock=$pb/podbayd.sock
	runtime_root=$pb/state/runtimes/runc runtime_bin=runc registry_pid=
	[ "$HANDLER_TYPE" != vm ] || runtime_root=$pb/state/shim-runc/podbay
}
ctr_vars() {
	tmp=$ctr net_name=$ctr_net bridge=$ctr_bridge ipam_dir=$ctr/ipam netns_dir=$ctr/state/io.containerd.grpc.v1.cri/netns
	root_dir=$ctr/none state_dir=$ctr/none storage_root=$ctr/none cgroup_parent=$cgroup_base/ctr pod_log_dir=$top/podlogs/ctr
	podbay_config=
	runtime_root=$ctr/runc/k8s.io runtime_bin=runc registry_pid=
}
side_leaks() {
	local tmp net_name bridge ipam_dir netns_dir root_dir state_dir storage_root cgroup_parent pod_log_dir runtime_root runtime_bin registry_pid podbay_config sock
	"$1"_vars
	find_leaks | sed "s/^/$1: /"
	# What lib.sh does not know: rules naming the subnet (a masquerade
	# rule the daemon owns), CNI result cache entries outside the temp dir.
	iptables-save 2>/dev/null | grep -F "$2" | grep -vF "name: \\\"$net_name\\\"" | sed "s/^/$1: iptables rule: /" || true
	find /var/lib/cni/results -maxdepth 1 -name "$net_name-*" -printf "$1: CNI cache entry %p\n" 2>/dev/null || true
}
side_remove_leaks() {
	local tmp net_name bridge ipam_dir netns_dir root_dir state_dir storage_root cgroup_parent pod_log_dir runtime_root runtime_bin registry_pid podbay_config sock
	"$1"_vars
	remove_leaks
	local rule
	iptables-save -t nat 2>/dev/null | grep -F "$2" | grep '^-A ' | sed 's/^-A //' | while read -r rule; do
		eval "iptables -t nat -D $rule" || true
	done
	find /var/lib/cni/results -maxdepth 1 -name "$net_name-*" -delete 2>/dev/null || true
	[ ! -d "$netns_dir" ] || find "$netns_dir" -mindepth 1 -maxdepth 1 -delete 2>/dev/null || true
	[ "$ipam_dir" != /var/lib/cni/networks ] || rm -rf "${ipam_dir:?}/$net_name"
}

# new_shim_sockets lists the shim sockets that appeared during the run and
# that no process listens on. /run/containerd/s is shared with every shim on
# the host (other runs' vm handlers): a socket with a live listener is a
# live shim's, and this run's shims are all gone once find_leaks has no
# shim process of ours to report.
new_shim_sockets() {
	local f
	[ -f "$top/shim-sockets-before" ] || return 0
	for f in $(comm -13 "$top/shim-sockets-before" <(shim_sockets)); do
		[ -n "$(ss -Hxl src "/run/containerd/s/$f" 2>/dev/null)" ] || echo "$f"
	done
}

finish() {
	local rc=$? leaks f
	set +e
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || failed=1
	# podbay-bench has removed its pods (also on failure); a daemon still
	# holding some is caught by the leak check below.
	stop_pid "$pb_pid" podbayd || failed=1
	pb_pid=
	stop_pid "$ctr_pid" containerd || failed=1
	ctr_pid=
	stop_pid "$registry_pid" podbay-testimages 50
	registry_pid=

	leaks=$(
		side_leaks pb "$pb_subnet"
		side_leaks ctr "$ctr_subnet"
		new_shim_sockets | sed 's|^|shim socket /run/containerd/s/|'
	)
	if [ -n "$leaks" ]; then
		failed=1
		print_leaks "$leaks"
		side_remove_leaks pb "$pb_subnet"
		side_remove_leaks ctr "$ctr_subnet"
		for f in $(new_shim_sockets); do rm -f "/run/containerd/s/$f"; done
	fi
	# An empty host-local dir (last_reserved_ip, lock) of podbay's network.
	rm -rf "/var/lib/cni/networks/$pb_net"
	ip link del "$pb_bridge" 2>/dev/null
	ip link del "$ctr_bridge" 2>/dev/null
	remove_cgroups "$cgroup_base"
	for f in $run_tmpfs; do
		! mountpoint -q "$f" || umount "$f" || failed=1
	done

	if [ "$failed" -ne 0 ] || [ -n "${KEEP_LOGS:-}" ]; then
		keep_logs pbcmp-logs "daemon and registry"
	fi
	remove_tmp
	if [ "$failed" -ne 0 ]; then
		log "FAILED (wall time ${SECONDS} s)"
		exit 1
	fi
	log "ok: nothing left behind (wall time ${SECONDS} s)"
	exit 0
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$bin" "$pb"/{root,state,net.d,cni-cache,netns,registries.d} "$ctr"/{root,state,net.d,ipam,runc,opt} "$tmp"/podlogs/{pb,ctr}
# Each daemon's run-time state on a tmpfs of its own, as on a node, where
# /run is one: podbayd's --state (/run/podbay: runtime state, exits, attach
# sockets, netns), containerd's state (/run/containerd: bundles, netns) and
# its runc root (/run/containerd/runc). Their roots stay on the temp dir's
# disk, as /var/lib does.
run_tmpfs="$pb/state $pb/netns $ctr/state $ctr/runc"
for f in $run_tmpfs; do
	mount -t tmpfs -o mode=0755 pbcmp-run "$f"
done
shim_sockets >"$top/shim-sockets-before"

build_binaries podbay-bench

# The registry serves the default image set at its root (--prefix ""), so
# that a mirror of registry.k8s.io finds registry.k8s.io/pause:3.10 and
# registry.k8s.io/busybox:latest there; the pause image runs podbay-pause.
registry_args=()
[ "${REGISTRY_VERBOSE:-0}" = 0 ] || registry_args+=(-v)
start_registry busybox:latest --prefix "" --pause-binary "$bin/podbay-pause" "${registry_args[@]}"
registry=${registry_image%%/*}

mirrored=(registry.k8s.io docker.io gcr.io public.ecr.aws)

# podbay: registries.conf mirrors, as an air-gapped node has them.
{
	echo 'unqualified-search-registries = []'
	for r in "${mirrored[@]}"; do
		printf '\n[[registry]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$r" "$registry"
		printf '\n[[registry.mirror]]\nlocation = "%s"\ninsecure = true\n' "$registry"
	done
} >"$registries_conf"
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$policy"

plugin_dirs='"/usr/lib/cni"'
[ -d /opt/cni/bin ] && plugin_dirs+=', "/opt/cni/bin"'
cat >"$pb/podbayd.toml" <<EOF
conmon = "$(command -v conmon)"
pause_binary = "$bin/podbay-pause"
pause_image = "$pause_image"
default_cgroup_parent = "$cgroup_base/pb"
netns_dir = "$pb/netns"

[image]
storage_root = "$pb/root/storage"
run_root = "$pb/state/storage"
registries_conf_dir = "$pb/registries.d"
signature_policy = "$policy"

[network]
conf_dir = "$pb/net.d"
plugin_dirs = [$plugin_dirs]
cache_dir = "$pb/cni-cache"
write_default_config = true
default_network_name = "$pb_net"
default_bridge = "$pb_bridge"
default_subnet = "$pb_subnet"

[nri]
socket_path = "$pb/nri.sock"
plugin_path = "$pb/nri-plugins"
plugin_config_path = "$pb/nri-conf.d"
EOF
if [ "$HANDLER_TYPE" = vm ]; then
	vm_runtime_table runc "$pb/state/shim-runc" >>"$pb/podbayd.toml"
fi

# containerd: the conflist equivalent to podbay's default network.
cat >"$ctr/net.d/10-$ctr_net.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$ctr_net",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$ctr_bridge",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$ctr/ipam",
        "ranges": [[{"subnet": "$ctr_subnet"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}
EOF
{
	cat <<EOF
version = 2
root = "$ctr/root"
state = "$ctr/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$ctr/containerd.sock"

[ttrpc]
  address = "$ctr/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$ctr/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "$(command -v runc)"
  Root = "$ctr/runc"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$ctr/net.d"
  max_conf_num = 1
EOF
	for r in "${mirrored[@]}"; do
		printf '\n[plugins."io.containerd.grpc.v1.cri".registry.mirrors."%s"]\n  endpoint = ["http://%s"]\n' "$r" "$registry"
	done
} >"$ctr/config.toml"

# Both daemons in sessions of their own: a Ctrl-C reaches podbay-bench,
# which then removes its pods, and not the daemons it still needs.
setsid containerd --config "$ctr/config.toml" >"$tmp/containerd.log" 2>&1 &
ctr_pid=$!
metrics_port=$(free_port) || die "no free TCP port for podbayd's metrics"
setsid "$bin/podbayd" --config "$pb/podbayd.toml" --listen "$pb/podbayd.sock" --root "$pb/root" --state "$pb/state" \
	--registries-conf "$registries_conf" --metrics-address "127.0.0.1:$metrics_port" --log-level info >"$tmp/podbayd.log" 2>&1 &
pb_pid=$!
# both_serving: both sockets, podbay's default network written, its
# metrics endpoint up.
both_serving() {
	[ -S "$pb/podbayd.sock" ] && [ -S "$ctr/containerd.sock" ] && [ -f "$pb/net.d/10-podbay.conflist" ] &&
		(exec 3<>"/dev/tcp/127.0.0.1/$metrics_port") 2>/dev/null
}
if ! wait_until 300 "$pb_pid $ctr_pid" both_serving; then
	tail -n 20 "$tmp/podbayd.log" "$tmp/containerd.log" >&2
	die "podbayd and containerd did not both start serving within 30 s"
fi
pb_masq=$(grep -oE '"ipMasq": *(true|false)' "$pb/net.d/10-podbay.conflist" | grep -oE 'true|false' || echo absent)

handler_note="podbay handler oci (runc, conmon per container)"
[ "$HANDLER_TYPE" = oci ] || handler_note="podbay handler vm (containerd-shim-runc-v2 driving runc)"
title="containerd $(containerd --version | awk '{print $3}') (CRI plugin, io.containerd.runc.v2, overlayfs) vs podbay $(git -C "$repo" describe --always --dirty 2>/dev/null || echo '?'), $handler_note; $(nproc) CPUs, Linux $(uname -r), $(runc --version | head -n1); N=$N per RPC in $ROUNDS alternating rounds, PODS_SCALE=$PODS_SCALE"
echo "$title"
echo "networks: podbay its default network $pb_subnet on $pb_bridge (conflist ipMasq $pb_masq); containerd $ctr_subnet on $ctr_bridge (bridge ipMasq true, host-local, portmap, bandwidth); registry $registry"

# The floor: runc's create and start alone, on a busybox root filesystem.
floor_rootfs=$tmp/floor-rootfs
mkdir -p "$floor_rootfs/bin" "$floor_rootfs/proc" "$floor_rootfs/sys" "$floor_rootfs/dev"
cp /bin/busybox "$floor_rootfs/bin/"
ln -s busybox "$floor_rootfs/bin/sleep"
floor_args=()
[ "$HANDLER_TYPE" = oci ] && floor_args=(-floor-runtime "$(command -v runc)" -floor-rootfs "$floor_rootfs" \
	-floor-dir "$tmp/floor" -floor-cgroup-parent "$cgroup_base/floor")

"$bin/podbay-bench" compare "${floor_args[@]}" \
	-containerd-socket "$ctr/containerd.sock" -containerd-pid "$ctr_pid" -containerd-procs "$ctr/" \
	-containerd-log-dir "$tmp/podlogs/ctr" -containerd-cgroup-parent "$cgroup_base/ctr" \
	-podbay-socket "$pb/podbayd.sock" -podbay-pid "$pb_pid" -podbay-procs "$pb/" \
	-podbay-log-dir "$tmp/podlogs/pb" -podbay-cgroup-parent "$cgroup_base/pb" \
	-podbay-metrics "http://127.0.0.1:$metrics_port/metrics" \
	-image "$image" -n "$N" -rounds "$ROUNDS" -throughput-n "$THROUGHPUT_N" -concurrency "$CONCURRENCY" \
	-scale "$PODS_SCALE" -scale-samples "$SCALE_SAMPLES" -markdown "$OUT" -title "$title" \
	-note "Networks: podbay its default network ($pb_subnet, its conflist's ipMasq: $pb_masq); containerd the equivalent conflist (bridge + host-local + portmap + bandwidth, ipMasq true as containerd's template has); both daemons up side by side on their own bridges." \
	-note "Images from one local registry (pause: podbay-pause; busybox) through registry mirrors on both; every RPC from one client, the RPCs one by one unless noted."

if grep -q 'level=ERROR' "$tmp/podbayd.log"; then
	log "podbayd logged errors:"
	grep 'level=ERROR' "$tmp/podbayd.log" | head -n 20 >&2
	failed=1
fi
