package cgroups

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func TestParseMounts(t *testing.T) {
	// This host's layout: cgroup v1 controllers, a named systemd hierarchy
	// and a cgroup2 mount at unified; plus noise.
	mountinfo := `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:5 - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
43 31 0:39 / /mnt/with\040space rw - cgroup cgroup rw,cpuset,cpu
malformed line
`
	got, err := ParseMounts(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Dir: "/sys/fs/cgroup/cpu"},
		{Dir: "/sys/fs/cgroup/cpuset", Cpuset: true},
		{Dir: "/sys/fs/cgroup/memory"},
		{Dir: "/sys/fs/cgroup/systemd"},
		{Dir: "/sys/fs/cgroup/unified", V2: true},
		{Dir: "/mnt/with space", Cpuset: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ParseMounts =\n%+v\nwant\n%+v", got, want)
	}
}

func TestWritersRejectRoot(t *testing.T) {
	for _, p := range []string{"/", "", "/.."} {
		if err := MoveProcess(1, p); err == nil {
			t.Errorf("MoveProcess(%q) accepted the root cgroup", p)
		}
		if err := Remove(context.Background(), p); err == nil {
			t.Errorf("Remove(%q) accepted the root cgroup", p)
		}
	}
}
