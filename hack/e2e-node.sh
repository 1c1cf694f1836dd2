#!/usr/bin/env bash
# e2e-node.sh runs Kubernetes' node e2e suite (test/e2e_node of
# k8s.io/kubernetes v1.37.2, the suite SIG Node qualifies container runtimes
# with) against a fresh podbayd, offline, then the same suite against
# containerd 2.4 (tools/containerd) on the same machine, network and
# images, and sets the two side by side:
#
#   - ginkgo, the kubelet, e2e_node.test and agnhost come from the
#     tools/e2e-node module (k8s.io/kubernetes v1.37.2 with its staging
#     modules pinned to v0.37.2), built with Kubernetes' own tags (selinux,
#     notest, grpcnotrace) into _output/e2e-node/, and rebuilt only when
#     that module's go.mod or go.sum is newer than them; crictl and
#     critest-report from tools/; podbayd, podbay-pause, podbay-testimages
#     and podbay-standin from this checkout.
#   - The images the specs run are stand-ins (test/testimage
#     NodeE2EImages: busybox 1.37.0 built from source with its defconfig,
#     like the official image's (build_busybox below); the real agnhost;
#     nginx, nonewprivs, nonroot, ipc-utils, kitten, nautilus, pause) served
#     by podbay-testimages --node-e2e from a registry on a free loopback
#     port under their registry.k8s.io names; podbayd's registries.conf
#     mirrors registry.k8s.io (and gcr.io, public.ecr.aws, docker.io) to it.
#     The suite runs with -prepull-images=false: each image is pulled by the
#     kubelet (ImageStatus first) when a spec needs it.
#   - containerd and containerd-shim-runc-v2 (the version tools/containerd
#     pins) are built into _output/containerd/ unless newer than that
#     module's go.mod and go.sum; containerd runs as containerd's node e2e
#     job configures it (start_containerd below), with the host's runc, as
#     podbayd does.
#   - podbayd gets its defaults plus a runtime handler "test-handler"
#     (runc, for the RuntimeClass specs), with its own root, state, CNI network
#     (bridge pbe2enode0, 10.195.0.0/22), netns_dir, registries.conf and an
#     accept-anything policy.json, all in a temp dir.
#   - The e2e_node binary starts etcd, kube-apiserver and the namespace
#     controller itself, then the kubelet from _output/e2e-node/ with
#     --container-runtime-endpoint=unix://<podbayd's socket>. Where systemd
#     does not run, the suite's PATH leaves systemd-run out (the framework
#     would start the kubelet as a systemd unit), and --kubelet-cgroups=,
#     --system-cgroups= and --runtime-cgroups= undo the framework's defaults
#     for a host without systemd (/kubelet, /system, /docker-daemon: with
#     systemCgroups=/system the kubelet moves every process of the root
#     cgroup into /system).
#
# Focus and skip are containerd's CI job's (FOCUS and SKIP below); ginkgo
# runs E2E_NODE_NODES processes (default 4). The script runs itself once per
# runtime (--runtime=, one after the other: the framework's kubelet
# directory is fixed); each run ends as described below, and the last lines
# are each run's counts and critest-report compare's table: the specs whose
# outcome differs, with their failures, and those that failed in both. It
# exits non-zero when podbay failed a spec containerd passed, when a run
# left anything behind, or (with one runtime) when a spec failed. After
# each run it removes every pod,
# container and image through crictl, stops the daemon and the registry,
# restores the sysctls the kubelet sets at start (vm.overcommit_memory,
# vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_maxkeys, kernel.keys.root_maxbytes), removes the
# iptables chains it makes (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
# KUBE-IPTABLES-HINT, IPv4 and IPv6), the
# kubelet's directories (/var/lib/kubelet, /var/log/pods,
# /var/log/containers) and cgroups (/kubepods and below), and checks that
# nothing else is left (hack/lib.sh find_leaks). It prints every spec that
# did not pass with its failure, and last the line
# "N passed, N failed, N skipped"; it exits non-zero when a spec failed or
# anything leaked, keeping the logs (daemon, kubelet, suite) in a
# /tmp/pbe2enode-logs.* dir whose path it prints.
#
#   ./hack/e2e-node.sh                                 # make test-e2e-node
#   ./hack/e2e-node.sh --focus='ConfigMap.*environment' # a slice (the skip still applies)
#   ./hack/e2e-node.sh --slice                         # make test-e2e-node-slice: the specs that found bugs and a smoke of each area
#   ./hack/e2e-node.sh --build-only                    # only build the test binaries
#
# Env: E2E_NODE_RUNTIMES (default "podbay containerd"; "podbay" alone runs
# only podbayd), E2E_NODE_FOCUS, E2E_NODE_SKIP (replace the defaults),
# E2E_NODE_NODES (ginkgo processes), E2E_NODE_TIMEOUT (ginkgo --timeout,
# default 3h), E2E_NODE_FEATURE_GATES (default
# PodAndContainerStatsFromCRI=true, as containerd's job), E2E_NODE_ARGS (extra
# e2e_node.test flags, split on spaces).
#
# Needs root, runc, conmon, the CNI plugins in /usr/lib/cni, jq, and apt-get,
# gcc, make and bzip2 (for busybox); /var/lib/kubelet must not exist (the
# framework hardcodes it: one node e2e run per host), and ports 6443 (the
# suite's kube-apiserver), 10248, 10250 and 10255 (the kubelet's) must be
# free.
set -euo pipefail

# Focus and skip of containerd's node e2e CI job (issue 27).
readonly default_focus='\[NodeConformance\]|\[Feature:.+\]|\[Feature\]'
readonly default_skip='\[Flaky\]|\[Slow\]|\[Serial\]|UserNamespacesSupport|PodLifecycleSleepActionAllowZero|UserNamespacesPodSecurityStandards|KubeletCredentialProviders|LockContention|SCTPConnectivity|\[Alpha\]'
# The slice (--slice, make test-e2e-node-slice): the specs that found
# podbay's bugs, and one or two of each area the suite covers (environment
# from ConfigMaps and Secrets, hostnames, image updates, in-place resize,
# image volumes, probes, lifecycle hooks, init containers, volumes,
# security context, termination messages, sysctls). Minutes, not an hour.
readonly slice_focus='ConfigMap should be consumable via the environment|Secrets should be consumable via the environment|Override hostname of Pod a pod with only hostnameOverride field|image updated during initialization Should not start a regular container, restartPolicy=Always|Burstable pod - remove cpu requests|ImageVolume .*should succeed with pod and multiple volumes|Probing container should be restarted with an exec liveness probe with timeout|Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly|InitContainer should invoke init containers on a RestartNever pod|EmptyDir volumes should support \(root,0644,tmpfs\)|Projected downwardAPI should provide container.s cpu limit|HostPath should support r/w|ConfigMap should be consumable in multiple volumes in the same pod|Security Context When creating a container with runAsUser should run the container with uid 65534|should report termination message if TerminationMessagePath is set \[|Sysctls \[LinuxOnly\] should support sysctls \['
focus=${E2E_NODE_FOCUS:-$default_focus}
skip=${E2E_NODE_SKIP:-$default_skip}
nodes=${E2E_NODE_NODES:-4}
ginkgo_timeout=${E2E_NODE_TIMEOUT:-3h}
runtimes=${E2E_NODE_RUNTIMES:-podbay containerd}
feature_gates=${E2E_NODE_FEATURE_GATES:-PodAndContainerStatsFromCRI=true}
build_only=0
# runtime and results are set when the script runs itself for one runtime.
runtime=
results=
for arg in "$@"; do
	case "$arg" in
	--focus=*) focus=${arg#--focus=} ;;
	--skip=*) skip=${arg#--skip=} ;;
	--build-only) build_only=1 ;;
	--slice) focus=$slice_focus ;;
	--runtime=*) runtime=${arg#--runtime=} ;;
	--results=*) results=${arg#--results=} ;;
	*)
		echo "usage: $0 [--focus=REGEXP | --slice] [--skip=REGEXP] | --build-only" >&2
		exit 2
		;;
	esac
done
for r in $runtimes $runtime; do
	case "$r" in
	podbay | containerd) ;;
	*)
		echo "$0: unknown runtime '$r' (E2E_NODE_RUNTIMES: podbay, containerd)" >&2
		exit 2
		;;
	esac
done

readonly net_name=pbe2enode
readonly bridge=pbe2enode0
readonly subnet=10.195.0.0/22
readonly k8s_version=v1.37.2
# The kubelet's tunables (pkg/kubelet/cm setupKernelTunables), restored
# afterwards.
readonly kubelet_sysctls=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
# What the kubelet makes on the host, outside the temp dir.
readonly kubelet_dirs=(/var/lib/kubelet /var/log/pods /var/log/containers)

log() { echo "e2e-node.sh: $*" >&2; }
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/_output/e2e-node
export PATH=/usr/local/go/bin:$PATH

# build_k8s builds ginkgo, the kubelet, e2e_node.test and agnhost into $out
# unless they are newer than tools/e2e-node's go.mod and go.sum. Kubernetes'
# own build (hack/lib/golang.sh): -trimpath, tags selinux,notest,grpcnotrace,
# the version in component-base's ldflags; agnhost static, as its image's.
build_k8s() {
	local mod=$repo/tools/e2e-node f stale=0 ldflags start
	for f in ginkgo kubelet e2e_node.test agnhost; do
		if [ ! -x "$out/$f" ] || [ "$mod/go.mod" -nt "$out/$f" ] || [ "$mod/go.sum" -nt "$out/$f" ]; then
			stale=1
		fi
	done
	[ "$stale" -eq 1 ] || return 0
	mkdir -p "$out"
	ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1"
	ldflags+=" -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
	local tags=selinux,notest,grpcnotrace
	start=$SECONDS
	log "building ginkgo, kubelet, e2e_node.test and agnhost ($k8s_version) into $out (the first build takes a long time)"
	(
		cd "$mod"
		# The module has no podbay build tags (the Makefile exports them).
		export GOFLAGS=
		nice -n 19 go build -trimpath -o "$out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
		nice -n 19 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet
		CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w" -o "$out/agnhost" k8s.io/kubernetes/test/images/agnhost
		nice -n 19 go test -c -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/e2e_node.test" k8s.io/kubernetes/test/e2e_node
	)
	log "built in $((SECONDS - start)) s"
}

# build_busybox builds busybox $busybox_version with its defconfig, as the
# official busybox image is, into $busybox_bin unless it is there. Debian
# 12's busybox builds (1.35) lack nmeter, which the container lifecycle specs
# log timestamps with, and their ash drops environment variables whose
# names are not shell names (a ConfigMap's data-1 through envFrom, which the
# ConfigMap and Secret env specs print with `sh -c env`); 1.37's passes
# them on. The source is the upstream release tarball as Debian 13 ships it
# (busybox's .orig.tar.bz2), fetched with `apt-get source` through a
# private apt configuration in $2 (the host's sources are left alone; apt
# checks the signed Sources index) and checked against its sha256.
busybox_version=1.37.0
busybox_sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4
busybox_bin=$out/busybox-$busybox_version/busybox
build_busybox() {
	local work=$1 apt_opts src start
	[ -x "$busybox_bin" ] && return 0
	command -v gcc >/dev/null && command -v make >/dev/null && command -v bzip2 >/dev/null ||
		die "building busybox needs gcc, make and bzip2"
	start=$SECONDS
	log "building busybox $busybox_version from source into $(dirname "$busybox_bin")"
	mkdir -p "$work"/{lists/partial,cache/archives/partial,parts,prefs,src}
	echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$work/sources.list"
	apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts="$work/parts"
		-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
		-o Dir::Etc::Preferences="$work/prefs/none" -o Dir::Etc::PreferencesParts="$work/prefs"
		-o APT::Sandbox::User=root -q)
	apt-get "${apt_opts[@]}" update >/dev/null
	(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only busybox >/dev/null)
	src=$(ls "$work/src"/busybox_"$busybox_version".orig.tar.bz2 2>/dev/null) ||
		die "Debian's busybox source is not $busybox_version any more: $(ls "$work/src")"
	echo "$busybox_sha256  $src" | sha256sum -c --quiet - || die "$src: sha256 mismatch"
	tar -xjf "$src" -C "$work"
	(
		cd "$work/busybox-$busybox_version"
		nice -n 19 make defconfig >/dev/null
		nice -n 19 make -j"$(nproc)" >"$work/build.log" 2>&1 || {
			tail -n 30 "$work/build.log" >&2
			exit 1
		}
	)
	mkdir -p "$(dirname "$busybox_bin")"
	cp "$work/busybox-$busybox_version/busybox" "$busybox_bin.new"
	mv "$busybox_bin.new" "$busybox_bin"
	log "busybox built in $((SECONDS - start)) s"
}

# build_containerd (lib.sh) builds containerd and containerd-shim-runc-v2
# (the version tools/containerd pins, 2.4.x) into $ctr_out.
ctr_out=$repo/_output/containerd

if [ "$build_only" -eq 1 ]; then
	build_k8s
	build_containerd
	work=$(mktemp -d /tmp/pbe2enode-build.XXXXXX)
	build_busybox "$work"
	rm -rf "$work"
	exit 0
fi

# Without --runtime the script runs itself once per runtime of
# E2E_NODE_RUNTIMES, one after the other on this host (each with its own
# daemon, kubelet and API server, each leaving the host clean), and sets
# the runs side by side (critest-report compare). It fails when a run
# failed a spec and it is the only one, when podbay failed a spec
# containerd passed, or when a run left anything behind.
if [ -z "$runtime" ]; then
	build_k8s
	case " $runtimes " in *" containerd "*) build_containerd ;; esac
	(cd "$repo/tools" && GOFLAGS='' go build -o "$repo/_output/critest-report" ./cmd/critest-report)
	results=$(mktemp -d /tmp/pbe2enode-results.XXXXXX)
	rc=0
	ran=()
	for r in $runtimes; do
		log "=== $r: $(date -u '+%H:%M:%S') ==="
		r_rc=0
		"$0" --runtime="$r" --results="$results" --focus="$focus" --skip="$skip" || r_rc=$?
		if [ ! -f "$results/$r.json" ]; then
			log "$r: the run wrote no report (status $r_rc)"
			rc=1
			continue
		fi
		ran+=("$r")
		if [ "$(cat "$results/$r.clean" 2>/dev/null)" != clean ]; then
			log "$r: the run did not end clean (see its output above)"
			rc=1
		fi
		# One runtime alone: its failed specs fail the run.
		[ "$r_rc" -eq 0 ] || [ "$(echo $runtimes | wc -w)" -ne 1 ] || rc=1
	done
	echo
	for r in "${ran[@]}"; do
		echo "$r: $(cat "$results/$r.summary" 2>/dev/null)"
	done
	if [ "${#ran[@]}" -eq 2 ]; then
		echo
		cmp_rc=0
		"$repo/_output/critest-report" compare "${ran[0]}=$results/${ran[0]}.json" "${ran[1]}=$results/${ran[1]}.json" \
			>"$results/compare.md" || cmp_rc=$?
		cat "$results/compare.md"
		[ "$cmp_rc" -eq 0 ] || rc=1
	fi
	log "reports, summaries and the comparison are in $results"
	exit "$rc"
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (it runs a kubelet, creates network namespaces, a bridge and containers)"
[[ $nodes =~ ^[1-9][0-9]*$ ]] || die "E2E_NODE_NODES must be a positive integer, got '$nodes'"
for tool in go runc conmon ip ss iptables-save iptables-restore setsid apt-get gcc make bzip2 jq; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni"
for d in "${kubelet_dirs[@]}"; do
	[ ! -e "$d" ] || die "$d exists: a kubelet runs or ran on this host (the node e2e framework uses /var/lib/kubelet, hardcoded); remove it first"
done
for port in 6443 10248 10250 10255; do
	[ -z "$(ss -Hltn "sport = :$port")" ] || die "port $port (the kube-apiserver's or the kubelet's) is in use"
done
if ip link show "$bridge" >/dev/null 2>&1; then
	die "bridge $bridge already exists: another e2e-node.sh is running, or an earlier one leaked it (ip link del $bridge)"
fi
if ip -4 route show | grep -q '^10\.195\.'; then
	die "a route into 10.195.0.0/16 already exists; the e2e-node network would clash with it"
fi

tmp=$(mktemp -d /tmp/pbe2enode.XXXXXX)
tmp_paths
if [ "$runtime" = containerd ]; then
	# containerd's paths in the temp dir; its leaks are engine_leaks'
	# (podbay_config unset): netns under its state dir, the shim's runc
	# root per namespace (k8s.io).
	sock=$tmp/containerd.sock
	podbay_config=
	ctr_root=$tmp/ctr-root
	ctr_state=$tmp/ctr-state
	ctr_runc_root=$tmp/ctr-runc
	runtime_root=$ctr_runc_root/k8s.io
	netns_dir=$ctr_state/io.containerd.grpc.v1.cri/netns
	ctr_hosts=$tmp/ctr-hosts.d
fi
crictl_conf=$tmp/crictl.yaml
cgroup_parent=/pbe2enode-${tmp##*.}
runtime_root=$state_dir/runtimes/runc
suite_log=$tmp/suite.log
report=$tmp/report.json
summary=$tmp/summary.txt
report_dir=$tmp/report
k8s_dir=

daemon_pid=
registry_pid=
failed=0
sysctls_saved=
keys_before=

crictl() { "$bin/crictl" --config "$crictl_conf" "$@"; }

# remove_all removes every pod, container and image through the CRI, and
# prints what is still listed.
remove_all() {
	[ -n "$daemon_pid" ] && alive "$daemon_pid" || return 0
	crictl rmp --force --all >/dev/null 2>&1 || log "crictl rmp --force --all failed"
	crictl rm --force --all >/dev/null 2>&1 || true
	crictl rmi --all >/dev/null 2>&1 || log "crictl rmi --all failed"
	crictl pods -q 2>&1 | sed 's/^/pod still listed: /'
	crictl ps -aq 2>&1 | sed 's/^/container still listed: /'
	crictl images -q 2>&1 | sed 's/^/image still listed: /'
}

# suite_pids prints the PIDs of the kubelet and test processes of this run:
# those whose command line names its socket.
suite_pids() {
	# [u]: not grep's own command line.
	grep -la "[u]nix://$sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true
}

# stop_suite_processes stops what the run's e2e_node.test left running (its
# services exit with it; a killed run may leave the kubelet), by PID.
stop_suite_processes() {
	local pid
	for pid in $(suite_pids); do
		[ "$pid" != $$ ] || continue
		log "stopping $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid), left by the suite"
		kill -TERM "$pid" 2>/dev/null || true
	done
	for _ in $(seq 100); do
		[ -n "$(suite_pids)" ] || return 0
		sleep 0.1
	done
	for pid in $(suite_pids); do
		kill -KILL "$pid" 2>/dev/null || true
	done
}

# save_sysctls records the kubelet's tunables in $tmp/sysctls.
save_sysctls() {
	local s
	for s in "${kubelet_sysctls[@]}"; do
		echo "$s $(cat "/proc/sys/$s")"
	done >"$tmp/sysctls"
	sysctls_saved=$tmp/sysctls
}

# restore_sysctls writes back what save_sysctls recorded, saying which ones
# the run changed.
restore_sysctls() {
	local s v now
	[ -n "$sysctls_saved" ] || return 0
	while read -r s v; do
		now=$(cat "/proc/sys/$s")
		if [ "$now" != "$v" ]; then
			log "restoring $s: $now -> $v"
			echo "$v" >"/proc/sys/$s" || {
				log "could not restore $s"
				failed=1
			}
		fi
	done <"$sysctls_saved"
}

# remove_kubelet_dirs unmounts what is left under the kubelet's directories
# (volumes of pods the suite did not clean up: a leak) and removes them.
remove_kubelet_dirs() {
	local d mounts
	for d in "${kubelet_dirs[@]}"; do
		# The kubelet bind-mounts its root dir on itself (to make it
		# shared); anything mounted below is a volume left behind.
		while awk -v d="$d" '$5 == d {found = 1} END {exit !found}' /proc/self/mountinfo; do
			umount "$d" || break
		done
		mounts=$(awk -v d="$d/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
		if [ -n "$mounts" ]; then
			print_leaks "$(sed 's/^/kubelet mount /' <<<"$mounts")"
			failed=1
			while read -r m; do umount -l "$m" || true; done <<<"$mounts"
		fi
		rm -rf "$d"
	done
}

# remove_kubelet_cgroups removes the kubelet's cgroups (/kubepods and
# below; /kubelet, /system and /docker-daemon if it made them), in every
# hierarchy; a cgroup that still holds a process is a leak.
remove_kubelet_cgroups() {
	local c busy
	busy=$(find /sys/fs/cgroup -mindepth 2 -maxdepth 8 -type d -path '*/kubepods*' 2>/dev/null |
		while read -r c; do
			[ -z "$(cat "$c/cgroup.procs" 2>/dev/null)" ] || echo "cgroup $c (pids $(tr '\n' ' ' <"$c/cgroup.procs"))"
		done)
	if [ -n "$busy" ]; then
		print_leaks "$busy"
		failed=1
	fi
	for c in kubepods kubelet system docker-daemon; do
		remove_cgroups "/$c"
	done
}

# kube_chains prints "<iptables command> <table> <chain>" for every KUBE-*
# chain on the host, IPv4 and IPv6.
kube_chains() {
	local cmd
	for cmd in iptables ip6tables; do
		command -v "$cmd-save" >/dev/null || continue
		"$cmd-save" 2>/dev/null | awk -v cmd="$cmd" '/^\*/ {t = substr($0, 2)} /^:KUBE-/ {print cmd, t, substr($1, 2)}'
	done | sort
}

# remove_kubelet_iptables removes the KUBE-* chains the kubelet made during
# the run (KUBE-FIREWALL, which drops packets to 127.0.0.0/8 from other
# sources, in INPUT and OUTPUT; KUBE-KUBELET-CANARY; KUBE-IPTABLES-HINT),
# with the rules that jump to them; not those that were there before.
remove_kubelet_iptables() {
	local cmd table chain rule
	[ -n "${chains_before:-}" ] || return 0
	comm -13 "$chains_before" <(kube_chains) | while read -r cmd table chain; do
		"$cmd-save" -t "$table" 2>/dev/null | grep -E -- "^-A [^ ]+ .*-j $chain( |\$)" | while read -r rule; do
			# shellcheck disable=SC2086 # the rule's words, as iptables-save wrote them
			eval "$cmd -t $table -D ${rule#-A }" || log "could not delete '$rule' ($cmd, table $table)"
		done
		"$cmd" -t "$table" -F "$chain" && "$cmd" -t "$table" -X "$chain" || log "could not remove chain $chain ($cmd, table $table)"
	done
}

# remove_apiserver_files removes the service-account keys the suite's
# kube-apiserver writes to /tmp (insecure_test_key*) during the run.
remove_apiserver_files() {
	local f
	[ -n "$keys_before" ] || return 0
	for f in $(comm -13 "$keys_before" <(ls -d /tmp/insecure_test_key* 2>/dev/null | sort)); do
		rm -f "$f"
	done
	if [ -n "${run_k8s_made:-}" ]; then
		rm -rf /var/run/kubernetes
	fi
}

finish() {
	local rc=$? left spec_failed
	set +e
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || failed=1
	# What failed before this point is the run's (specs, the suite); what
	# fails below is the cleanup: the run did not end clean.
	spec_failed=$failed
	failed=0

	stop_suite_processes
	left=$(remove_all)
	stop_daemon || failed=1
	stop_registry
	restore_sysctls
	[ ! -d "$report_dir" ] || cp "$report_dir"/*.log "$tmp"/ 2>/dev/null
	remove_kubelet_dirs
	remove_kubelet_cgroups
	remove_kubelet_iptables
	remove_apiserver_files

	clean_run_host "$left"
	if [ "$runtime" = containerd ]; then
		# libcni's result cache, outside the temp dir for containerd.
		find /var/lib/cni/results -maxdepth 1 -name "$net_name-*" -print -delete 2>/dev/null |
			sed 's/^/CNI cache entry left: /' | grep . >&2 && failed=1
	fi
	if [ -n "$results" ]; then
		[ ! -f "$report" ] || cp "$report" "$results/$runtime.json"
		echo "${summary_line:-no summary}" >"$results/$runtime.summary"
		if [ "$failed" -eq 0 ]; then echo clean; else echo dirty; fi >"$results/$runtime.clean"
	fi
	failed=$((failed | spec_failed))

	[ "$failed" -eq 0 ] || keep_logs pbe2enode-logs "daemon, registry, kubelet and suite" "$report"
	remove_tmp
	if [ "$failed" -ne 0 ]; then
		log "FAILED"
	else
		log "ok: nothing left behind"
	fi
	if [ -n "${summary_line:-}" ]; then
		echo "$summary_line"
	fi
	[ "$failed" -eq 0 ] || exit 1
	exit 0
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$bin" "$root_dir" "$state_dir" "$conf_dir" "$ipam_dir" "$cache_dir" "$registries_dir" "$netns_dir" "$report_dir"

build_k8s
log "building podbay and tools into $bin"
(
	cd "$repo/tools"
	version=$(GOFLAGS='' go list -m -f '{{.Version}}' sigs.k8s.io/cri-tools)
	GOFLAGS='' go build -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$version" -o "$bin/crictl" sigs.k8s.io/cri-tools/cmd/crictl
	GOFLAGS='' go build -o "$bin/critest-report" ./cmd/critest-report
)
(
	cd "$repo"
	go build -o "$bin/podbayd" ./cmd/podbayd
	go build -o "$bin/podbay" ./cmd/podbay
	go build -o "$bin/podbay-testimages" ./cmd/podbay-testimages
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/podbay-pause" ./cmd/podbay-pause
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$bin/podbay-standin" ./cmd/podbay-testimages/standin
)
k8s_dir=$(cd "$repo/tools/e2e-node" && GOFLAGS='' go list -m -f '{{.Dir}}' k8s.io/kubernetes)
[ -d "$k8s_dir/test/e2e_node" ] || die "k8s.io/kubernetes not in the module cache ($k8s_dir)"

build_busybox "$tmp/busybox"

setsid "$bin/podbay-testimages" --node-e2e --listen 127.0.0.1:0 \
	--busybox "$busybox_bin" --standin "$bin/podbay-standin" --agnhost "$out/agnhost" \
	--k8s-images-dir "$k8s_dir/test/images" --pause-binary "$bin/podbay-pause" \
	--registries-conf "$registries_conf" >"$tmp/testimages.out" 2>"$tmp/testimages.log" &
registry_pid=$!
wait_registries_conf 60
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$policy"
write_crictl_conf

write_conflist
# start_podbayd starts podbayd with its defaults and the run's paths, and the
# runtime handler "test-handler", which the RuntimeClass and PodOverhead
# specs name (e2eruntimeclass.PreconfiguredRuntimeClassHandler; containerd's
# CI configures it too): runc, like the default one.
start_podbayd() {
	write_daemon_config "$state_dir/storage"
	cat >>"$config" <<EOF

[runtimes.runc]
path = "runc"

[runtimes.test-handler]
path = "runc"
EOF
	setsid "$bin/podbayd" --config "$config" --listen "$sock" --root "$root_dir" --state "$state_dir" \
		--registries-conf "$registries_conf" --log-level info >"$daemon_log" 2>&1 &
	daemon_pid=$!
}

# start_containerd starts containerd 2.4 (tools/containerd) as containerd's
# node e2e job configures it, on this run's paths and the same conflist:
# its CRI plugin with io.containerd.runc.v2 and the host's runc for the
# handlers runc and test-handler, cgroupfs, overlayfs, the pause image the
# registry serves (registry.k8s.io/pause:3.10.2, its default), the same
# registry mirrors (hosts.toml), restrict_oom_score_adj (this host lacks
# CAP_SYS_RESOURCE; podbayd clamps too), NRI off (no socket under
# /var/run/nri).
start_containerd() {
	# registries.conf maps each registry to a path of the local registry
	# (registry.k8s.io -> 127.0.0.1:PORT/k8s); hosts.toml says the same.
	write_containerd_hosts "$registries_conf" "$ctr_hosts"
	ctr_opt=$tmp/ctr-opt ctr_handlers="runc test-handler" ctr_pause_image=registry.k8s.io/pause:3.10.2 \
		write_containerd_config "$tmp/containerd.toml"
	setsid "$ctr_out/containerd" --config "$tmp/containerd.toml" >"$daemon_log" 2>&1 &
	daemon_pid=$!
}

daemon_log=$tmp/$runtime.log
if [ "$runtime" = containerd ]; then
	shim_sockets_before=$tmp/shim-sockets-before
	shim_sockets >"$shim_sockets_before"
	start_containerd
	runtime_process=containerd
else
	start_podbayd
	runtime_process=podbayd
fi
echo "$daemon_pid" >"$tmp/$runtime.pid"
crictl_serving() { [ -S "$sock" ] && crictl version >/dev/null 2>&1; }
if ! wait_until 300 "$daemon_pid" crictl_serving; then
	tail -n 30 "$daemon_log" >&2
	die "$runtime did not start serving on $sock within 30 s"
fi

# The suite's default kubelet configuration (hack/make-rules/test-e2e-node.sh),
# and failCgroupV1: false, without which a v1.35+ kubelet does not start on a
# cgroup v1 host such as this one.
{
	cat "$k8s_dir/test/e2e_node/jenkins/default-kubelet-config.yaml"
	echo
	echo 'failCgroupV1: false'
} >"$tmp/kubelet-config.yaml"

save_sysctls
chains_before=$tmp/chains-before
kube_chains >"$chains_before"
keys_before=$tmp/keys-before
{ ls -d /tmp/insecure_test_key* 2>/dev/null || true; } | sort >"$keys_before"
[ -e /var/run/kubernetes ] || run_k8s_made=1

echo "host: $(nproc) CPUs, Linux $(uname -r), $(runc --version | head -n1), $(conmon --version | head -n1)"
echo "node e2e: k8s.io/kubernetes $k8s_version ($("$out/kubelet" --version)), $runtime $(crictl version 2>/dev/null | awk '/RuntimeVersion/ {print $2}'), images from $(sed -n 's/^# Every registry below is served by the local registry at \(.*\)\.$/\1/p' "$registries_conf"), $nodes ginkgo processes"
echo "focus: $focus"
echo "skip:  $skip"

# The test binary runs the kubelet found beside it ($out/kubelet): its
# --k8s-bin-dir is the runner's (run_local.go), not its own.
test_args=(
	--container-runtime-endpoint="unix://$sock"
	--image-service-endpoint="unix://$sock"
	--container-runtime-process-name="$runtime_process"
	--container-runtime-pid-file="$tmp/$runtime.pid"
	--prepull-images=false
	--report-dir="$report_dir"
	--kubelet-config-file="$tmp/kubelet-config.yaml"
	# No systemd: without these the framework moves every root-cgroup
	# process into /system, the kubelet into /kubelet.
	"--kubelet-flags=--kubelet-cgroups= --system-cgroups= --runtime-cgroups="
	# As containerd's node e2e job: the kubelet's pod and container stats
	# from the CRI (ListPodSandboxStats, ListContainerStats), not cAdvisor.
	--feature-gates="$feature_gates"
)
# shellcheck disable=SC2206 # E2E_NODE_ARGS is split on purpose
test_args+=(${E2E_NODE_ARGS:-})

# The framework starts the kubelet through systemd-run whenever it finds it
# in PATH; with systemd not running that fails. The suite gets a PATH of
# its own instead: links to every program of the host's PATH but
# systemd-run (first found wins, as in a PATH lookup).
suite_path=$PATH
if [ ! -d /run/systemd/system ] && command -v systemd-run >/dev/null; then
	mkdir -p "$tmp/path"
	IFS=: read -ra path_dirs <<<"$PATH"
	for d in "${path_dirs[@]}"; do
		[ -d "$d" ] || continue
		for f in "$d"/*; do
			name=${f##*/}
			[ "$name" != systemd-run ] && [ -x "$f" ] && [ ! -d "$f" ] && [ ! -e "$tmp/path/$name" ] || continue
			ln -s "$f" "$tmp/path/$name"
		done
	done
	suite_path=$tmp/path
	log "systemd is not running: the suite runs with a PATH without systemd-run ($suite_path)"
fi

log "running the node e2e suite; log in $suite_log"
suite_rc=0
# In the background, waited for: a SIGTERM or SIGINT to this script runs
# finish at once, which stops the suite's processes (stop_suite_processes;
# ginkgo's CLI does not pass a signal on to them).
(cd "$tmp" && PATH=$suite_path exec "$out/ginkgo" --procs="$nodes" --no-color -v --timeout="$ginkgo_timeout" \
	--focus="$focus" --skip="$skip" --output-dir="$tmp" --json-report="${report##*/}" \
	"$out/e2e_node.test" -- "${test_args[@]}") >"$suite_log" 2>&1 &
wait $! || suite_rc=$?
log "ginkgo exited with status $suite_rc"

[ -f "$report" ] || {
	tail -n 50 "$suite_log" >&2
	die "the suite wrote no report ($report)"
}
report_rc=0
"$bin/critest-report" specs "$report" >"$summary" || report_rc=$?
echo
head -n -1 "$summary"
# critest-report counts the specs focus and skip left out as skipped too;
# the summary counts only the specs that matched (ginkgo's PreRunStats):
# those that skipped themselves at run time are what is left of them.
read -r n_passed n_failed _ <<<"$(tail -n 1 "$summary" | tr -d ',' | awk '{print $1, $3}')"
n_matched=$(jq '[.[].PreRunStats.SpecsThatWillRun] | add' "$report")
echo "$n_matched specs matched the focus and skip ($(tail -n 1 "$summary" | awk '{print $5}') skipped in all, filtered out included)"
summary_line="$n_passed passed, $n_failed failed, $((n_matched - n_passed - n_failed)) skipped"
case $report_rc in
0) ;;
1)
	log "specs failed"
	failed=1
	;;
*)
	log "critest-report failed"
	failed=1
	;;
esac
if [ "$suite_rc" -ne 0 ] && [ "$report_rc" -eq 0 ]; then
	log "ginkgo failed though no spec did (the suite's setup or teardown); see $suite_log"
	failed=1
fi
