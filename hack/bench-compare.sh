#!/usr/bin/env bash
# bench-compare.sh (make bench-compare) runs one CRI workload against
# podbayd and the runtimes users pick today (the anchors) on this host,
# alternating between them, and prints per operation the p50/p95 of each,
# the ratio podbay / the faster anchor and whether issue 26's target is
# met.
#
# The anchors (ANCHORS, default "containerd2 crio"):
#   containerd2   containerd 2.4 (tools/containerd, built into
#                 _output/containerd as hack/e2e-node.sh builds it): its CRI
#                 plugin, version-3 config, io.containerd.runc.v2 with the
#                 host's runc, overlayfs, restrict_oom_score_adj (this host
#                 denies CAP_SYS_RESOURCE), registry mirrors in hosts.toml;
#   crio          CRI-O (tools/crio, crio and its pinns built into
#                 _output/crio): runc through conmon, cgroupfs, overlay,
#                 drop_infra_ctr (its default), mirrors in registries.conf;
#   containerd16  Debian's containerd 1.6 (package containerd), version-2
#                 config, optional.
# Every daemon runs fresh, side by side, in its own temp root and state
# dir (run-time state on a tmpfs, as /run is on a node; the root on a
# file system of its own, see ROOT_FS), with its own
# socket, bridge and subnet, cgroup parent and pod log dir, and the same
# images from one local registry (podbay-testimages on a free loopback
# port, serving at its root, mirrored for registry.k8s.io, docker.io,
# gcr.io and public.ecr.aws): the pause image registry.k8s.io/pause:3.10
# (podbay-pause), busybox, and a realistic image (registry.k8s.io/bench/
# python:3.11: a Python 3.11 runtime from Debian's packages in four
# gzip-compressed layers over busybox, ~100 MB unpacked, built once into
# _output/bench-image).
#
# NETWORK=same (the default, the headline table): every daemon, podbay
# included, gets the identical conflist (bridge with ipMasq true and
# hairpin, host-local in its temp dir, portmap), its own bridge and subnet
# (the names differ, nothing else). Debian's bandwidth plugin (1.1.1)
# crashes on CRI-O's CNI CHECK, so the shared chain has no bandwidth.
# NETWORK=own: podbay on its own default network (write_default_config:
# podbay's masquerade, no per-pod plugin chain), the anchors on the shared
# conflist. NETWORK=both: two podbayds, one of each, and a table for each.
#
# The workload (podbay-bench compare): requests shaped as the kubelet's
# (PID namespace per container, RuntimeDefault seccomp, resources, labels,
# log dirs the bench creates and removes); in ROUNDS rounds, block by block
# and rotating which daemon goes first, the CRI RPCs one by one, PullImage
# of busybox and of the realistic image (removed before every sample), pod
# + container from scratch with each, throughput at 10-way; the runc floor
# (runc create + start of a trivial bundle) and the CNI floor (the shared
# conflist's ADD and DEL alone, through libcni with no daemon or runtime,
# each in a fresh network namespace, on a bridge and subnet of its own,
# pbcmp-floor: what RunPodSandbox and StopPodSandbox pay on that network
# whatever the runtime) each round; then one daemon at
# a time PODS_SCALE pods, each with a running container, and the latency of
# ListPodSandbox, ListContainers, PodSandboxStatus and ListContainerStats
# with them; and each daemon's RSS and its per-pod processes' (conmon,
# containerd-shim-runc-v2). The tables are printed and written as Markdown
# to OUT.
#
# Afterwards it checks that no daemon, nor the CNI floor, left anything
# behind (network
# namespaces, IP reservations, veths, iptables rules, conmon and shim
# processes, runtime state, mounts, cgroups, CNI cache entries), removes
# what it finds, and exits non-zero then. It ends only the processes it
# started.
#
#   make bench-compare                      # N=50, PODS_SCALE=300
#   SMALL=1 ./hack/bench-compare.sh         # development: N=4, 2 rounds, 10 pods
#   NETWORK=both ANCHORS="containerd2 crio containerd16" ./hack/bench-compare.sh
#   HANDLER_TYPE=vm ./hack/bench-compare.sh # podbay's handler as vm (containerd-shim-runc-v2)
#
# ROOT_FS=ext4 (the default): each daemon's root (images, layers,
# containers' writable layers: /var/lib/<runtime> on a node) on a fresh
# ext4 of its own, made by mkfs.ext4 with Debian's defaults (a journal)
# in a sparse loop file, as a node's /var/lib is. ROOT_FS=host: the roots
# on the temp dir's file system as it is. The choice matters for the
# image rows: ext4 without a journal (this development VM's root) skips,
# when it allocates an inode, every inode freed in the last minute (six
# while its inode-table block is dirty; recently_deleted() in
# fs/ext4/ialloc.c, checked only without a journal), so a pull right
# after the same image was removed scans past every inode the removal
# freed, for every file it creates: podbay and CRI-O pay it, containerd
# 2.4, for a reason not found, does not (docs/performance.md).
#
# Env: ANCHORS, NETWORK, ROOT_FS, N samples per RPC (default 50), IMAGE_N samples
# of the realistic image's rows (20), ROUNDS (5), THROUGHPUT_N lifecycles
# per round and daemon (20), CONCURRENCY (10), PODS_SCALE (300; 0 skips the
# scale phase), SCALE_SAMPLES per RPC (200), HANDLER_TYPE (oci or vm),
# SANDBOX_PROCESS (podbayd's sandbox_process: auto, or always to keep a
# pause container for every pod, for comparing the two), OUT
# (bin/bench-compare.md), SMALL=1 (smaller defaults for development).
#
# Needs root, go, gcc, make and libseccomp-dev (CRI-O), runc, conmon, the
# CNI plugins in /usr/lib/cni, /bin/busybox (busybox-static), apt-get and
# dpkg-deb (the realistic image); containerd (Debian) for containerd16.
set -euo pipefail

if [ "${SMALL:-0}" = 1 ]; then
	N=${N:-4} IMAGE_N=${IMAGE_N:-2} ROUNDS=${ROUNDS:-2} THROUGHPUT_N=${THROUGHPUT_N:-10} PODS_SCALE=${PODS_SCALE:-10} SCALE_SAMPLES=${SCALE_SAMPLES:-20}
fi
N=${N:-50}
IMAGE_N=${IMAGE_N:-20}
ROUNDS=${ROUNDS:-5}
THROUGHPUT_N=${THROUGHPUT_N:-20}
CONCURRENCY=${CONCURRENCY:-10}
PODS_SCALE=${PODS_SCALE:-300}
SCALE_SAMPLES=${SCALE_SAMPLES:-200}
HANDLER_TYPE=${HANDLER_TYPE:-oci}
SANDBOX_PROCESS=${SANDBOX_PROCESS:-auto}
ROOT_FS=${ROOT_FS:-ext4}
# The Makefile's build tags, for a run without make.
export GOFLAGS=${GOFLAGS:--tags=containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,nri_no_wasm,grpcnotrace}
ANCHORS=${ANCHORS:-containerd2 crio}
NETWORK=${NETWORK:-same}

log() { echo "bench-compare.sh: $*" >&2; }
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$repo/bin/bench-compare.md}
mkdir -p "$(dirname "$OUT")"

[ "$(id -u)" -eq 0 ] || die "must run as root (it runs several container runtimes)"
for v in N IMAGE_N ROUNDS THROUGHPUT_N CONCURRENCY SCALE_SAMPLES; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ "$IMAGE_N" -ge "$ROUNDS" ] || die "IMAGE_N ($IMAGE_N) must be at least ROUNDS ($ROUNDS)"
[[ $PODS_SCALE =~ ^[0-9]+$ ]] || die "PODS_SCALE must be a non-negative integer, got '$PODS_SCALE'"
[[ $HANDLER_TYPE == oci || $HANDLER_TYPE == vm ]] || die "HANDLER_TYPE must be oci or vm, got '$HANDLER_TYPE'"
[[ $SANDBOX_PROCESS == auto || $SANDBOX_PROCESS == always ]] || die "SANDBOX_PROCESS must be auto or always, got '$SANDBOX_PROCESS'"
[[ $ROOT_FS == ext4 || $ROOT_FS == host ]] || die "ROOT_FS must be ext4 or host, got '$ROOT_FS'"

# The sides: the anchors, then podbay's (podbay on the shared conflist,
# podbay-own on its default network).
sides=()
for a in $ANCHORS; do
	case "$a" in
	containerd2 | crio | containerd16) [[ " ${sides[*]} " == *" $a "* ]] || sides+=("$a") ;;
	*) die "ANCHORS: unknown anchor '$a' (containerd2, crio, containerd16)" ;;
	esac
done
[ "${#sides[@]}" -gt 0 ] || die "ANCHORS is empty"
case "$NETWORK" in
same) sides+=(podbay) ;;
own) sides+=(podbay-own) ;;
both) sides+=(podbay podbay-own) ;;
*) die "NETWORK must be same, own or both, got '$NETWORK'" ;;
esac
has_side() { [[ " ${sides[*]} " == *" $1 "* ]]; }

tools=(go runc conmon ip ss iptables-save iptables-restore setsid jq apt-get dpkg-deb)
[ "$ROOT_FS" = host ] || tools+=(mkfs.ext4)
has_side containerd16 && tools+=(containerd containerd-shim-runc-v2)
for tool in "${tools[@]}"; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni"
[ -x /bin/busybox ] || die "/bin/busybox not found: the test images are built from it (apt-get install busybox-static)"

# The networks: a subnet of 10.196.0.0/16 per side, each big enough for
# PODS_SCALE pods and the throughput block's, and the next one for the CNI
# floor's network (cni-floor: its dir under $top, bridge pbcmp-floor).
need=$((PODS_SCALE + 4 * CONCURRENCY + 16))
bits=8
while [ $((1 << bits)) -lt "$need" ]; do bits=$((bits + 1)); done
[ "$bits" -le 13 ] || die "PODS_SCALE=$PODS_SCALE needs more than a /19 per daemon"
declare -A net_of bridge_of subnet_of
# nets: the sides' and the CNI floor's, for the leak check.
nets=("${sides[@]}" cni-floor)
i=0
for s in "${nets[@]}"; do
	net_of[$s]=pbcmp-$s
	case "$s" in
	containerd2) bridge_of[$s]=pbcmp-ctr2 ;;
	crio) bridge_of[$s]=pbcmp-crio ;;
	containerd16) bridge_of[$s]=pbcmp-ctr16 ;;
	podbay) bridge_of[$s]=pbcmp-pb ;;
	podbay-own) bridge_of[$s]=pbcmp-pbown ;;
	cni-floor) net_of[$s]=pbcmp-floor bridge_of[$s]=pbcmp-floor ;;
	esac
	base=$((i << bits))
	subnet_of[$s]=10.196.$((base >> 8)).$((base & 255))/$((32 - bits))
	i=$((i + 1))
	if ip link show "${bridge_of[$s]}" >/dev/null 2>&1; then
		die "bridge ${bridge_of[$s]} already exists: another bench-compare is running, or an earlier one leaked it (ip link del ${bridge_of[$s]})"
	fi
done
if ip -4 route show | grep -q '^10\.196\.'; then
	die "a route into 10.196.0.0/16 already exists; the bench networks would clash with it"
fi
if [ -n "$(find /var/lib/cni/networks/pbcmp-podbay-own -type f ! -name 'last_reserved_ip*' ! -name lock 2>/dev/null)" ]; then
	die "/var/lib/cni/networks/pbcmp-podbay-own holds IP reservations of an earlier run"
fi

# The anchors' binaries, built before anything is set up.
ctr_out=$repo/_output/containerd
crio_out=$repo/_output/crio
has_side containerd2 && build_containerd
has_side crio && build_crio
image_dir=$repo/_output/bench-image
build_bench_image "$image_dir"

tmp=$(mktemp -d /tmp/pbcmp.XXXXXX)
top=$tmp
bin=$tmp/bin
readonly cgroup_base=/pbcmp-${tmp##*.}
registries_conf=$tmp/registries.conf
policy=$tmp/policy.json
image=registry.k8s.io/busybox:latest
big_image=registry.k8s.io/bench/python:3.11
pause_image=registry.k8s.io/pause:3.10

registry_pid=
declare -A pid_of sock_of
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

# side_vars SIDE sets the names lib.sh's leak checks read for one side,
# or for the CNI floor's network (cni-floor) (bash's dynamic scope: the
# callers declare them local).
side_vars() {
	local d=$top/$1
	tmp=$d net_name=${net_of[$1]} bridge=${bridge_of[$1]} ipam_dir=$d/ipam
	cgroup_parent=$cgroup_base/$1 pod_log_dir=$top/podlogs/$1
	root_dir=$d/none state_dir=$d/none storage_root=$d/none podbay_config= sock=${sock_of[$1]:-}
	runtime_bin=runc registry_pid=
	case "$1" in
	containerd2)
		netns_dir=$d/state/io.containerd.grpc.v1.cri/netns runtime_root=$d/runc/k8s.io
		;;
	containerd16)
		netns_dir=$d/state/io.containerd.grpc.v1.cri/netns runtime_root=$d/runc/k8s.io
		;;
	crio)
		netns_dir=$d/state/ns/netns runtime_root=$d/state/runc
		;;
	podbay | podbay-own)
		netns_dir=$d/netns root_dir=$d/root state_dir=$d/state storage_root=$d/root/storage
		podbay_config=$d/podbayd.toml runtime_root=$d/state/runtimes/runc
		[ "$HANDLER_TYPE" != vm ] || runtime_root=$d/state/shim-runc/podbay
		[ "$1" != podbay-own ] || ipam_dir=/var/lib/cni/networks
		;;
	cni-floor)
		netns_dir=$d/netns runtime_root=$d/none
		;;
	esac
}
side_leaks() {
	local tmp net_name bridge ipam_dir netns_dir root_dir state_dir storage_root cgroup_parent pod_log_dir runtime_root runtime_bin registry_pid podbay_config sock
	side_vars "$1"
	find_leaks | sed "s/^/$1: /"
	# What lib.sh does not know: rules naming the subnet (a masquerade
	# rule the daemon owns), CNI result cache entries outside the temp dir,
	# CRI-O's other pinned namespaces.
	iptables-save 2>/dev/null | grep -F "${subnet_of[$1]}" | grep -vF "name: \\\"$net_name\\\"" | sed "s/^/$1: iptables rule: /" || true
	find /var/lib/cni/results -maxdepth 1 -name "$net_name-*" -printf "$1: CNI cache entry %p\n" 2>/dev/null || true
	if [ "$1" = crio ] && [ -d "$tmp/state/ns" ]; then
		find "$tmp/state/ns" -mindepth 2 -maxdepth 2 ! -path '*/netns/*' -printf "$1: pinned namespace %p\n"
	fi
	if [ "$1" = cni-floor ] && [ -d "$tmp/cache/results" ]; then
		find "$tmp/cache/results" -mindepth 1 -printf "$1: CNI cache entry %p\n"
	fi
}
side_remove_leaks() {
	local tmp net_name bridge ipam_dir netns_dir root_dir state_dir storage_root cgroup_parent pod_log_dir runtime_root runtime_bin registry_pid podbay_config sock
	side_vars "$1"
	remove_leaks
	local rule
	iptables-save -t nat 2>/dev/null | grep -F "${subnet_of[$1]}" | grep '^-A ' | sed 's/^-A //' | while read -r rule; do
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
	local rc=$? leaks f s
	set +e
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || failed=1
	# podbay-bench has removed its pods (also on failure); a daemon still
	# holding some is caught by the leak check below.
	for s in "${sides[@]}"; do
		stop_pid "${pid_of[$s]:-}" "$s" || failed=1
		pid_of[$s]=
	done
	stop_pid "$registry_pid" podbay-testimages 50
	registry_pid=

	leaks=$(
		for s in "${nets[@]}"; do
			side_leaks "$s"
		done
		new_shim_sockets | sed 's|^|shim socket /run/containerd/s/|'
	)
	if [ -n "$leaks" ]; then
		failed=1
		print_leaks "$leaks"
		for s in "${nets[@]}"; do
			side_remove_leaks "$s"
		done
		for f in $(new_shim_sockets); do rm -f "/run/containerd/s/$f"; done
	fi
	# An empty host-local dir (last_reserved_ip, lock) of podbay's default
	# network.
	rm -rf /var/lib/cni/networks/pbcmp-podbay-own
	for s in "${nets[@]}"; do
		ip link del "${bridge_of[$s]}" 2>/dev/null
	done
	remove_cgroups "$cgroup_base"
	for f in $run_tmpfs; do
		! mountpoint -q "$f" || umount "$f" || failed=1
	done

	tmp=$top
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

mkdir -p "$bin"
for s in "${sides[@]}"; do
	mkdir -p "$top/$s"/{net.d,ipam,state} "$top/podlogs/$s"
	# Each daemon's run-time state on a tmpfs of its own, as on a node,
	# where /run is one; roots stay on the temp dir's disk, as /var/lib.
	case "$s" in
	containerd2 | containerd16)
		mkdir -p "$top/$s/runc"
		run_tmpfs+=" $top/$s/state $top/$s/runc"
		;;
	crio) run_tmpfs+=" $top/$s/state" ;;
	podbay | podbay-own)
		mkdir -p "$top/$s"/{root,netns,cni-cache,registries.d}
		run_tmpfs+=" $top/$s/state $top/$s/netns"
		;;
	esac
done
for f in $run_tmpfs; do
	mount -t tmpfs -o mode=0755 pbcmp-run "$f"
done
# Each daemon's root on a fresh ext4 of its own (ROOT_FS), in a sparse
# file beside it; lib.sh's mount checks skip these as they do the tmpfs
# (both lists are the mounts the script made itself).
root_fs_note="each daemon's root on the temp dir's file system ($(findmnt -no FSTYPE -T "$top") on $(findmnt -no SOURCE -T "$top"))"
if [ "$ROOT_FS" = ext4 ]; then
	for s in "${sides[@]}"; do
		mkdir -p "$top/$s/root"
		truncate -s 16G "$top/$s.root.img"
		mkfs.ext4 -q -F "$top/$s.root.img"
		mount -o loop "$top/$s.root.img" "$top/$s/root"
		run_tmpfs+=" $top/$s/root"
	done
	root_fs_note="each daemon's root on a fresh ext4 of its own (mkfs.ext4's defaults, $(dumpe2fs -h "$top/${sides[0]}.root.img" 2>/dev/null | grep -q has_journal && echo with || echo without) a journal; a 16 GiB sparse loop file)"
fi
shim_sockets >"$top/shim-sockets-before"

build_binaries podbay-bench

# The registry serves the default image set at its root (--prefix ""), so
# that a mirror of registry.k8s.io finds registry.k8s.io/pause:3.10 and
# registry.k8s.io/busybox:latest there, and the realistic image; the pause
# image runs podbay-pause.
registry_args=(--image "bench/python:3.11=$(printf '%s,' "$image_dir"/layer-*.tar.gz | sed 's/,$//')")
[ "${REGISTRY_VERBOSE:-0}" = 0 ] || registry_args+=(-v)
start_registry busybox:latest --prefix "" --pause-binary "$bin/podbay-pause" "${registry_args[@]}"
registry=${registry_image%%/*}
# The realistic image is pushed last; it is served once its line is out.
registry_has_big() { grep -q "^$registry/bench/python:3.11 " "$top/testimages.out"; }
if ! wait_until 600 "$registry_pid" registry_has_big; then
	cat "$top/testimages.log" >&2
	die "podbay-testimages did not serve bench/python:3.11 within 60 s"
fi

mirrored=(registry.k8s.io docker.io gcr.io public.ecr.aws)

# podbay and CRI-O: registries.conf mirrors, as an air-gapped node has them;
# containerd 2: the same as hosts.toml.
{
	echo 'unqualified-search-registries = []'
	for r in "${mirrored[@]}"; do
		printf '\n[[registry]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$r" "$registry"
		printf '\n[[registry.mirror]]\nlocation = "%s"\ninsecure = true\n' "$registry"
	done
} >"$registries_conf"
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$policy"

# shared_conflist SIDE writes the shared network, under the side's names
# (or the CNI floor's, cni-floor), into $top/SIDE/net.d.
shared_conflist() {
	local d=$top/$1
	cat >"$d/net.d/10-${net_of[$1]}.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "${net_of[$1]}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${bridge_of[$1]}",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$d/ipam",
        "ranges": [[{"subnet": "${subnet_of[$1]}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
  ]
}
EOF
}

plugin_dirs='"/usr/lib/cni"'
[ -d /opt/cni/bin ] && plugin_dirs+=', "/opt/cni/bin"'
metrics_port=
metrics_side=

# start_side SIDE writes the side's configuration and starts its daemon,
# in a session of its own: a Ctrl-C reaches podbay-bench, which then
# removes its pods, and not the daemons it still needs.
start_side() {
	local s=$1 d=$top/$1
	[ "$s" = podbay-own ] || shared_conflist "$s"
	case "$s" in
	containerd2)
		sock_of[$s]=$d/containerd.sock
		write_containerd_hosts "$registries_conf" "$d/hosts.d"
		(
			sock=${sock_of[$s]} ctr_root=$d/root ctr_state=$d/state ctr_runc_root=$d/runc ctr_opt=$d/opt
			ctr_hosts=$d/hosts.d ctr_pause_image=$pause_image conf_dir=$d/net.d
			write_containerd_config "$d/containerd.toml"
		)
		setsid "$ctr_out/containerd" --config "$d/containerd.toml" >"$top/$s.log" 2>&1 &
		;;
	crio)
		sock_of[$s]=$d/crio.sock
		mkdir -p "$d/crio.conf.d" "$d/registries.d"
		(
			sock=${sock_of[$s]} crio_root=$d/root crio_state=$d/state crio_log_dir=$d/logs
			crio_pause_image=$pause_image conf_dir=$d/net.d
			write_crio_config "$d/crio.conf"
		)
		setsid "$crio_out/crio" --config "$d/crio.conf" --config-dir "$d/crio.conf.d" \
			--registries-conf "$registries_conf" --registries-conf-dir "$d/registries.d" \
			--log-level warn >"$top/$s.log" 2>&1 &
		;;
	containerd16)
		sock_of[$s]=$d/containerd.sock
		{
			cat <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "${sock_of[$s]}"

[ttrpc]
  address = "${sock_of[$s]}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"

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
  Root = "$d/runc"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$d/net.d"
  max_conf_num = 1
EOF
			for r in "${mirrored[@]}"; do
				printf '\n[plugins."io.containerd.grpc.v1.cri".registry.mirrors."%s"]\n  endpoint = ["http://%s"]\n' "$r" "$registry"
			done
		} >"$d/containerd.toml"
		setsid containerd --config "$d/containerd.toml" >"$top/$s.log" 2>&1 &
		;;
	podbay | podbay-own)
		sock_of[$s]=$d/podbayd.sock
		cat >"$d/podbayd.toml" <<EOF
conmon = "$(command -v conmon)"
pause_binary = "$bin/podbay-pause"
pause_image = "$pause_image"
default_cgroup_parent = "$cgroup_base/$s"
netns_dir = "$d/netns"
sandbox_process = "$SANDBOX_PROCESS"

[image]
storage_root = "$d/root/storage"
run_root = "$d/state/storage"
registries_conf_dir = "$d/registries.d"
signature_policy = "$policy"

[network]
conf_dir = "$d/net.d"
plugin_dirs = [$plugin_dirs]
cache_dir = "$d/cni-cache"
EOF
		if [ "$s" = podbay-own ]; then
			printf 'write_default_config = true\ndefault_network_name = "%s"\ndefault_bridge = "%s"\ndefault_subnet = "%s"\n' \
				"${net_of[$s]}" "${bridge_of[$s]}" "${subnet_of[$s]}" >>"$d/podbayd.toml"
		else
			echo 'write_default_config = false' >>"$d/podbayd.toml"
		fi
		printf '\n[nri]\nsocket_path = "%s"\nplugin_path = "%s"\nplugin_config_path = "%s"\n' \
			"$d/nri.sock" "$d/nri-plugins" "$d/nri-conf.d" >>"$d/podbayd.toml"
		if [ "$HANDLER_TYPE" = vm ]; then
			vm_runtime_table runc "$d/state/shim-runc" >>"$d/podbayd.toml"
		fi
		local port
		port=$(free_port) || die "no free TCP port for podbayd's metrics"
		echo "$port" >"$d/metrics-port"
		if [ -z "$metrics_side" ]; then
			metrics_side=$s metrics_port=$port
		fi
		setsid "$bin/podbayd" --config "$d/podbayd.toml" --listen "${sock_of[$s]}" --root "$d/root" --state "$d/state" \
			--registries-conf "$registries_conf" --metrics-address "127.0.0.1:$port" --log-level info >"$top/$s.log" 2>&1 &
		;;
	esac
	pid_of[$s]=$!
}
for s in "${sides[@]}"; do
	start_side "$s"
done
# all_serving: every socket, podbay's default network written, their
# metrics endpoints up.
all_serving() {
	local s
	for s in "${sides[@]}"; do
		[ -S "${sock_of[$s]}" ] || return 1
		case "$s" in
		podbay-own) [ -f "$top/$s/net.d/10-podbay.conflist" ] || return 1 ;;
		esac
		case "$s" in
		podbay*) (exec 3<>"/dev/tcp/127.0.0.1/$(cat "$top/$s/metrics-port")") 2>/dev/null || return 1 ;;
		esac
	done
}
all_pids=
for s in "${sides[@]}"; do all_pids+=" ${pid_of[$s]}"; done
if ! wait_until 600 "$all_pids" all_serving; then
	for s in "${sides[@]}"; do tail -n 20 "$top/$s.log" >&2; done
	die "the daemons (${sides[*]}) did not all start serving within 60 s"
fi
pb_masq=
if has_side podbay-own; then
	pb_masq=$(grep -oE '"ipMasq": *(true|false)' "$top/podbay-own/net.d/10-podbay.conflist" | grep -oE 'true|false' || echo absent)
fi

versions=()
for s in "${sides[@]}"; do
	case "$s" in
	containerd2) versions+=("containerd $("$ctr_out/containerd" --version | awk '{print $3}') (CRI plugin, io.containerd.runc.v2)") ;;
	crio) versions+=("CRI-O $("$crio_out/crio" --version 2>/dev/null | awk '/^crio version/ {print $3}') (conmon + runc, drop_infra_ctr)") ;;
	containerd16) versions+=("containerd $(containerd --version | awk '{print $3}') (Debian)") ;;
	esac
done
handler_note="handler oci: runc, conmon per container"
[ "$HANDLER_TYPE" = oci ] || handler_note="handler vm: containerd-shim-runc-v2 driving runc"
anchors_note=$(printf '%s, ' "${versions[@]}")
title="podbay $(git -C "$repo" describe --always --dirty 2>/dev/null || echo '?') ($handler_note) vs ${anchors_note%, }; $(nproc) CPUs, Linux $(uname -r), $(runc --version | head -n1); N=$N per RPC (IMAGE_N=$IMAGE_N for the realistic image) in $ROUNDS rotating rounds, PODS_SCALE=$PODS_SCALE"
echo "$title"
for s in "${sides[@]}"; do
	echo "network of $s: ${subnet_of[$s]} on ${bridge_of[$s]} ($([ "$s" = podbay-own ] && echo "podbay's default network, conflist ipMasq $pb_masq" || echo "the shared conflist"))"
done
echo "network of the CNI floor: ${subnet_of[cni-floor]} on ${bridge_of[cni-floor]} (the shared conflist)"
echo "roots: $root_fs_note"
# What inflates gzip layers: containerd runs igzip, else unpigz, from PATH
# when installed; podbay runs igzip (gzip_decompressor = auto); CRI-O
# inflates in process.
gzip_note="gzip layers: no igzip or unpigz on PATH, every daemon inflates in process (Go)"
if command -v igzip >/dev/null; then
	gzip_note="gzip layers: igzip ($(command -v igzip), ISA-L) on PATH, run by containerd and podbay (gzip_decompressor auto); CRI-O inflates in process"
elif command -v unpigz >/dev/null; then
	gzip_note="gzip layers: unpigz on PATH, run by containerd; podbay and CRI-O inflate in process"
fi
echo "$gzip_note"
echo "registry $registry; realistic image: $(cat "$image_dir/size") in $(find "$image_dir" -name 'layer-*.tar.gz' | wc -l) layers over busybox"

# The floor: runc's create and start alone, on a busybox root filesystem.
floor_rootfs=$top/floor-rootfs
mkdir -p "$floor_rootfs/bin" "$floor_rootfs/proc" "$floor_rootfs/sys" "$floor_rootfs/dev"
cp /bin/busybox "$floor_rootfs/bin/"
ln -s busybox "$floor_rootfs/bin/sleep"
bench_args=(-floor-runtime "$(command -v runc)" -floor-rootfs "$floor_rootfs"
	-floor-dir "$top/floor" -floor-cgroup-parent "$cgroup_base/floor")
# The CNI floor: the shared conflist's ADD and DEL alone, on its own
# network; its IP reservations, libcni cache and pinned namespaces under
# $top/cni-floor.
mkdir -p "$top/cni-floor"/{net.d,ipam,cache,netns}
shared_conflist cni-floor
bench_args+=(-cni-floor-conflist "$top/cni-floor/net.d/10-${net_of[cni-floor]}.conflist"
	-cni-floor-cache-dir "$top/cni-floor/cache" -cni-floor-netns-dir "$top/cni-floor/netns")
for s in "${sides[@]}"; do
	# The per-pod processes' command lines hold the side's temp dir.
	bench_args+=("-$s-socket" "${sock_of[$s]}" "-$s-pid" "${pid_of[$s]}" "-$s-procs" "$top/$s/"
		"-$s-log-dir" "$top/podlogs/$s" "-$s-cgroup-parent" "$cgroup_base/$s")
done
[ -z "$metrics_port" ] || bench_args+=(-podbay-metrics "http://127.0.0.1:$metrics_port/metrics")

network_note="Networks: every anchor$(has_side podbay && echo " and podbay") on the same conflist (bridge with ipMasq true and hairpin, host-local, portmap; no bandwidth plugin: Debian's 1.1.1 crashes on CRI-O's CNI CHECK), each on its own bridge and subnet"
has_side podbay-own && network_note+="; podbay-own on its default network (its conflist's ipMasq: $pb_masq, podbay's own masquerade)"
"$bin/podbay-bench" compare "${bench_args[@]}" \
	-image "$image" -big-image "$big_image" -n "$N" -big-n "$IMAGE_N" -rounds "$ROUNDS" \
	-throughput-n "$THROUGHPUT_N" -concurrency "$CONCURRENCY" \
	-scale "$PODS_SCALE" -scale-samples "$SCALE_SAMPLES" -markdown "$OUT" -title "$title" \
	-note "$network_note." \
	-note "Roots (ROOT_FS=$ROOT_FS): $root_fs_note; run-time state on a tmpfs per daemon." \
	-note "${gzip_note^}." \
	-note "Images from one local registry (pause: podbay-pause; busybox; the realistic image: Python 3.11 from Debian's packages, $(cat "$image_dir/size") in 4 gzip layers over busybox) through registry mirrors on every daemon; requests shaped as the kubelet's (PID namespace per container, RuntimeDefault seccomp, resources, labels, log directories); every RPC from one client, one by one unless noted."

for s in "${sides[@]}"; do
	case "$s" in
	podbay*)
		if grep -q 'level=ERROR' "$top/$s.log"; then
			log "$s logged errors:"
			grep 'level=ERROR' "$top/$s.log" | head -n 20 >&2
			failed=1
		fi
		;;
	esac
done
