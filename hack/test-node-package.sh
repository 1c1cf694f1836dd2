#!/usr/bin/env bash
# Proves the Debian package on a fresh Debian 12 node with systemd: builds
# the .deb (hack/build-deb.sh), crictl and podbay-testimages on the host,
# boots the testvm guest (../shared/testvm; building its image first if
# there is none, with the package's dependencies preinstalled so that no
# download is needed), installs the package with apt-get, and runs a node
# through podbayd.service with crictl: a pod and a container from a local
# registry, exec, `systemctl restart podbayd` (the container keeps running
# and stays managed), `systemctl stop podbayd` (the pod's processes stay,
# KillMode=process), then removes the pods, purges the package and checks
# that nothing of podbay is left. Prints PASS/FAIL per step and
# "N passed, N failed" last; the guest is always powered off.
#
# Environment: TESTVM (the testvm script), TESTVM_* (see testvm), BIN (bin).
# Inside the guest the same script runs with --guest DIR.
set -uo pipefail

# shellcheck source=hack/node-lib.sh
source "$(dirname "$0")/node-lib.sh"

# ---------------------------------------------------------------- guest --

alive() { [ -n "$1" ] && [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status"; }
main_pid() { systemctl show -p MainPID --value podbayd; }
# podbay_procs lists the processes podbay left: conmon, pause, and anything
# in the pods' cgroups.
podbay_procs() {
	{
		pgrep -x conmon
		pgrep -x podbay-pause
		pgrep -f '^/pause$'
		find /sys/fs/cgroup/podbay -name cgroup.procs -exec cat {} + 2>/dev/null
	} | sort -u
}

guest_pod_json() {
	cat <<EOF
{"metadata": {"name": "pkgtest", "namespace": "default", "uid": "pkgtest-uid", "attempt": 0},
 "log_directory": "/var/log/pods/pkgtest", "linux": {}}
EOF
}
guest_ctr_json() {
	cat <<EOF
{"metadata": {"name": "$1"}, "image": {"image": "127.0.0.1:5000/test/busybox:latest"},
 "command": ["sleep", "3600"], "log_path": "$1.log", "linux": {}}
EOF
}

guest() {
	local dir=$1 deb pod ctr ctr2 cpid cpid2 conmon_pid pid1 pid2 procs
	cd "$dir" || exit 1
	deb=$(ls "$dir"/podbayd_*.deb)
	install -m 0755 crictl /usr/local/bin/crictl
	printf 'runtime-endpoint: unix:///run/podbay/podbay.sock\nimage-endpoint: unix:///run/podbay/podbay.sock\ntimeout: 60\n' >/etc/crictl.yaml
	# The test registry, plain HTTP on the guest's loopback.
	mkdir -p /etc/containers
	printf '[[registry]]\nlocation = "127.0.0.1:5000"\ninsecure = true\n' >/etc/containers/registries.conf
	systemd-run --unit podbay-testimages --quiet "$dir/podbay-testimages" --listen 127.0.0.1:5000 --busybox /bin/busybox
	check "test registry serves" wait_for 120 curl -fsS -o /dev/null http://127.0.0.1:5000/v2/

	# Installation. With every dependency present (TESTVM_EXTRA) apt
	# needs no download; else it fetches them from the mirror.
	local need=()
	for p in runc conmon containernetworking-plugins iptables; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
	done
	[ ${#need[@]} -eq 0 ] || { echo "guest: missing ${need[*]}: apt-get update first"; apt-get update -qq; }
	check "apt-get install ./$(basename "$deb")" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$deb"
	check "postinst enabled podbayd.service" systemctl is-enabled podbayd
	check "postinst started podbayd.service (active)" wait_for 300 systemctl is-active -q podbayd
	check "systemd-analyze verify podbayd.service" bash -c 'command -v systemd-analyze && ! systemd-analyze verify /lib/systemd/system/podbayd.service 2>&1 | grep podbayd'
	check "unit: Type=notify, Delegate, KillMode=process" \
		bash -c '[ "$(systemctl show -p Type,KillMode,Delegate,LimitNOFILE,OOMScoreAdjust podbayd | sort | tr "\n" " ")" = "Delegate=yes KillMode=process LimitNOFILE=1048576 OOMScoreAdjust=-999 Type=notify " ]'
	# Type=notify: `systemctl start` returns once podbayd sent READY=1,
	# so the socket answers at once, with no retry.
	systemctl stop podbayd
	check "systemctl start returns only when the CRI answers (READY=1)" \
		bash -c 'systemctl start podbayd && [ -S /run/podbay/podbay.sock ] && crictl --timeout 10s version'
	check "podbayd sent READY=1 (journal)" \
		bash -c 'journalctl -u podbayd -b --no-pager | grep -q "notified the service manager.*READY=1"'

	# A node: pod, image, container, exec.
	guest_pod_json >pod.json
	guest_ctr_json c1 >c1.json
	guest_ctr_json c2 >c2.json
	pod=$(crictl runp pod.json 2>runp.err)
	result "crictl runp" $? "$(cat runp.err)"
	check "crictl pull test/busybox" crictl pull 127.0.0.1:5000/test/busybox:latest
	ctr=$(crictl create "$pod" c1.json pod.json 2>create.err)
	result "crictl create" $? "$(cat create.err)"
	check "crictl start" crictl start "$ctr"
	check "crictl exec" bash -c "[ \"\$(crictl exec $ctr echo hello)\" = hello ]"
	cpid=$(crictl inspect -o go-template --template '{{.info.pid}}' "$ctr" 2>/dev/null)
	conmon_pid=$(pgrep -f "conmon .*$ctr" | head -1)
	check "conmon runs outside the unit's cgroup (/podbay/conmon)" \
		bash -c "grep -qx '0::/podbay/conmon' /proc/$conmon_pid/cgroup"
	# `crictl start` returning at all says `runc start` did not inherit it
	# either (it would wait for the container's own READY=1).
	check "NOTIFY_SOCKET not passed on to conmon or the container" \
		bash -c "! grep -qa NOTIFY_SOCKET= /proc/$conmon_pid/environ /proc/$cpid/environ"

	# Restart: the daemon goes, the container stays and is managed again.
	pid1=$(main_pid)
	check "systemctl restart podbayd" systemctl restart podbayd
	pid2=$(main_pid)
	check "a new podbayd serves" bash -c "[ '$pid1' != '$pid2' ] && crictl --timeout 10s version"
	check "container process survived the restart" alive "$cpid"
	check "conmon survived the restart" alive "$conmon_pid"
	check "container still RUNNING after restart" \
		bash -c "[ \"\$(crictl inspect -o go-template --template '{{.status.state}}' $ctr)\" = CONTAINER_RUNNING ]"
	check "crictl exec after restart" bash -c "[ \"\$(crictl exec $ctr echo again)\" = again ]"
	check "crictl stop after restart" crictl stop "$ctr"
	check "crictl rm after restart" crictl rm "$ctr"
	check "container process gone" bash -c "! kill -0 $cpid 2>/dev/null"

	# Stop: the daemon goes, the pod's processes stay (KillMode=process).
	ctr2=$(crictl create "$pod" c2.json pod.json 2>create.err)
	result "crictl create c2" $? "$(cat create.err)"
	check "crictl start c2" crictl start "$ctr2"
	cpid2=$(crictl inspect -o go-template --template '{{.info.pid}}' "$ctr2" 2>/dev/null)
	procs=$(podbay_procs | tr '\n' ' ')
	check "systemctl stop podbayd" systemctl stop podbayd
	check "podbayd inactive" bash -c '[ "$(systemctl is-active podbayd)" = inactive ]'
	check "pod processes outlive the stopped daemon" bash -c "for p in $procs $cpid2; do [ -d /proc/\$p ] || exit 1; done"
	check "start again, the pod is still there" \
		bash -c "systemctl start podbayd && [ \"\$(crictl inspect -o go-template --template '{{.status.state}}' $ctr2)\" = CONTAINER_RUNNING ]"

	# An upgrade (here a reinstall): postinst restarts podbayd, the pod
	# stays, and the operator's edit of the conffile survives.
	sed -i 's/^#log_level = "info"/log_level = "debug"/' /etc/podbay/podbay.toml
	pid1=$(main_pid)
	check "upgrade (apt-get install --reinstall) with an edited podbay.toml" \
		env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall "$deb"
	check "upgrade restarted podbayd" bash -c "[ '$pid1' != \"\$(systemctl show -p MainPID --value podbayd)\" ]"
	# Until now podbayd logged at info: a debug line is the edit's doing.
	check "the edited podbay.toml is kept and in effect (debug log)" \
		bash -c "grep -qx 'log_level = \"debug\"' /etc/podbay/podbay.toml && crictl pods >/dev/null && journalctl -u podbayd -b --no-pager | grep -q 'level=DEBUG msg=\"rpc done\"'"
	check "the pod's container kept running through the upgrade" \
		bash -c "alive() { [ -d /proc/\$1 ]; }; alive $cpid2 && [ \"\$(crictl inspect -o go-template --template '{{.status.state}}' $ctr2)\" = CONTAINER_RUNNING ]"

	# Clean up through the CRI, then purge.
	check "crictl stopp + rmp" bash -c "crictl stopp $pod && crictl rmp $pod"
	check "crictl rmi" crictl rmi 127.0.0.1:5000/test/busybox:latest
	check "no pod process left" bash -c '[ -z "$(pgrep -x conmon; find /sys/fs/cgroup/podbay -name cgroup.procs -exec cat {} + 2>/dev/null)" ]'
	check "apt-get purge podbayd" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q podbayd
	check "package gone (dpkg -s fails)" bash -c '! dpkg -s podbayd >/dev/null 2>&1'
	check "unit gone" bash -c '! systemctl cat podbayd >/dev/null 2>&1 && [ ! -e /lib/systemd/system/podbayd.service ] && [ ! -e /etc/systemd/system/multi-user.target.wants/podbayd.service ]'
	check "binaries and config gone" bash -c '! ls -d /usr/bin/podbay* /etc/podbay 2>/dev/null'
	check "state gone (/var/lib/podbay, /run/podbay)" bash -c '! ls -d /var/lib/podbay /run/podbay 2>/dev/null'
	check "no podbay mount left" bash -c '! grep podbay /proc/self/mountinfo'
	check "no podbay process left" bash -c '[ -z "$(pgrep -x podbayd; pgrep -x conmon)" ]'
	check "no netns, CNI config, IPAM dir or bridge left" \
		bash -c '! ls -d /var/run/netns/podbay-* /etc/cni/net.d/10-podbay.conflist /var/lib/cni/networks/podbay /sys/class/net/podbay0 2>/dev/null'
	systemctl stop podbay-testimages
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
find_testvm || { echo "test-node-package: no testvm (set TESTVM)" >&2; exit 1; }
# The package's dependencies, preinstalled in an image built here.
export TESTVM_EXTRA=${TESTVM_EXTRA:-runc,crun,conmon,containernetworking-plugins,iptables,busybox-static}

work=$(mktemp -d)
vm_up=0
cleanup() {
	[ "$vm_up" -eq 1 ] && "$TESTVM" down >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

deb=$(./hack/build-deb.sh "$work" | tail -1)
result "build the .deb ($(basename "$deb"))" $? || { summary; exit 1; }
[ -x "$BIN/crictl" ] || (cd tools && GOFLAGS= go build -o "$repo/$BIN/crictl" sigs.k8s.io/cri-tools/cmd/crictl)
GOFLAGS=${GOFLAGS:--tags=containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,nri_no_wasm,grpcnotrace} \
	CGO_ENABLED=0 go build -o "$work/podbay-testimages" ./cmd/podbay-testimages
result "build crictl and podbay-testimages" $?
cp "$BIN/crictl" "$0" hack/node-lib.sh "$work/"

# make install and uninstall, staged in a DESTDIR: files, the unit's
# ExecStart under PREFIX, an edited config kept by a second install.
dest=$work/destdir
check "make install DESTDIR PREFIX=/usr/local" bash -c "make -s install DESTDIR=$dest >/dev/null &&
	[ -x $dest/usr/local/bin/podbayd ] && [ -x $dest/usr/local/bin/podbay ] && [ -x $dest/usr/local/bin/podbay-pause ] &&
	grep -qx 'ExecStart=/usr/local/bin/podbayd' $dest/etc/systemd/system/podbayd.service &&
	cmp -s dist/podbay.toml $dest/etc/podbay/podbay.toml"
check "make install keeps an edited podbay.toml; make uninstall" bash -c "echo 'log_level = \"debug\"' >>$dest/etc/podbay/podbay.toml &&
	make -s install DESTDIR=$dest >/dev/null && grep -qx 'log_level = \"debug\"' $dest/etc/podbay/podbay.toml &&
	make -s uninstall DESTDIR=$dest >/dev/null && [ -z \"\$(find $dest -type f ! -path '*/etc/podbay/*')\" ]"
rm -rf "$dest"

if ! grep -q '^image:.*built' <<<"$("$TESTVM" status)"; then
	check "testvm build (TESTVM_EXTRA=$TESTVM_EXTRA)" "$TESTVM" build || { summary; exit 1; }
fi
vm_up=1
check "testvm up" "$TESTVM" up || { summary; exit 1; }
check "push the package, crictl, registry" "$TESTVM" push "$work" /root/pkgtest || { summary; exit 1; }
# The guest prints its own PASS/FAIL lines and summary; add them up.
"$TESTVM" ssh "bash /root/pkgtest/$(basename "$0") --guest /root/pkgtest" 2>&1 | tee "$work/guest.out"
add_guest_results "$work/guest.out"
"$TESTVM" down >/dev/null 2>&1
vm_up=0
result "testvm down" 0
summary
