#!/usr/bin/env bash
# Installs what podbay needs on a Debian machine, only what is missing:
# the OCI runtimes, conmon, CNI plugins, iptables, CRIU (CheckpointContainer),
# and the tools the tests use.
# With --test also Debian's containerd package, for its
# containerd-shim-runc-v2: the tests run a "vm" handler on it (the shim v2
# API Kata speaks). podbayd itself needs it only for such a handler. And
# what building runc from tools/ takes (cgo with libseccomp): the tests run
# user-namespaced pods on it, as Debian 12's runc 1.1.5 has no idmapped
# mounts. With --node only what a node running prebuilt podbay binaries
# needs (no Go, git or make): make test-node runs it so in its guest.
set -euo pipefail

with_test=0
node=0
case "${1:-}" in
--test) with_test=1 ;;
--node) node=1 ;;
"") ;;
*)
	echo "usage: $0 [--test | --node]" >&2
	exit 2
	;;
esac

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: run as root (sudo)" >&2
	exit 1
fi

packages=(runc crun conmon criu containernetworking-plugins iptables iproute2 iputils-ping util-linux procps busybox-static ca-certificates isal git make jq)
if [ "$node" -eq 1 ]; then
	packages=(runc crun conmon criu containernetworking-plugins iptables iproute2 util-linux procps busybox-static ca-certificates isal)
fi
# apparmor_parser, where the kernel has AppArmor (Debian's and Ubuntu's do):
# localhost profiles are loaded with it.
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
	packages+=(apparmor)
fi
if [ "$with_test" -eq 1 ]; then
	packages+=(containerd gcc libc6-dev pkg-config libseccomp-dev)
fi
missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "$node" -eq 0 ] || exit 0

# Go: the machine's own if it is new enough (1.21+ fetches the exact
# toolchain go.mod asks for through the module proxy); else Debian's.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
	echo "install-deps: installing golang-go"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
fi
minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${minor:-0}" -lt 21 ]; then
	echo "install-deps: Go $(go env GOVERSION) is too old to fetch the Go 1.26+ toolchain podbay needs; install Go 1.26 or later" >&2
	exit 1
fi
