package doctor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/config"
)

// CheckOptions are the inputs of the host checks.
type CheckOptions struct {
	Config *config.Config
	// DaemonPID is the running podbayd's, 0 when none answers on the
	// socket. Its capabilities are checked instead of this process's, and
	// ports it holds are fine.
	DaemonPID int
	// CNI is ResolveNetwork's verdict, printed among the others.
	CNI Result
}

// HostChecks runs every check but the config's (CheckConfig), in the order
// they are printed.
func HostChecks(p Probe, o CheckOptions) []Result {
	cfg := o.Config
	var out []Result
	out = append(out, CheckRuntimes(p, cfg)...)
	out = append(out, CheckConmon(p, cfg), o.CNI)
	out = append(out, CheckIptables(p))
	layout := CheckCgroupLayout(p, cfg)
	out = append(out, layout, CheckCgroupVersion(p), CheckControllers(p))
	out = append(out, CheckKernel(p, cfg)...)
	out = append(out, CheckPorts(p, cfg, o.DaemonPID)...)
	out = append(out, CheckCapabilities(p, cfg, o.DaemonPID))
	out = append(out, CheckNetnsDir(p, cfg))
	out = append(out, CheckDirs(p, cfg)...)
	out = append(out, CheckPartialPulls(cfg, time.Now()))
	return out
}

// CheckConfig is the verdict on loading the config as podbayd does.
func CheckConfig(path string, cfg *config.Config, err error) Result {
	if err != nil {
		return fail("config", "fix the file: podbayd refuses to start with it", "%s: %v", path, err)
	}
	return ok("config", "%s loads: handlers %s (default %s), root %s, state %s",
		path, strings.Join(cfg.RuntimeNames(), ", "), cfg.DefaultRuntime, cfg.Root, cfg.State)
}

// CheckRuntimes checks each runtime handler's binary: an OCI runtime must
// run (--version), a shim must be an executable file. The default
// handler's failure is FAIL (podbayd does not start without it), another's
// WARN (its pods fail).
func CheckRuntimes(p Probe, cfg *config.Config) []Result {
	var out []Result
	for _, name := range cfg.RuntimeNames() {
		rt := cfg.Runtimes[name]
		check := "runtime " + name
		bad := func(fix, reason string, args ...any) Result {
			if name == cfg.DefaultRuntime {
				return fail(check, fix+"; podbayd does not start without its default handler", reason, args...)
			}
			return warn(check, fix+"; pods asking for this handler fail until then", reason, args...)
		}
		path, err := p.LookPath(rt.Path)
		if err != nil {
			out = append(out, bad(fmt.Sprintf("install it or set [runtimes.%s] path", name), "%s binary %q not found: %v", rt.Type, rt.Path, err))
			continue
		}
		if rt.Type == config.TypeVM {
			if r, ok := checkExecutable(p, path); !ok {
				out = append(out, bad("make it an executable file", "shim %s: %s", path, r))
				continue
			}
			extra := ""
			if rt.RuntimePath != "" {
				rp, err := p.LookPath(rt.RuntimePath)
				if err != nil {
					out = append(out, bad(fmt.Sprintf("install it or fix [runtimes.%s] runtime_path", name), "shim %s present, its runtime %q not found: %v", path, rt.RuntimePath, err))
					continue
				}
				extra = ", runtime " + rp
			}
			if rt.ConfigPath != "" {
				if _, err := p.Stat(rt.ConfigPath); err != nil {
					out = append(out, bad(fmt.Sprintf("fix [runtimes.%s] config_path", name), "shim %s present, its config_path: %v", path, err))
					continue
				}
				extra = ", config " + rt.ConfigPath
			}
			out = append(out, ok(check, "vm: shim %s present%s", path, extra))
			continue
		}
		v, err := p.Output(path, "--version")
		if err != nil {
			out = append(out, bad("reinstall the runtime", "%s --version: %v", path, err))
			continue
		}
		out = append(out, ok(check, "oci: %s: %s", path, firstLine(v)))
	}
	return out
}

func checkExecutable(p Probe, path string) (string, bool) {
	fi, err := p.Stat(path)
	if err != nil {
		return err.Error(), false
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Sprintf("not an executable file (%s)", fi.Mode()), false
	}
	return "", true
}

// CheckConmon checks conmon, which podbayd needs to start at all.
func CheckConmon(p Probe, cfg *config.Config) Result {
	path, err := p.LookPath(cfg.Conmon)
	if err != nil {
		return fail("conmon", "install conmon (Debian: apt-get install conmon) or set conmon", "%q not found: %v", cfg.Conmon, err)
	}
	v, err := p.Output(path, "--version")
	if err != nil {
		return fail("conmon", "reinstall conmon", "%v", err)
	}
	return ok("conmon", "%s: %s", path, firstLine(v))
}

// CheckIptables checks iptables, which the bridge plugin's ipMasq and
// portmap run.
func CheckIptables(p Probe) Result {
	path, err := p.LookPath("iptables")
	if err != nil {
		return fail("iptables", "install iptables", "not found: the bridge plugin (ipMasq) and portmap need it: %v", err)
	}
	v, err := p.Output(path, "--version")
	if err != nil {
		return fail("iptables", "reinstall iptables", "%v", err)
	}
	return ok("iptables", "%s: %s", path, firstLine(v))
}

// Cgroup layouts.
const (
	CgroupV1     = "v1"
	CgroupHybrid = "v1 (hybrid)"
	CgroupV2     = "v2"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroupLayout tells v2 (cgroup2 at the root), hybrid (v1 controllers with
// a cgroup2 at unified/) and v1.
func cgroupLayout(p Probe) (string, error) {
	t, _, err := p.Statfs(cgroupRoot)
	if err != nil {
		return "", err
	}
	if t == unix.CGROUP2_SUPER_MAGIC {
		return CgroupV2, nil
	}
	if t, _, err := p.Statfs(cgroupRoot + "/unified"); err == nil && t == unix.CGROUP2_SUPER_MAGIC {
		return CgroupHybrid, nil
	}
	return CgroupV1, nil
}

// CheckCgroupLayout reports the layout and the configured driver against
// PID 1: podbay drives cgroupfs, which is what a host without systemd
// needs; under systemd the kubelet usually runs the systemd driver.
func CheckCgroupLayout(p Probe, cfg *config.Config) Result {
	layout, err := cgroupLayout(p)
	if err != nil {
		return fail("cgroups", "mount the cgroup file systems", "%s: %v", cgroupRoot, err)
	}
	desc := "cgroup " + layout
	if layout == CgroupHybrid {
		desc += ": v1 controllers, cgroup2 at " + cgroupRoot + "/unified"
	}
	comm, _ := p.ReadFile("/proc/1/comm")
	init := strings.TrimSpace(string(comm))
	if init == "" {
		init = "unknown"
	}
	driver := cfg.CgroupDriver
	if driver == "auto" {
		driver = "cgroupfs"
		if init == "systemd" {
			driver = "systemd"
		}
	}
	switch {
	case init == "systemd" && driver == "systemd":
		return ok("cgroups", "%s; PID 1 is systemd and podbay drives systemd: pods are slices, containers scopes", desc)
	case init == "systemd":
		return warn("cgroups", "set cgroup_driver = \"systemd\" (or auto), or give the kubelet cgroupDriver: cgroupfs and run podbayd with Delegate=yes",
			"%s; PID 1 is systemd but podbay drives cgroupfs (cgroup_driver = %q): systemd does not know podbay's cgroups", desc, cfg.CgroupDriver)
	case driver == "systemd":
		return fail("cgroups", "set cgroup_driver = \"cgroupfs\" (or auto); podbayd does not start with the systemd driver here",
			"%s; cgroup_driver = %q but PID 1 is %s, not systemd", desc, cfg.CgroupDriver, init)
	}
	return ok("cgroups", "%s; PID 1 is %s (no systemd): driver %s fits", desc, init, driver)
}

// CheckCgroupVersion warns on a cgroup v1 host (hybrid included):
// Kubernetes 1.35 deprecated cgroup v1, and from 1.35 on the kubelet does
// not start there unless its KubeletConfiguration sets failCgroupV1: false
// (k8s.io/kubelet config/v1beta1, default true). podbay itself runs on
// both.
func CheckCgroupVersion(p Probe) Result {
	layout, err := cgroupLayout(p)
	if err != nil {
		return fail("cgroup version", "mount the cgroup file systems", "%v", err)
	}
	if layout == CgroupV2 {
		return ok("cgroup version", "cgroup v2, which Kubernetes 1.35 and later kubelets require by default")
	}
	return warn("cgroup version",
		"boot the node with cgroup v2 (systemd.unified_cgroup_hierarchy=1, or cgroup_no_v1=all without systemd), or set failCgroupV1: false in the kubelet's KubeletConfiguration",
		"cgroup %s: Kubernetes 1.35 and later kubelets refuse to start on cgroup v1 unless their configuration sets failCgroupV1: false (cgroup v1 is deprecated)", layout)
}

// CheckControllers checks the memory, cpu and pids controllers.
func CheckControllers(p Probe) Result {
	layout, err := cgroupLayout(p)
	if err != nil {
		return fail("cgroup controllers", "mount the cgroup file systems", "%v", err)
	}
	have := map[string]bool{}
	if layout == CgroupV2 {
		data, err := p.ReadFile(cgroupRoot + "/cgroup.controllers")
		if err != nil {
			return fail("cgroup controllers", "check the cgroup2 mount", "%v", err)
		}
		for _, c := range strings.Fields(string(data)) {
			have[c] = true
		}
	} else {
		// /proc/cgroups: subsys_name hierarchy num_cgroups enabled; a v1
		// controller is usable when enabled and mounted.
		data, err := p.ReadFile("/proc/cgroups")
		if err != nil {
			return fail("cgroup controllers", "check /proc", "%v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 4 || strings.HasPrefix(f[0], "#") || f[3] != "1" {
				continue
			}
			if _, err := p.Stat(filepath.Join(cgroupRoot, f[0])); err == nil {
				have[f[0]] = true
			}
		}
	}
	var missing []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) == 0:
		return ok("cgroup controllers", "memory, cpu, pids present (%s)", layout)
	case len(missing) == 1 && missing[0] == "pids":
		return warn("cgroup controllers", "enable the pids controller", "pids missing: pod PID limits cannot be applied")
	default:
		return fail("cgroup controllers", "enable them (kernel command line cgroup_enable=…)", "missing: %s: resource limits cannot be applied", strings.Join(missing, ", "))
	}
}

// CheckKernel checks overlay, namespaces, pidfd_open and seccomp.
func CheckKernel(p Probe, cfg *config.Config) []Result {
	var out []Result
	if cfg.Image.Driver == "overlay" {
		fss, _ := p.ReadFile("/proc/filesystems")
		switch {
		case hasFilesystem(fss, "overlay"):
			out = append(out, ok("overlay", "in /proc/filesystems"))
		case overlayModule(p):
			out = append(out, warn("overlay", "modprobe overlay (the first mount loads it too)", "not loaded; the module is installed"))
		default:
			out = append(out, fail("overlay", "use a kernel with overlayfs, or set [image] driver = \"vfs\"", "not in /proc/filesystems and no module found"))
		}
	}
	var missing []string
	for _, ns := range []string{"net", "pid", "ipc", "uts", "mnt"} {
		if _, err := p.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, ns)
		}
	}
	_, userErr := p.Stat("/proc/self/ns/user")
	switch {
	case len(missing) > 0:
		out = append(out, fail("namespaces", "use a kernel with these namespaces", "missing: %s", strings.Join(missing, ", ")))
	case userErr != nil:
		out = append(out, warn("namespaces", "only user-namespaced pods need it", "net, pid, ipc, uts, mnt present; user namespaces missing"))
	default:
		out = append(out, ok("namespaces", "net, pid, ipc, uts, mnt, user present"))
	}
	if err := p.PidfdOpen(); err != nil {
		out = append(out, warn("pidfd_open", "a kernel ≥ 5.3 lets podbayd hold the processes it signals", "%v: podbayd falls back to polling processes by PID", err))
	} else {
		out = append(out, ok("pidfd_open", "supported"))
	}
	status, _ := p.ReadFile("/proc/self/status")
	_, filterErr := p.Stat("/proc/sys/kernel/seccomp/actions_avail")
	switch {
	case !bytes.Contains(status, []byte("\nSeccomp:")):
		out = append(out, warn("seccomp", "use a kernel with CONFIG_SECCOMP", "not supported: pods asking for a seccomp profile fail to start"))
	case filterErr != nil:
		out = append(out, warn("seccomp", "use a kernel with CONFIG_SECCOMP_FILTER", "no seccomp filters: pods asking for a seccomp profile fail to start"))
	default:
		out = append(out, ok("seccomp", "filters supported"))
	}
	return out
}

func hasFilesystem(procFilesystems []byte, name string) bool {
	sc := bufio.NewScanner(bytes.NewReader(procFilesystems))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}

// overlayModule reports whether the running kernel has an overlay module
// to load.
func overlayModule(p Probe) bool {
	rel, err := p.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false
	}
	dir := "/lib/modules/" + strings.TrimSpace(string(rel))
	for _, f := range []string{"modules.dep", "modules.builtin"} {
		data, err := p.ReadFile(filepath.Join(dir, f))
		if err == nil && bytes.Contains(data, []byte("/overlay.ko")) {
			return true
		}
	}
	return false
}

// CheckPorts checks the streaming server's port (when fixed) and the
// metrics address: each must be free, or held by podbayd itself.
func CheckPorts(p Probe, cfg *config.Config, daemonPID int) []Result {
	type port struct{ check, key, addr string }
	var ports []port
	if cfg.StreamPort != 0 {
		ports = append(ports, port{"stream port", "stream_port", cfg.StreamListenAddress()})
	}
	if cfg.MetricsAddress != "" {
		ports = append(ports, port{"metrics address", "metrics_address", cfg.MetricsAddress})
	}
	if len(ports) == 0 {
		return []Result{ok("ports", "stream_port 0 (a free port is picked at start), no metrics_address")}
	}
	listeners, err := p.TCPListeners()
	if err != nil {
		return []Result{warn("ports", "check /proc/net/tcp", "cannot list listening sockets: %v", err)}
	}
	var out []Result
	for _, pt := range ports {
		want, err := parseListenAddr(pt.addr)
		if err != nil {
			out = append(out, fail(pt.check, "fix "+pt.key, "%s: %v", pt.addr, err))
			continue
		}
		var holder *Listener
		for i, l := range listeners {
			if conflicts(want, l.Addr) {
				holder = &listeners[i]
				break
			}
		}
		switch {
		case holder == nil:
			out = append(out, ok(pt.check, "%s is free", pt.addr))
		case (daemonPID != 0 && holder.PID == daemonPID) || holder.Comm == "podbayd":
			out = append(out, ok(pt.check, "%s is held by podbayd itself (pid %d)", pt.addr, holder.PID))
		case holder.PID == 0:
			out = append(out, fail(pt.check, "free it or change "+pt.key, "%s is in use (holder not found)", pt.addr))
		default:
			out = append(out, fail(pt.check, "free it or change "+pt.key, "%s is held by %s (pid %d)", pt.addr, holder.Comm, holder.PID))
		}
	}
	return out
}

// parseListenAddr parses host:port; an empty host is every address.
func parseListenAddr(s string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", portStr, err)
	}
	addr := netip.IPv6Unspecified()
	if host != "" {
		if host == "localhost" {
			host = "127.0.0.1"
		}
		if addr, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, err
		}
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// conflicts reports whether a listener on have keeps a bind to want from
// succeeding: same port, and the same address or a wildcard on either side.
func conflicts(want, have netip.AddrPort) bool {
	if want.Port() != have.Port() {
		return false
	}
	w, h := want.Addr(), have.Addr()
	return w == h || w.IsUnspecified() || h.IsUnspecified()
}

// Capabilities podbayd needs.
const (
	capNetAdmin    = 12
	capSysAdmin    = 21
	capSysResource = 24
)

// CheckCapabilities checks the effective capabilities of the running
// podbayd, or else of this process (podbayd started the same way gets the
// same).
func CheckCapabilities(p Probe, cfg *config.Config, daemonPID int) Result {
	who, status := "this process (podbayd started the same way gets the same)", "/proc/self/status"
	if daemonPID != 0 {
		who, status = fmt.Sprintf("podbayd (pid %d)", daemonPID), fmt.Sprintf("/proc/%d/status", daemonPID)
	}
	data, err := p.ReadFile(status)
	if err != nil {
		return warn("capabilities", "check "+status, "%s: %v", who, err)
	}
	eff, err := capEff(data)
	if err != nil {
		return warn("capabilities", "check "+status, "%s: %v", who, err)
	}
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	var missing []string
	if !has(capSysAdmin) {
		missing = append(missing, "CAP_SYS_ADMIN (mounts, namespaces)")
	}
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN (pod networks)")
	}
	if len(missing) > 0 {
		return fail("capabilities", "run podbayd as root with full capabilities", "%s lacks %s", who, strings.Join(missing, ", "))
	}
	if !has(capSysResource) {
		if cfg.RestrictOOMScoreAdj == "false" {
			return fail("capabilities", `set restrict_oom_score_adj = "auto"`,
				"%s lacks CAP_SYS_RESOURCE and restrict_oom_score_adj = false: runc cannot lower oom_score_adj, so no pod with the kubelet's -998 starts", who)
		}
		return warn("capabilities", "grant CAP_SYS_RESOURCE for pods' negative oom_score_adj to apply",
			"%s has CAP_SYS_ADMIN and CAP_NET_ADMIN, lacks CAP_SYS_RESOURCE: pods' oom_score_adj is clamped to no lower than 0, or podbayd's own if higher (restrict_oom_score_adj = %s)", who, cfg.RestrictOOMScoreAdj)
	}
	return ok("capabilities", "%s has CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SYS_RESOURCE", who)
}

// capEff reads the CapEff line of a /proc/<pid>/status.
func capEff(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), "CapEff:"); found {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line")
}

// CheckNetnsDir checks that podbayd can pin namespaces in netns_dir (or
// create it).
func CheckNetnsDir(p Probe, cfg *config.Config) Result {
	dir, created, err := writableDir(p, cfg.NetNSDir)
	if err != nil {
		return fail("netns dir", "make it writable by podbayd", "%s: %v", cfg.NetNSDir, err)
	}
	if created {
		return ok("netns dir", "%s does not exist; podbayd can create it (in %s)", cfg.NetNSDir, dir)
	}
	return ok("netns dir", "%s is writable", cfg.NetNSDir)
}

// writableDir returns path, or its nearest existing ancestor when path
// does not exist (created true), once it is writable.
func writableDir(p Probe, path string) (dir string, created bool, err error) {
	dir = path
	for {
		fi, err := p.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return dir, created, fmt.Errorf("%s is not a directory", dir)
			}
			return dir, created, p.Writable(dir)
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == "/" {
			return dir, created, err
		}
		dir, created = filepath.Dir(dir), true
	}
}

// Free space thresholds of root and state.
const (
	freeWarn = 1 << 30   // 1 GiB
	freeFail = 100 << 20 // 100 MiB
)

// CheckDirs checks that root, state and the image store are writable and
// have room.
func CheckDirs(p Probe, cfg *config.Config) []Result {
	var out []Result
	seen := map[string]bool{}
	for _, d := range []struct{ key, path string }{
		{"root", cfg.Root}, {"state", cfg.State}, {"image storage_root", cfg.Image.StorageRoot},
	} {
		if seen[d.path] || (d.key == "image storage_root" && within(cfg.Root, d.path)) {
			continue
		}
		seen[d.path] = true
		check := d.key + " dir"
		dir, created, err := writableDir(p, d.path)
		if err != nil {
			out = append(out, fail(check, "make it writable by podbayd", "%s: %v", d.path, err))
			continue
		}
		fsType, free, err := p.Statfs(dir)
		if err != nil {
			out = append(out, warn(check, "check the file system", "%s: %v", dir, err))
			continue
		}
		where := d.path
		if created {
			where += " (to be created in " + dir + ")"
		}
		desc := fmt.Sprintf("%s: %s free on %s", where, humanBytes(free), fsName(fsType))
		switch {
		case free < freeFail:
			out = append(out, fail(check, "free space: pulls and pod files fail when it runs out", "%s", desc))
		case free < freeWarn:
			out = append(out, warn(check, "free space before it runs out", "%s", desc))
		default:
			out = append(out, ok(check, "%s", desc))
		}
	}
	return out
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

func fsName(magic int64) string {
	switch magic {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	default:
		return fmt.Sprintf("fs 0x%x", magic)
	}
}

// within reports whether path is dir or lies inside it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
