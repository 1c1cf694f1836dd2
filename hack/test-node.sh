#!/usr/bin/env bash
# make test-node: podbay on a real node layout. Builds everything on the
# host, boots the testvm guest (../shared/testvm: Debian 12, systemd PID 1,
# pure cgroup v2, full root), and there
#
#   1. installs podbay's dependencies as the README's two commands do
#      (hack/install-deps.sh --node: the image has most of them, so this is
#      quick; what is missing comes from the Debian mirror),
#   2. installs podbayd as `make install` does (/usr/local/bin, the unit
#      dist/systemd/podbayd.service) and starts it under systemd with its
#      default cgroup driver; checks that it serves and what driver it
#      reports,
#   3. runs a focused part of the integration suite (test/integration,
#      compiled on the host with `go test -c`) once per cgroup driver
#      (PODBAY_TEST_CGROUP_DRIVER) and OCI runtime (PODBAY_TEST_OCI_RUNTIME):
#      pod and container lifecycle, exec and logs, cgroup v2 resources,
#      stats, OOM and resize, restart recovery — each test with its leak
#      check — then TestGVisor* once (they skip without runsc),
#   4. runs critest (default handler) against the systemd-run podbayd,
#      with the stand-in images served by podbay-testimages --critest.
#
# Prints PASS/FAIL per step and per test (SKIP lines are not counted) and
# "N passed, N failed" last; the guest is always powered off; exits non-zero
# on any failure. Under TCG emulation (this host: no usable KVM) every test
# is ~20x slower than on the host: see docs/testing.md, "Testing on a real
# node".
#
# Environment:
#   TESTVM, TESTVM_*       the testvm script and its knobs (TESTVM_DIR, TESTVM_MEM…)
#   BIN                    where `make build` puts binaries (bin)
#   NODE_DRIVERS           cgroup drivers to run the suite with ("cgroupfs systemd")
#   NODE_RUNTIMES          OCI runtimes to run the suite with ("runc crun")
#   NODE_TYPES             handler types to run the suite as ("oci"; "oci vm" adds
#                          the vm handler: containerd-shim-runc-v2 driving the runtime)
#   NODE_TESTS             the suite's -test.run regexp (the focused list below)
#   NODE_GVISOR            1 (default): build gVisor's runsc and shim (static,
#                          from the module proxy), push them and run ^TestGVisor
#                          once with them; 0: not
#   GVISOR_VERSION         the gvisor.dev/gvisor version built (the proven one)
#   GVISOR_BIN             a directory with runsc and containerd-shim-runsc-v1
#                          already built (static): pushed instead of building
#   NODE_CRITEST           1 (default): run critest in the guest; 0: not
#   NODE_E2E               1: run Kubernetes' node e2e slice (hack/e2e-node.sh
#                          --slice) in the guest against the systemd-run podbayd,
#                          the kubelet as a systemd unit; 0 (default): not
#   CRITEST_ARGS           extra critest flags, split on spaces
#   NODE_TEST_TIMEOUT      -test.timeout of each suite run (90m)
#   NODE_DAEMON_DRIVER     cgroup_driver of the systemd-run podbayd ("" = its default)
#   NODE_DAEMON_RUNTIME    default_runtime of the systemd-run podbayd, the handler
#                          critest runs ("" = its default, runc; crun: critest with crun)
#
# Inside the guest the same script runs with --guest DIR.
set -uo pipefail

# shellcheck source=hack/node-lib.sh
source "$(dirname "$0")/node-lib.sh"

NODE_DRIVERS=${NODE_DRIVERS:-cgroupfs systemd}
NODE_RUNTIMES=${NODE_RUNTIMES:-runc crun}
NODE_TYPES=${NODE_TYPES:-oci}
# Pod and container lifecycle, exec/attach/logs, exit reasons (OOM), stats
# and metrics, cgroup v2 resources/stats/OOM/resize, restart recovery,
# the AppArmor default profile.
NODE_TESTS=${NODE_TESTS:-'^(TestSandboxLifecycle|TestContainerLifecycle|TestContainerExitReasons|TestContainerExecTimeout|TestContainerLogReopen|TestStreaming|TestContainerStats|TestPodSandboxMetrics|TestCgroupV2.*|TestRestartRecovery|TestAppArmorDefault|TestSystemdCgroupDriver)$'}
NODE_GVISOR=${NODE_GVISOR:-1}
GVISOR_VERSION=${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
GVISOR_BIN=${GVISOR_BIN:-}
NODE_CRITEST=${NODE_CRITEST:-1}
NODE_E2E=${NODE_E2E:-0}
NODE_TEST_TIMEOUT=${NODE_TEST_TIMEOUT:-90m}
NODE_DAEMON_DRIVER=${NODE_DAEMON_DRIVER:-}
NODE_DAEMON_RUNTIME=${NODE_DAEMON_RUNTIME:-}
CRITEST_ARGS=${CRITEST_ARGS:-}

# ---------------------------------------------------------------- guest --

# suite LABEL ENV... -- ARGS...: runs the compiled integration suite with
# ENV and -test.run ARGS; one PASS/FAIL line per top-level test.
suite() {
	local label=$1 out rc line name st secs n=0
	shift
	local envs=()
	while [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	out=$dir/suite-${label//[^a-z0-9]/_}.log
	step_start=$SECONDS
	(cd "$dir" && env "${envs[@]}" PODBAY_ITEST_BINDIR="$dir/itest" ./integration.test \
		-test.count=1 -test.v -test.timeout "$NODE_TEST_TIMEOUT" "$@") >"$out" 2>&1
	rc=$?
	while read -r line; do
		# --- PASS: TestX (12.34s)
		st=${line#--- }
		st=${st%%:*}
		name=$(awk '{print $3}' <<<"$line")
		secs=$(sed -n 's/.*(\([0-9]*\)\.[0-9]*s)$/\1/p' <<<"$line")
		n=$((n + 1))
		case $st in
		PASS)
			passed=$((passed + 1))
			printf 'PASS %-58s %4ds\n' "[$label] $name" "${secs:-0}"
			;;
		SKIP)
			printf 'SKIP %-58s %4ds %s\n' "[$label] $name" "${secs:-0}" \
				"$(grep -A2 -F -- "$line" "$out" | sed -n 2p | sed 's/^ *//' | cut -c1-120)"
			;;
		*)
			failed=$((failed + 1))
			printf 'FAIL %-58s %4ds (log %s)\n' "[$label] $name" "${secs:-0}" "$out"
			# The failing lines, for the report.
			awk -v t="$name" '$0 ~ "^=== RUN +"t"$" {on=1} on && /_test\.go:[0-9]+:/ {print "     " $0} $0 ~ "^--- FAIL: "t" " {on=0}' "$out" | head -20
			;;
		esac
	done < <(grep -E '^--- (PASS|FAIL|SKIP): Test[^/ ]* ' "$out")
	step_start=$SECONDS
	if [ "$rc" -ne 0 ] && ! grep -qE '^--- FAIL' "$out"; then
		# A panic, a timeout or a build mismatch: no test reported it.
		result "[$label] suite run (exit $rc)" 1 "$(tail -n 5 "$out" | tr '\n' ' ')"
	elif [ "$n" -eq 0 ]; then
		printf 'SKIP %-58s %4ds %s\n' "[$label]" 0 "no test matched $*"
	fi
	echo "     [$label] $n tests in $((SECONDS - suite_start))s" >&2
}

# critest_node runs critest against the systemd-run podbayd: the registry
# of stand-in images, mirrored for podbayd in /etc/podbay, and the report
# with critest.sh's allow-list.
critest_node() {
	local conf=/etc/podbay/podbay.toml regconf=/etc/podbay/critest-registries.conf rc
	systemd-run --unit podbay-critest-images --quiet "$dir/bin/podbay-testimages" --critest --listen 127.0.0.1:0 \
		--busybox "$dir/debian-busybox/bin/busybox" --standin "$dir/bin/podbay-standin" \
		--pause-binary /usr/local/bin/podbay-pause --registries-conf "$regconf"
	check "critest: stand-in registry serves" wait_for 120 test -s "$regconf" || return
	echo '{"default": [{"type": "insecureAcceptAnything"}]}' >/etc/podbay/critest-policy.json
	# The test node's podbay.toml: the stand-ins' mirrors, a policy that
	# accepts them. Top-level keys, then the [image] table.
	cp "$conf" "$conf.orig"
	{
		cat "$conf.orig"
		printf '\n[image]\nregistries_conf = "%s"\nsignature_policy = "/etc/podbay/critest-policy.json"\n' "$regconf"
	} >"$conf"
	check "critest: podbayd restarted with the mirrors" systemctl restart podbayd || return
	printf 'runtime-endpoint: unix:///run/podbay/podbay.sock\nimage-endpoint: unix:///run/podbay/podbay.sock\ntimeout: 300\n' >/etc/crictl.yaml
	local args=(--runtime-endpoint unix:///run/podbay/podbay.sock --image-endpoint unix:///run/podbay/podbay.sock
		--ginkgo.no-color --ginkgo.v --ginkgo.json-report "$dir/critest-report.json" --ginkgo.timeout 120m)
	# shellcheck disable=SC2206 # split on purpose
	args+=($CRITEST_ARGS)
	step_start=$SECONDS
	(cd "$dir" && ./bin/critest "${args[@]}") >"$dir/critest.log" 2>&1
	rc=$?
	echo "     critest exited with $rc after $((SECONDS - step_start))s (log $dir/critest.log)" >&2
	# critest.sh's allow-list: the digest image cannot be rebuilt offline.
	"$dir/bin/critest-report" specs --allow 'Image Manager public image with digest should be pulled and removed' \
		"$dir/critest-report.json" >"$dir/critest-summary.txt"
	rc=$?
	sed 's/^/     /' "$dir/critest-summary.txt"
	result "critest ($(tail -n 1 "$dir/critest-summary.txt"))" "$rc" "log $dir/critest.log"
	crictl rmp --force --all >/dev/null 2>&1
	crictl rmi --all >/dev/null 2>&1
	check "critest: no pod process left" bash -c '[ -z "$(pgrep -x conmon)" ]'
	systemctl stop podbay-critest-images
	mv "$conf.orig" "$conf"
}

# node_e2e runs the node e2e slice (hack/e2e-node.sh --slice: the specs
# that found podbay's bugs and a smoke of each area) against the systemd-run
# podbayd: the kubelet as the framework starts it on a systemd host (a
# transient unit in runtime.slice, Delegate=true), the driver podbayd
# reports (KubeletCgroupDriverFromCRI), the stand-in images of
# podbay-testimages --node-e2e, one ginkgo process (the guest is emulated).
node_e2e() {
	local conf=/etc/podbay/podbay.toml regconf=/etc/podbay/e2e-registries.conf e2e=$dir/e2e rc
	systemd-run --unit podbay-e2e-images --quiet "$dir/bin/podbay-testimages" --node-e2e --listen 127.0.0.1:0 \
		--busybox "$e2e/busybox" --standin "$dir/bin/podbay-standin" --agnhost "$e2e/agnhost" \
		--k8s-images-dir "$e2e/images" --pause-binary /usr/local/bin/podbay-pause --registries-conf "$regconf"
	check "node e2e: stand-in registry serves" wait_for 300 test -s "$regconf" || return
	echo '{"default": [{"type": "insecureAcceptAnything"}]}' >/etc/podbay/e2e-policy.json
	cp "$conf" "$conf.orig"
	{
		cat "$conf.orig"
		printf '\n[image]\nregistries_conf = "%s"\nsignature_policy = "/etc/podbay/e2e-policy.json"\n' "$regconf"
		# The handler the RuntimeClass and PodOverhead specs name.
		printf '\n[runtimes.runc]\npath = "runc"\n\n[runtimes.test-handler]\npath = "runc"\n'
	} >"$conf"
	check "node e2e: podbayd restarted with the mirrors and test-handler" systemctl restart podbayd || return
	systemctl show -p MainPID --value podbayd >"$e2e/podbayd.pid"
	cat "$e2e/default-kubelet-config.yaml" >"$e2e/kubelet-config.yaml"
	mkdir -p "$e2e/report"
	step_start=$SECONDS
	(cd "$e2e" && ./e2e_node.test --ginkgo.no-color --ginkgo.v --ginkgo.timeout=100m \
		--ginkgo.focus="$(cat "$e2e/focus")" --ginkgo.skip="$(cat "$e2e/skip")" \
		--ginkgo.json-report="$e2e/report.json" \
		--container-runtime-endpoint=unix:///run/podbay/podbay.sock --image-service-endpoint=unix:///run/podbay/podbay.sock \
		--container-runtime-process-name=podbayd --container-runtime-pid-file="$e2e/podbayd.pid" \
		--prepull-images=false --report-dir="$e2e/report" --kubelet-config-file="$e2e/kubelet-config.yaml" \
		--feature-gates=PodAndContainerStatsFromCRI=true) >"$e2e/suite.log" 2>&1
	rc=$?
	echo "     node e2e exited with $rc after $((SECONDS - step_start))s (log $e2e/suite.log)" >&2
	if [ -f "$e2e/report.json" ]; then
		"$dir/bin/critest-report" specs "$e2e/report.json" >"$e2e/summary.txt"
		rc=$?
		sed 's/^/     /' "$e2e/summary.txt"
		result "node e2e slice ($(tail -n 1 "$e2e/summary.txt"))" "$rc" "log $e2e/suite.log"
	else
		result "node e2e slice (no report)" 1 "$(tail -n 5 "$e2e/suite.log" | tr '\n' ' ')"
	fi
	crictl rmp --force --all >/dev/null 2>&1
	crictl rmi --all >/dev/null 2>&1
	check "node e2e: no pod process left" bash -c '[ -z "$(pgrep -x conmon)" ]'
	systemctl stop podbay-e2e-images
	mv "$conf.orig" "$conf"
	systemctl restart podbayd
}

guest() {
	dir=$1
	cd "$dir" || exit 1
	local t
	export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

	# 1. Dependencies, as the README's two commands install them.
	check "install-deps.sh --node (README)" ./install-deps.sh --node
	# The vm handler's shim (Debian's containerd), which a node needs only
	# for such a handler.
	if [[ " $NODE_TYPES " == *" vm "* ]]; then
		check "containerd-shim-runc-v2 (package containerd) for the vm handler" \
			bash -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd >/dev/null'
	fi

	# 2. podbayd under systemd, as make install lays it out.
	install -m 0755 bin/podbayd bin/podbay bin/podbay-pause bin/crictl /usr/local/bin/
	sed 's|^ExecStart=/usr/bin/podbayd|ExecStart=/usr/local/bin/podbayd|' podbayd.service >/etc/systemd/system/podbayd.service
	install -d /etc/podbay
	install -m 0644 podbay.toml /etc/podbay/podbay.toml
	if [ -n "$NODE_DAEMON_DRIVER" ]; then
		sed -i "1i cgroup_driver = \"$NODE_DAEMON_DRIVER\"" /etc/podbay/podbay.toml
	fi
	if [ -n "$NODE_DAEMON_RUNTIME" ]; then
		sed -i "1i default_runtime = \"$NODE_DAEMON_RUNTIME\"" /etc/podbay/podbay.toml
	fi
	printf 'runtime-endpoint: unix:///run/podbay/podbay.sock\nimage-endpoint: unix:///run/podbay/podbay.sock\ntimeout: 120\n' >/etc/crictl.yaml
	systemctl daemon-reload
	check "systemctl start podbayd (Type=notify)" systemctl start podbayd
	check "podbayd.service active, CRI answers" bash -c 'systemctl is-active -q podbayd && crictl version'
	t=$(crictl runtime-config 2>&1 | tr -s '\n ' ' ')
	echo "     podbayd reports cgroup driver: ${t:-?} (PID 1 $(cat /proc/1/comm), $(stat -fc %T /sys/fs/cgroup))"
	check "podbayd runs in podbayd.service" bash -c "grep -q '^0::/system.slice/podbayd.service' /proc/\$(systemctl show -p MainPID --value podbayd)/cgroup"

	# 3. The focused suite, per driver and runtime; then gVisor.
	local driver rt type label
	for type in $NODE_TYPES; do
		for driver in $NODE_DRIVERS; do
			for rt in $NODE_RUNTIMES; do
				suite_start=$SECONDS
				label=$driver,$rt
				[ "$type" = oci ] || label+=",$type"
				suite "$label" PODBAY_TEST_RUNTIME_TYPE="$type" PODBAY_TEST_CGROUP_DRIVER="$driver" PODBAY_TEST_OCI_RUNTIME="$rt" -- -test.run "$NODE_TESTS"
			done
		done
	done
	if [ "$NODE_GVISOR" = 1 ]; then
		suite_start=$SECONDS
		suite "gvisor" PODBAY_TEST_OCI_RUNTIME=runc PODBAY_TEST_RUNSC="$dir/gvisor/runsc" -- -test.run '^TestGVisor'
	fi

	# 4. critest against the systemd-run podbayd.
	if [ "$NODE_CRITEST" = 1 ]; then
		critest_node
	fi
	# 5. The node e2e slice against it.
	if [ "$NODE_E2E" = 1 ]; then
		node_e2e
	fi
	check "systemctl stop podbayd" systemctl stop podbayd
	summary
}

# ----------------------------------------------------------------- host --

if [ "${1:-}" = --guest ]; then
	guest "$2"
	exit
fi

cd "$(dirname "$0")/.." || exit 1
repo=$PWD
BIN=${BIN:-bin}
export PATH=/usr/local/go/bin:$PATH
BUILDTAGS=containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,nri_no_wasm,grpcnotrace
export GOFLAGS=-tags=$BUILDTAGS
find_testvm || { echo "test-node: no testvm (set TESTVM)" >&2; exit 1; }
# Images built here have the node's dependencies preinstalled.
export TESTVM_EXTRA=${TESTVM_EXTRA:-runc,crun,conmon,criu,containernetworking-plugins,iptables,busybox-static}
log() { echo "test-node: $*" >&2; }
# shellcheck source=hack/lib.sh
source hack/lib.sh

work=$(mktemp -d /tmp/pbnode.XXXXXX)
vm_up=0
cleanup() {
	[ "$vm_up" -eq 1 ] && "$TESTVM" down >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Everything static or against the same glibc (the guest is Debian 12 too).
# itest/ is the suite's PODBAY_ITEST_BINDIR: what its TestMain would build.
build() {
	set -e
	mkdir -p "$work/bin" "$work/itest"
	go build -o "$work/bin/" ./cmd/podbayd ./cmd/podbay ./cmd/podbay-testimages
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$work/bin/podbay-pause" ./cmd/podbay-pause
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/bin/podbay-standin" ./cmd/podbay-testimages/standin
	CGO_ENABLED=0 go build -tags "$BUILDTAGS,failpoints" -o "$work/itest/" ./test/tools/podbay-failcni \
		./test/tools/podbay-failruntime ./test/tools/nri-logger ./test/tools/nri-device-injector ./test/tools/podbay-syscallprobe \
		./cmd/podbay ./cmd/podbay-pause ./cmd/podbayd
	CGO_ENABLED=0 go build -o "$work/itest/podbayd-nofailpoints" ./cmd/podbayd
	go test -c -o "$work/integration.test" ./test/integration
	cd tools
	local version
	version=$(GOFLAGS='' go list -m -f '{{.Version}}' sigs.k8s.io/cri-tools)
	GOFLAGS='' go build -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$version" -o "$work/bin/crictl" sigs.k8s.io/cri-tools/cmd/crictl
	GOFLAGS='' go test -c -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$version" -o "$work/bin/critest" sigs.k8s.io/cri-tools/cmd/critest
	GOFLAGS='' go build -o "$work/bin/critest-report" ./cmd/critest-report
	cd "$repo"
	fetch_debian_busybox "$repo/$BIN/debian-busybox" "$work/deb" >/dev/null
	cp -a "$repo/$BIN/debian-busybox" "$work/"
	rm -rf "$work/deb"
	cp hack/test-node.sh hack/node-lib.sh hack/install-deps.sh dist/podbay.toml dist/systemd/podbayd.service "$work/"
	if [ "$NODE_E2E" = 1 ]; then
		# The node e2e slice: the binaries e2e-node.sh builds, the stand-in
		# images' files from the module's test/images, its focus and skip.
		./hack/e2e-node.sh --build-only >&2
		local k8s_dir e2e=$work/e2e
		k8s_dir=$(cd tools/e2e-node && GOFLAGS='' go list -m -f '{{.Dir}}' k8s.io/kubernetes)
		mkdir -p "$e2e/images/agnhost" "$e2e/images/kitten" "$e2e/images/nautilus"
		cp _output/e2e-node/kubelet _output/e2e-node/e2e_node.test _output/e2e-node/agnhost "$e2e/"
		cp _output/e2e-node/busybox-*/busybox "$e2e/busybox"
		cp -r "$k8s_dir/test/images/agnhost/porter" "$e2e/images/agnhost/"
		cp -r "$k8s_dir/test/images/kitten/html" "$e2e/images/kitten/"
		cp -r "$k8s_dir/test/images/nautilus/html" "$e2e/images/nautilus/"
		cp "$k8s_dir/test/e2e_node/jenkins/default-kubelet-config.yaml" "$e2e/"
		chmod -R u+w "$e2e"
		sed -n "s/^readonly slice_focus='\(.*\)'\$/\1/p" hack/e2e-node.sh >"$e2e/focus"
		sed -n "s/^readonly default_skip='\(.*\)'\$/\1/p" hack/e2e-node.sh >"$e2e/skip"
		[ -s "$e2e/focus" ] && [ -s "$e2e/skip" ]
	fi
	[ "$NODE_GVISOR" = 1 ] || return 0
	# gVisor as docs/operator-guide.md ("gVisor") builds it: static, or its
	# sandbox never boots.
	mkdir -p "$work/gvisor"
	if [ -n "$GVISOR_BIN" ]; then
		cp "$GVISOR_BIN/runsc" "$GVISOR_BIN/containerd-shim-runsc-v1" "$work/gvisor/"
		return
	fi
	local mod
	mod=$(mktemp -d /tmp/pbgvisor.XXXXXX)
	(cd "$mod" && GOFLAGS='' go mod init gvisorbuild &&
		GOFLAGS='' go get "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" "gvisor.dev/gvisor/shim@$GVISOR_VERSION" &&
		GOFLAGS='' CGO_ENABLED=0 go build -o "$work/gvisor/runsc" gvisor.dev/gvisor/runsc &&
		GOFLAGS='' CGO_ENABLED=0 go build -o "$work/gvisor/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim)
	local rc=$?
	rm -rf "$mod"
	return $rc
}
gvisor_label=
[ "$NODE_GVISOR" = 1 ] && gvisor_label=", gVisor"
check "build podbayd, the suite (go test -c), crictl, critest$gvisor_label" bash -c "$(declare -f build fetch_debian_busybox log); work=$work repo=$repo BIN=$BIN BUILDTAGS=$BUILDTAGS NODE_GVISOR=$NODE_GVISOR GVISOR_VERSION=$GVISOR_VERSION GVISOR_BIN=$GVISOR_BIN NODE_E2E=$NODE_E2E; build" ||
	{ summary; exit 1; }

# "image:  not built" on a machine that never built it.
if grep -q '^image:.*not built' <<<"$("$TESTVM" status)"; then
	check "testvm build (TESTVM_EXTRA=$TESTVM_EXTRA)" "$TESTVM" build || { summary; exit 1; }
fi
vm_up=1
check "testvm up" "$TESTVM" up || { summary; exit 1; }
check "push $(du -sh "$work" | cut -f1) of binaries" "$TESTVM" push "$work" /root/nodetest || { summary; exit 1; }
# The guest prints its own PASS/FAIL lines and summary; add them up.
"$TESTVM" ssh "NODE_DRIVERS='$NODE_DRIVERS' NODE_RUNTIMES='$NODE_RUNTIMES' NODE_TYPES='$NODE_TYPES' NODE_TESTS='$NODE_TESTS' NODE_GVISOR='$NODE_GVISOR'" \
	"NODE_CRITEST='$NODE_CRITEST' CRITEST_ARGS='$CRITEST_ARGS' NODE_TEST_TIMEOUT='$NODE_TEST_TIMEOUT' NODE_E2E='$NODE_E2E'" \
	"NODE_DAEMON_DRIVER='$NODE_DAEMON_DRIVER' NODE_DAEMON_RUNTIME='$NODE_DAEMON_RUNTIME' bash /root/nodetest/$(basename "$0") --guest /root/nodetest" 2>&1 |
	tee "$work/guest.out"
add_guest_results "$work/guest.out"
"$TESTVM" down >/dev/null 2>&1
vm_up=0
result "testvm down" 0
summary
