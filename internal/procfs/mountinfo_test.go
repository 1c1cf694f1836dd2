package procfs

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	got, err := ParseMountinfo(bytes.NewReader(readFixture(t, "mountinfo")))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Root: "/", Point: "/", Options: "rw,relatime", FSType: "ext4", Source: "/dev/vda1", SuperOptions: "rw,errors=remount-ro"},
		{Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", Options: "rw,nosuid,nodev,noexec,relatime", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,cpu,cpuacct"},
		{Root: "/", Point: "/sys/fs/cgroup/unified", Options: "rw,nosuid,nodev,noexec,relatime", FSType: "cgroup2", Source: "cgroup2", SuperOptions: "rw"},
		{Root: "/", Point: "/var/lib/podbay/overlay/abc/merged", Options: "rw,relatime", FSType: "overlay", Source: "overlay", SuperOptions: "rw,lowerdir=/l,upperdir=/u,workdir=/w"},
		{Root: "net:[4026532300]", Point: "/run/netns/podbay-x y", Options: "rw", FSType: "nsfs", Source: "nsfs", SuperOptions: "rw"},
		{Root: `/sub\dir`, Point: "/mnt/with\ttab", Options: "rw", FSType: "tmpfs", Source: "tmpfs", SuperOptions: "rw"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ParseMountinfo =\n%+v\nwant\n%+v", got, want)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:  "/a b",
		`/a\134b`:  `/a\b`,
		`/plain`:   "/plain",
		`/bad\09x`: `/bad\09x`, // not octal: kept
		`/end\04`:  `/end\04`,  // cut short: kept
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMountinfoSelf(t *testing.T) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Point == "/" }) {
		t.Errorf("no root mount in %+v", mounts)
	}
}
