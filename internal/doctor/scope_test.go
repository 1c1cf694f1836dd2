package doctor

import (
	"slices"
	"strings"
	"testing"
)

// TestClassifyScopeKinds covers what only a scope with directories and a
// cgroup root wholly podbay's finds (the integration env's and hack/'s
// runs), and what the daemon running exempts.
func TestClassifyScopeKinds(t *testing.T) {
	const dir, cgRoot = "/tmp/pb1", "/pbt-1"
	masq := "-A PODBAY-MASQ-0123456789ab -m comment --comment \"podbay masquerade name: \\\"net\\\"\" -j MASQUERADE"
	base := func() *Inventory {
		return &Inventory{
			Self: 999, Owns: []string{dir}, CgroupRoot: cgRoot, DriverHome: dir + "/storage/overlay",
			Rootfses: []Rootfs{{ID: ownedPod, Layer: id('1'), MountPoint: dir + "/storage/overlay/" + id('1') + "/merged"}},
			Mounts: []Mount{
				{Point: dir + "/mnt", FSType: "tmpfs", Bare: true},
				{Point: dir + "/storage/overlay", FSType: "none", Bare: true},
			},
			Ifbs:  []Ifb{{Name: "bwpa", ID: ownedPod}, {Name: "bwpc", ID: orphanPod}},
			Rules: []Rule{{Tool: "iptables", Table: "nat", Line: masq, Masquerade: true}},
			Processes: []Process{
				{PID: 10, PPID: 1, Args: []string{"sleep", "600"}, Cwd: dir},                                  // cwd in the dir
				{PID: 11, PPID: 1, Args: []string{"sh"}, Cgroups: []string{cgRoot + "/x"}},                    // in the cgroup root
				{PID: 12, PPID: 1, Args: []string{"conmon", "--cid", ownedPod, "-b", dir + "/b"}},             // an owned pod's
				{PID: 13, PPID: 12, Args: []string{"/pause"}, Cgroups: []string{cgRoot + "/pod-" + ownedPod}}, // under it
				{PID: 14, PPID: 1, Args: []string{"sleep", "1"}, Cwd: "/elsewhere"},                           // not podbay's
			},
			Cgroups: []Cgroup{
				{Path: "/sys/fs/cgroup/pids" + cgRoot + "/podbay-" + orphanPod, ID: orphanPod},
				{Path: "/sys/fs/cgroup/pids" + cgRoot + "/podbay-" + ownedPod, ID: ownedPod, PIDs: []int{13}},
				{Path: "/sys/fs/cgroup/pids" + cgRoot + "/conmon", PIDs: []int{12, 11}},
				{Path: "/sys/fs/cgroup/pids" + cgRoot + "/empty"},
			},
		}
	}
	owned := map[string]bool{ownedPod: true}
	summary := func(leaks []Leak) []string {
		var out []string
		for _, l := range leaks {
			out = append(out, l.Kind+" "+l.Object)
		}
		return out
	}

	got := summary(Classify(base(), owned))
	want := []string{
		"mount " + dir + "/mnt",
		"ifb bwpc",
		"process 10",
		"process 11",
		"cgroup /sys/fs/cgroup/pids" + cgRoot + "/podbay-" + orphanPod,
		"cgroup /sys/fs/cgroup/pids" + cgRoot + "/conmon",
	}
	if !slices.Equal(got, want) {
		t.Errorf("with an owned pod, daemon stopped:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}

	// Nothing owned, daemon stopped: the driver's home mount (no owned
	// layer is mounted) and the masquerade are left over too.
	got = summary(Classify(base(), nil))
	for _, w := range []string{"mount " + dir + "/storage/overlay", "iptables iptables nat " + masq, "ifb bwpa", "process 12", "process 13"} {
		if !slices.Contains(got, w) {
			t.Errorf("nothing owned: %q not reported; got %q", w, got)
		}
	}

	// The daemon running: its ID-less mounts and its masquerade are its
	// own, and so is its process.
	inv := base()
	inv.Daemon = 10
	got = summary(Classify(inv, nil))
	for _, w := range []string{"mount " + dir + "/mnt", "mount " + dir + "/storage/overlay", "iptables iptables nat " + masq, "process 10"} {
		if slices.Contains(got, w) {
			t.Errorf("daemon running: %q reported", w)
		}
	}
}

func TestParseIptablesSaveScope(t *testing.T) {
	known := map[string]bool{orphanPod: true}
	data := "*nat\n" +
		"-A POSTROUTING -m comment --comment \"podbay masquerade name: \\\"net\\\"\" -j PODBAY-MASQ-x\n" +
		"-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat for " + orphanPod + "\" -j DNAT\n" +
		"-A OTHER -m comment --comment \"name: \\\"othernet\\\" id: \\\"" + foreignPod + "\\\"\" -j ACCEPT\n"
	rules := parseIptablesSave("iptables", []byte(data), "net", known)
	var got []string
	for _, r := range rules {
		got = append(got, r.ID+"|"+strings.Fields(r.Line)[1])
	}
	want := []string{"|POSTROUTING", orphanPod + "|CNI-HOSTPORT-DNAT"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
