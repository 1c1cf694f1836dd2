package doctor

import (
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/config"
)

func wantVerdict(t *testing.T, r Result, v Verdict, reason string) {
	t.Helper()
	if r.Verdict != v || !strings.Contains(r.Reason, reason) {
		t.Errorf("%s: got %s %q, want %s with %q", r.Check, r.Verdict, r.Reason, v, reason)
	}
	if v != OK && r.Fix == "" {
		t.Errorf("%s: %s without a fix hint", r.Check, r.Verdict)
	}
}

func byCheck(rs []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range rs {
		m[r.Check] = r
	}
	return m
}

func TestCheckRuntimes(t *testing.T) {
	cfg := validConfig() // runc (default) and crun
	cfg.Runtimes["kata"] = config.Runtime{Type: config.TypeVM, Path: "containerd-shim-kata-v2", Root: "/run/podbay/runtimes/kata"}

	p := newFakeProbe()
	p.exe("runc", "/usr/sbin/runc", "runc version 1.1.5\ncommit: x\n")
	p.exe("crun", "/usr/bin/crun", "")
	p.exe("containerd-shim-kata-v2", "/opt/kata/bin/containerd-shim-kata-v2", "")
	got := byCheck(CheckRuntimes(p, cfg))
	wantVerdict(t, got["runtime runc"], OK, "runc version 1.1.5")
	// crun is there but does not run: not the default handler, a warning.
	wantVerdict(t, got["runtime crun"], Warn, "--version")
	wantVerdict(t, got["runtime kata"], OK, "shim /opt/kata/bin/containerd-shim-kata-v2 present")

	// The default handler's binary missing fails; a shim that is not
	// executable warns.
	p = newFakeProbe()
	p.exe("crun", "/usr/bin/crun", "crun version 1.8.1")
	p.exe("containerd-shim-kata-v2", "/opt/kata/bin/containerd-shim-kata-v2", "")
	p.modes["/opt/kata/bin/containerd-shim-kata-v2"] = 0o644
	got = byCheck(CheckRuntimes(p, cfg))
	wantVerdict(t, got["runtime runc"], Fail, `binary "runc" not found`)
	wantVerdict(t, got["runtime crun"], OK, "crun version 1.8.1")
	wantVerdict(t, got["runtime kata"], Warn, "not an executable file")

	// A vm handler's runtime_path must be found too.
	cfg.Runtimes["kata"] = config.Runtime{Type: config.TypeVM, Path: "containerd-shim-kata-v2", RuntimePath: "/nowhere/runc"}
	p.modes["/opt/kata/bin/containerd-shim-kata-v2"] = 0o755
	wantVerdict(t, byCheck(CheckRuntimes(p, cfg))["runtime kata"], Warn, `its runtime "/nowhere/runc" not found`)
}

func TestCheckConmon(t *testing.T) {
	cfg := validConfig()
	p := newFakeProbe()
	wantVerdict(t, CheckConmon(p, cfg), Fail, `"conmon" not found`)
	p.exe("conmon", "/usr/bin/conmon", "conmon version 2.1.6\ncommit: abc\n")
	wantVerdict(t, CheckConmon(p, cfg), OK, "/usr/bin/conmon: conmon version 2.1.6")
	delete(p.outputs, "/usr/bin/conmon")
	wantVerdict(t, CheckConmon(p, cfg), Fail, "exit status 1")
}

func TestCheckIptables(t *testing.T) {
	p := newFakeProbe()
	wantVerdict(t, CheckIptables(p), Fail, "not found")
	p.exe("iptables", "/usr/sbin/iptables", "iptables v1.8.9 (nf_tables)\n")
	wantVerdict(t, CheckIptables(p), OK, "iptables v1.8.9 (nf_tables)")
}

// cgroupHost fakes /sys/fs/cgroup of a layout.
func cgroupHost(layout, init string) *fakeProbe {
	p := newFakeProbe()
	p.files["/proc/1/comm"] = init + "\n"
	switch layout {
	case CgroupV2:
		p.statfs[cgroupRoot] = fakeFS{typ: unix.CGROUP2_SUPER_MAGIC}
		p.files[cgroupRoot+"/cgroup.controllers"] = "cpuset cpu io memory hugetlb pids rdma misc\n"
	default:
		p.statfs[cgroupRoot] = fakeFS{typ: unix.TMPFS_MAGIC}
		if layout == CgroupHybrid {
			p.statfs[cgroupRoot+"/unified"] = fakeFS{typ: unix.CGROUP2_SUPER_MAGIC}
		}
		p.files["/proc/cgroups"] = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n" +
			"cpuset\t2\t1\t1\ncpu\t3\t40\t1\ncpuacct\t3\t40\t1\nmemory\t4\t60\t1\npids\t5\t60\t1\nhugetlb\t0\t1\t1\n"
		for _, c := range []string{"cpuset", "cpu", "cpuacct", "memory", "pids"} {
			p.dir(cgroupRoot + "/" + c)
		}
	}
	return p
}

func TestCheckCgroupLayout(t *testing.T) {
	cfg := validConfig()
	// This VM: v1 with a cgroup2 at unified/, no systemd.
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupHybrid, "process_api"), cfg), OK, "cgroup v1 (hybrid)")
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupHybrid, "process_api"), cfg), OK, "PID 1 is process_api (no systemd)")
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupV1, "init"), cfg), OK, "cgroup v1;")
	// systemd manages the cgroups, podbay drives cgroupfs.
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupV2, "systemd"), cfg), Warn, "PID 1 is systemd")
	// The systemd driver where PID 1 is systemd, and where it is not.
	sd := validConfig()
	sd.CgroupDriver = "systemd"
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupV2, "systemd"), sd), OK, "podbay drives systemd")
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupHybrid, "process_api"), sd), Fail, "not systemd")
	auto := validConfig()
	auto.CgroupDriver = "auto"
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupV2, "systemd"), auto), OK, "podbay drives systemd")
	wantVerdict(t, CheckCgroupLayout(cgroupHost(CgroupHybrid, "init"), auto), OK, "driver cgroupfs fits")
	if r := CheckCgroupLayout(newFakeProbe(), cfg); r.Verdict != Fail {
		t.Errorf("no cgroup mount: %+v", r)
	}
}

func TestCheckCgroupVersion(t *testing.T) {
	for _, layout := range []string{CgroupHybrid, CgroupV1} {
		r := CheckCgroupVersion(cgroupHost(layout, "init"))
		wantVerdict(t, r, Warn, "failCgroupV1: false")
		if !strings.Contains(r.Fix, "failCgroupV1: false") || !strings.Contains(r.Fix, "cgroup v2") {
			t.Errorf("%s: fix %q names neither the kubelet setting nor cgroup v2", layout, r.Fix)
		}
	}
	wantVerdict(t, CheckCgroupVersion(cgroupHost(CgroupV2, "systemd")), OK, "cgroup v2")
	if r := CheckCgroupVersion(newFakeProbe()); r.Verdict != Fail {
		t.Errorf("no cgroup mount: %+v", r)
	}
}

func TestCheckControllers(t *testing.T) {
	wantVerdict(t, CheckControllers(cgroupHost(CgroupHybrid, "x")), OK, "memory, cpu, pids present (v1 (hybrid))")
	wantVerdict(t, CheckControllers(cgroupHost(CgroupV2, "x")), OK, "(v2)")

	p := cgroupHost(CgroupV1, "x")
	p.files["/proc/cgroups"] = strings.Replace(p.files["/proc/cgroups"], "pids\t5\t60\t1", "pids\t5\t60\t0", 1)
	wantVerdict(t, CheckControllers(p), Warn, "pids missing")

	p = cgroupHost(CgroupV1, "x")
	delete(p.modes, cgroupRoot+"/memory") // enabled but not mounted
	wantVerdict(t, CheckControllers(p), Fail, "missing: memory")

	p = cgroupHost(CgroupV2, "x")
	p.files[cgroupRoot+"/cgroup.controllers"] = "cpuset io\n"
	wantVerdict(t, CheckControllers(p), Fail, "missing: memory, cpu, pids")
}

func kernelHost() *fakeProbe {
	p := newFakeProbe()
	p.files["/proc/filesystems"] = "nodev\tsysfs\nnodev\ttmpfs\n\text4\nnodev\toverlay\n"
	for _, ns := range []string{"net", "pid", "ipc", "uts", "mnt", "user"} {
		p.files["/proc/self/ns/"+ns] = ""
	}
	p.files["/proc/self/status"] = "Name:\tpodbay\nSeccomp:\t0\nSeccomp_filters:\t0\n"
	p.files["/proc/sys/kernel/seccomp/actions_avail"] = "kill_process kill_thread trap errno user_notif trace log allow\n"
	return p
}

func TestCheckKernel(t *testing.T) {
	cfg := validConfig()
	got := byCheck(CheckKernel(kernelHost(), cfg))
	for _, c := range []string{"overlay", "namespaces", "pidfd_open", "seccomp"} {
		if got[c].Verdict != OK {
			t.Errorf("%s: %+v", c, got[c])
		}
	}

	p := kernelHost()
	p.files["/proc/filesystems"] = "nodev\tsysfs\n\text4\n"
	p.files["/proc/sys/kernel/osrelease"] = "6.18.0\n"
	p.files["/lib/modules/6.18.0/modules.dep"] = "kernel/fs/overlayfs/overlay.ko:\n"
	delete(p.files, "/proc/self/ns/user")
	p.pidfdErr = syscall.ENOSYS
	delete(p.files, "/proc/sys/kernel/seccomp/actions_avail")
	got = byCheck(CheckKernel(p, cfg))
	wantVerdict(t, got["overlay"], Warn, "not loaded; the module is installed")
	wantVerdict(t, got["namespaces"], Warn, "user namespaces missing")
	wantVerdict(t, got["pidfd_open"], Warn, "function not implemented")
	wantVerdict(t, got["seccomp"], Warn, "no seccomp filters")

	delete(p.files, "/lib/modules/6.18.0/modules.dep")
	delete(p.files, "/proc/self/ns/pid")
	p.files["/proc/self/status"] = "Name:\tpodbay\n"
	got = byCheck(CheckKernel(p, cfg))
	wantVerdict(t, got["overlay"], Fail, "no module found")
	wantVerdict(t, got["namespaces"], Fail, "missing: pid")
	wantVerdict(t, got["seccomp"], Warn, "not supported")

	// The vfs driver does not need overlay.
	cfg.Image.Driver = "vfs"
	if _, found := byCheck(CheckKernel(p, cfg))["overlay"]; found {
		t.Error("overlay checked for the vfs driver")
	}
}

func TestCheckPorts(t *testing.T) {
	cfg := validConfig()
	if got := CheckPorts(newFakeProbe(), cfg, 0); len(got) != 1 || got[0].Verdict != OK {
		t.Fatalf("nothing fixed: %+v", got)
	}
	cfg.StreamPort = 10010
	cfg.MetricsAddress = ":9537"
	p := newFakeProbe()
	p.listen = []Listener{{Addr: netip.MustParseAddrPort("127.0.0.1:22"), PID: 10, Comm: "sshd"}}
	got := byCheck(CheckPorts(p, cfg, 0))
	wantVerdict(t, got["stream port"], OK, "127.0.0.1:10010 is free")
	wantVerdict(t, got["metrics address"], OK, ":9537 is free")

	// podbayd itself holds them: by its PID from the socket, or its name.
	p.listen = []Listener{
		{Addr: netip.MustParseAddrPort("127.0.0.1:10010"), PID: 42, Comm: "podbayd-race"},
		{Addr: netip.MustParseAddrPort("[::]:9537"), PID: 43, Comm: "podbayd"},
	}
	got = byCheck(CheckPorts(p, cfg, 42))
	wantVerdict(t, got["stream port"], OK, "held by podbayd itself (pid 42)")
	wantVerdict(t, got["metrics address"], OK, "held by podbayd itself (pid 43)")

	// Someone else: a wildcard listener conflicts with a specific address.
	p.listen = []Listener{
		{Addr: netip.MustParseAddrPort("0.0.0.0:10010"), PID: 7, Comm: "nginx"},
		{Addr: netip.MustParseAddrPort("10.0.0.1:9537"), PID: 8, Comm: "node_exporter"},
	}
	got = byCheck(CheckPorts(p, cfg, 42))
	wantVerdict(t, got["stream port"], Fail, "held by nginx (pid 7)")
	wantVerdict(t, got["metrics address"], Fail, "held by node_exporter (pid 8)")
}

func TestParseProcNetTCP(t *testing.T) {
	data := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2539 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0016 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
`
	got := parseProcNetTCP([]byte(data))
	if len(got) != 1 || got[0].addr != netip.MustParseAddrPort("127.0.0.1:9529") || got[0].inode != "12345" {
		t.Fatalf("tcp: %+v", got)
	}
	data6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:2541 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 778 1 0000000000000000 100 0 0 10 0
`
	got = parseProcNetTCP([]byte(data6))
	if len(got) != 2 || got[0].addr != netip.MustParseAddrPort("[::]:9537") || got[1].addr != netip.MustParseAddrPort("[::1]:8080") {
		t.Fatalf("tcp6: %+v", got)
	}
}

func statusWithCaps(capEff string) string {
	return "Name:\tpodbayd\nCapInh:\t0000000000000000\nCapEff:\t" + capEff + "\nSeccomp:\t0\n"
}

func TestCheckCapabilities(t *testing.T) {
	cfg := validConfig()
	p := newFakeProbe()
	p.files["/proc/self/status"] = statusWithCaps("000001ffffffffff")
	wantVerdict(t, CheckCapabilities(p, cfg, 0), OK, "has CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SYS_RESOURCE")

	// This VM: everything but CAP_SYS_RESOURCE (bit 24).
	p.files["/proc/self/status"] = statusWithCaps("000001fffeffffff")
	wantVerdict(t, CheckCapabilities(p, cfg, 0), Warn, "lacks CAP_SYS_RESOURCE: pods' oom_score_adj is clamped")
	cfg.RestrictOOMScoreAdj = "false"
	wantVerdict(t, CheckCapabilities(p, cfg, 0), Fail, "restrict_oom_score_adj = false")

	// The running daemon's own are read when there is one.
	p.files["/proc/77/status"] = statusWithCaps("0000000000000000")
	wantVerdict(t, CheckCapabilities(p, cfg, 77), Fail, "podbayd (pid 77) lacks CAP_SYS_ADMIN (mounts, namespaces), CAP_NET_ADMIN")
}

func TestCheckDirs(t *testing.T) {
	cfg := validConfig()
	p := newFakeProbe()
	p.dir("/var/lib")
	p.dir("/run/podbay")
	p.statfs["/var/lib"] = fakeFS{typ: unix.EXT4_SUPER_MAGIC, free: 20 << 30}
	p.statfs["/run/podbay"] = fakeFS{typ: unix.TMPFS_MAGIC, free: 50 << 20}
	got := byCheck(CheckDirs(p, cfg))
	wantVerdict(t, got["root dir"], OK, "/var/lib/podbay (to be created in /var/lib): 20.0 GiB free on ext4")
	wantVerdict(t, got["state dir"], Fail, "50.0 MiB free on tmpfs")
	if _, found := got["image storage_root dir"]; found {
		t.Error("storage_root inside root checked apart")
	}

	p.statfs["/run/podbay"] = fakeFS{typ: unix.TMPFS_MAGIC, free: 500 << 20}
	p.readOnly["/var/lib"] = true
	got = byCheck(CheckDirs(p, cfg))
	wantVerdict(t, got["root dir"], Fail, "permission denied")
	wantVerdict(t, got["state dir"], Warn, "500.0 MiB free")

	p.readOnly = map[string]bool{"/var/run/netns": true}
	p.dir("/var/run/netns")
	wantVerdict(t, CheckNetnsDir(p, cfg), Fail, "permission denied")
	delete(p.modes, "/var/run/netns")
	p.dir("/var/run")
	wantVerdict(t, CheckNetnsDir(p, cfg), OK, "podbayd can create it")
}

func TestCheckConfig(t *testing.T) {
	wantVerdict(t, CheckConfig("/etc/podbay/podbay.toml", validConfig(), nil), OK, "handlers crun, runc (default runc)")
	wantVerdict(t, CheckConfig("/x.toml", nil, errString("config /x.toml: unknown keys: bogus")), Fail, "unknown keys: bogus")
}

type errString string

func (e errString) Error() string { return string(e) }
