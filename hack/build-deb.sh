#!/usr/bin/env bash
# Builds podbay's Debian package with dpkg-deb alone (no debhelper):
# OUTDIR/podbayd_<version>_<arch>.deb (OUTDIR default bin). The version is
# the tag at HEAD (v1.2.3 -> 1.2.3), else server.Version with "-" as "~"
# plus the commit count and hash (0.1.0~dev+612.g8c3c479), ".dirty" for
# uncommitted changes; the binaries report the same. Files: /usr/bin/podbayd,
# podbay, podbay-pause; /lib/systemd/system/podbayd.service;
# /etc/podbay/podbay.toml (a conffile); maintainer scripts from dist/deb.
# The built package is checked with dpkg-deb --info and --contents.
set -euo pipefail

cd "$(dirname "$0")/.."
out=${1:-bin}
export PATH=/usr/local/go/bin:$PATH
export GOFLAGS=${GOFLAGS:--tags=containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,nri_no_wasm,grpcnotrace}

log() { echo "build-deb: $*"; }
die() {
	echo "build-deb: $*" >&2
	exit 1
}
for t in dpkg-deb fakeroot objdump; do
	command -v "$t" >/dev/null || die "$t is missing (apt-get install dpkg-dev fakeroot binutils)"
done

arch=$(dpkg --print-architecture)
base=$(sed -n 's/^var Version = "\(.*\)"$/\1/p' internal/server/server.go)
[ -n "$base" ] || die "no Version in internal/server/server.go"
if tag=$(git describe --tags --exact-match 2>/dev/null); then
	version=${tag#v}
	goversion=$version
else
	suffix=+$(git rev-list --count HEAD).g$(git rev-parse --short HEAD)
	git diff --quiet HEAD 2>/dev/null || suffix+=.dirty
	version=${base//-/\~}$suffix
	goversion=$base$suffix
fi
[[ $version =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "version $version is not a Debian version"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/podbay" "$root/DEBIAN" \
	"$root/usr/share/doc/podbayd"

log "building podbayd $version ($arch)"
ldflags="-X github.com/podbay/podbay/internal/server.Version=$goversion"
go build -trimpath -ldflags "$ldflags" -o "$root/usr/bin/podbayd" ./cmd/podbayd
go build -trimpath -ldflags "$ldflags" -o "$root/usr/bin/podbay" ./cmd/podbay
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$root/usr/bin/podbay-pause" ./cmd/podbay-pause

install -m 0644 dist/systemd/podbayd.service "$root/lib/systemd/system/podbayd.service"
grep -qx 'ExecStart=/usr/bin/podbayd' "$root/lib/systemd/system/podbayd.service" || die "the unit's ExecStart is not /usr/bin/podbayd"
install -m 0644 dist/podbay.toml "$root/etc/podbay/podbay.toml"
install -m 0644 README.md "$root/usr/share/doc/podbayd/README.md"
# The reference the README links to, at the same relative path (docs/).
install -d "$root/usr/share/doc/podbayd/docs"
install -m 0644 docs/*.md "$root/usr/share/doc/podbayd/docs/"
install -m 0644 dist/deb/conffiles "$root/DEBIAN/conffiles"
install -m 0755 dist/deb/postinst dist/deb/prerm dist/deb/postrm "$root/DEBIAN/"

# The newest glibc symbol version the cgo binaries need.
glibc=$(objdump -T "$root/usr/bin/podbayd" "$root/usr/bin/podbay" | grep -oE 'GLIBC_[0-9.]+' | sed 's/GLIBC_//' | sort -uV | tail -1)
libc="libc6 (>= ${glibc:-2.17})"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@LIBC@/$libc/" -e "s/@SIZE@/$size/" \
	dist/deb/control.in >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | sort | xargs md5sum) >"$root/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/podbayd_${version}_${arch}.deb
fakeroot dpkg-deb --build -Zxz "$root" "$deb" >/dev/null

# Sanity: the control fields and every file where it belongs, owned by root.
info=$(dpkg-deb --info "$deb")
contents=$(dpkg-deb --contents "$deb")
for f in "Package: podbayd" "Version: $version" "Architecture: $arch" "Depends: $libc, runc, conmon, containernetworking-plugins, iptables"; do
	grep -qF " $f" <<<"$info" || die "$deb: control has no \"$f\""
done
for s in postinst prerm postrm conffiles; do
	grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? *$s" <<<"$info" || die "$deb: no $s"
done
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = /etc/podbay/podbay.toml ] || die "$deb: podbay.toml is not a conffile"
for f in ./usr/bin/podbayd ./usr/bin/podbay ./usr/bin/podbay-pause ./lib/systemd/system/podbayd.service ./etc/podbay/podbay.toml; do
	grep -qE "^[-rwx]{10} root/root .* $f\$" <<<"$contents" || die "$deb: $f missing or not root/root"
done
grep -qE '^-rwxr-xr-x root/root .* ./usr/bin/podbayd$' <<<"$contents" || die "$deb: podbayd is not 0755"
log "built $deb ($(du -h "$deb" | cut -f1)); dpkg-deb --info and --contents check out"
echo "$deb"
