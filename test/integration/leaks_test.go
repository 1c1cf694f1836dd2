package integration

import (
	"bufio"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/doctor"
)

// A leak is a host resource that this env made and nobody owns any more.
type leak struct {
	kind string // netns, mount, veth, ifb, ipam, process, iptables, cgroup, cni-cache, storage, runtime
	what string // human-readable
	path string // netns/mount/cgroup path, veth or ifb name
	pid  int
	// iptables
	table, rule string
}

func (l leak) String() string { return l.kind + ": " + l.what }

var hexID = regexp.MustCompile(`[0-9a-f]{64}`)

// settleTime is how long a resource may outlive the operation that
// released it: the kernel destroys an unreferenced network namespace (and
// the veth in it) asynchronously, and conmon exits shortly after its
// container. Anything still there after it is a leak.
const settleTime = 3 * time.Second

// assertNoLeaks fails the test if the env left anything on the host. It is
// meant for moments when the env has no pods: with the daemon running (only
// its own process is exempt) or stopped.
func (e *env) assertNoLeaks(t *testing.T) {
	t.Helper()
	e.eventuallyNoLeaks(t, settleTime)
}

// assertNoLeaksExcept is assertNoLeaks for an env whose pods keep are alive:
// their resources are expected.
func (e *env) assertNoLeaksExcept(t *testing.T, keep ...string) {
	t.Helper()
	e.eventuallyNoLeaks(t, settleTime, keep...)
}

// eventuallyNoLeaks polls until nothing leaks (except keep), for cleanup
// the daemon does in the background, e.g. garbage collection after restart.
func (e *env) eventuallyNoLeaks(t *testing.T, timeout time.Duration, keep ...string) {
	t.Helper()
	requireSettled(t, timeout, func() []leak { return e.findLeaks(keepSet(keep)) })
}

// requireSettled polls check until it reports nothing, and fails the test
// with what is left at the deadline.
func requireSettled(t *testing.T, timeout time.Duration, check func() []leak) {
	t.Helper()
	for _, l := range settle(timeout, check) {
		t.Errorf("leak (still there after %v): %s", timeout, l)
	}
}

// settle polls check until it reports nothing or timeout passes, and
// returns what it reported last.
func settle(timeout time.Duration, check func() []leak) []leak {
	deadline := time.Now().Add(timeout)
	for {
		leaks := check()
		if len(leaks) == 0 || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func keepSet(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// findLeaks lists what the env made and nobody owns: resources of sandboxes
// not in keep. It is podbay doctor's inventory (internal/doctor) scoped to
// the env: its config's directories, its network and bridge, its cgroup
// root, and its whole dir as podbay's (a mount, or a process working or
// named there, is the env's whether or not it names an ID). Host state from
// before the env, and other envs' resources, are not reported.
func (e *env) findLeaks(keep map[string]bool) []leak {
	keep = e.withContainersOf(keep)
	known := e.knownIDs()
	for id := range keep {
		known[id] = true
	}
	cfg, err := config.Load(e.configPath, false)
	if err != nil {
		return []leak{{kind: "scan", what: "load the env's config: " + err.Error()}}
	}
	scope := doctor.Scope{
		Config:     cfg,
		Network:    &doctor.Network{Name: e.netName, Bridge: e.bridge, IPAMDir: filepath.Join(e.ipamDir, e.netName)},
		Owns:       []string{e.dir},
		CgroupRoot: e.cgroupRootDir(),
		KnownIDs:   known,
		DaemonPID:  e.daemonPid(),
	}
	inv, errs := doctor.ScanScope(context.Background(), scope)
	var leaks []leak
	for _, err := range errs {
		leaks = append(leaks, leak{kind: "scan", what: err.Error()})
	}
	for _, l := range doctor.Classify(inv, keep) {
		if (l.Kind == doctor.KindNetns && e.netnsBefore[filepath.Base(l.Object)]) || (l.Kind == doctor.KindMount && e.mountsBefore[l.Object]) {
			continue
		}
		leaks = append(leaks, leakOf(l))
	}
	return leaks
}

// findLeaksOf is findLeaks restricted to kinds.
func (e *env) findLeaksOf(keep map[string]bool, kinds ...string) []leak {
	var out []leak
	for _, l := range e.findLeaks(keep) {
		if slices.Contains(kinds, l.kind) || l.kind == "scan" {
			out = append(out, l)
		}
	}
	return out
}

// leakOf is a doctor leak in the harness's terms (its kinds' names, and
// what forceClean acts on).
func leakOf(l doctor.Leak) leak {
	kind := map[string]string{doctor.KindRootfs: "storage", doctor.KindIPAM: "ipam", doctor.KindDir: "runtime"}[l.Kind]
	if kind == "" {
		kind = l.Kind
	}
	out := leak{kind: kind, what: l.What, path: l.Object}
	if l.ID != "" && !strings.Contains(l.What, l.ID) {
		out.what += " [" + l.ID + "]"
	}
	switch l.Kind {
	case doctor.KindProcess:
		out.pid, _ = strconv.Atoi(l.Object)
	case doctor.KindIptables:
		// "<tool> <table> <rule or chain>"
		if f := strings.SplitN(l.Object, " ", 3); len(f) == 3 {
			out.path, out.table, out.rule = f[0], f[1], f[2]
		}
	}
	return out
}

// storageContainer is an entry of containers/storage's containers.json
// or volatile-containers.json (podbay's root filesystems are volatile
// unless sync_rootfs_records).
type storageContainer struct {
	ID    string   `json:"id"`
	Names []string `json:"names"`
	Image string   `json:"image"`
	Layer string   `json:"layer"`
}

// storageContainers lists the containers/storage containers of the env's
// image store: one per sandbox root filesystem.
func (e *env) storageContainers() ([]storageContainer, error) {
	var all []storageContainer
	for _, name := range []string{"containers.json", "volatile-containers.json"} {
		path := filepath.Join(e.storageRoot, "overlay-containers", name)
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) || (err == nil && len(data) == 0) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var cs []storageContainer
		if err := json.Unmarshal(data, &cs); err != nil {
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		all = append(all, cs...)
	}
	return all, nil
}

// ipamOwners returns the container IDs that hold an IP in the env's
// host-local store.
func (e *env) ipamOwners() map[string]bool {
	owners := map[string]bool{}
	dir := filepath.Join(e.ipamDir, e.netName)
	entries, _ := os.ReadDir(dir)
	for _, ent := range entries {
		if ent.Name() == "lock" || strings.HasPrefix(ent.Name(), "last_reserved_ip") {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(dir, ent.Name()))
		if fs := strings.Fields(string(data)); len(fs) > 0 {
			owners[fs[0]] = true
		}
	}
	return owners
}

// proc is what the leak checker reads about a process.
type proc struct {
	pid, ppid int
	state     string
	cmdline   string
	cwd, exe  string
	cgroups   string
}

func readProcs() map[int]*proc {
	procs := map[int]*proc{}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		base := filepath.Join("/proc", ent.Name())
		stat, err := os.ReadFile(filepath.Join(base, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		rest := string(stat)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		fs := strings.Fields(rest)
		if len(fs) < 2 {
			continue
		}
		p := &proc{pid: pid, state: fs[0]}
		p.ppid, _ = strconv.Atoi(fs[1])
		cmd, _ := os.ReadFile(filepath.Join(base, "cmdline"))
		p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		p.cwd, _ = os.Readlink(filepath.Join(base, "cwd"))
		p.exe, _ = os.Readlink(filepath.Join(base, "exe"))
		cg, _ := os.ReadFile(filepath.Join(base, "cgroup"))
		p.cgroups = string(cg)
		procs[pid] = p
	}
	return procs
}

// cgroupDirs returns the env's cgroup root in every mounted hierarchy:
// the unified one at /sys/fs/cgroup on a pure cgroup v2 host, the v1
// ones under /sys/fs/cgroup/<controller> (and the hybrid cgroup2 mount at
// unified/) elsewhere.
func (e *env) cgroupDirs() []string {
	var dirs []string
	if p := filepath.Join("/sys/fs/cgroup", e.cgroupRootDir()); pureCgroupV2() {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
		return dirs
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, ent := range entries {
		p := filepath.Join("/sys/fs/cgroup", ent.Name(), e.cgroupRootDir())
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// forceClean removes leaks, and everything else the env made on the host,
// so that one failed test does not fail the next.
func (e *env) forceClean(leaks []leak) {
	for _, l := range leaks {
		if l.kind == "process" {
			syscall.Kill(l.pid, syscall.SIGKILL) //nolint:errcheck
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, l := range leaks {
		if l.kind == "process" {
			for pidAlive(l.pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	chains := map[string]map[string]bool{} // tool/table → chains
	for _, l := range leaks {
		switch l.kind {
		case "mount":
			syscall.Unmount(l.path, syscall.MNT_DETACH) //nolint:errcheck
		case "netns":
			syscall.Unmount(l.path, syscall.MNT_DETACH) //nolint:errcheck
			os.Remove(l.path)
		case "veth", "ifb":
			exec.Command("ip", "link", "del", l.path).Run() //nolint:errcheck
		case "runtime":
			if strings.HasPrefix(l.path, "/run/containerd/s/") {
				os.Remove(l.path) // a dead shim's socket; the rest is in the env dir
			}
		case "iptables":
			rule := strings.TrimPrefix(l.rule, "-A ")
			exec.Command("sh", "-c", fmt.Sprintf("%s -w -t %s -D %s", l.path, l.table, rule)).Run() //nolint:errcheck
			if m := perPodChain.FindAllString(l.rule, -1); len(m) > 0 {
				key := l.path + " " + l.table
				if chains[key] == nil {
					chains[key] = map[string]bool{}
				}
				for _, c := range m {
					chains[key][strings.TrimSpace(c)] = true
				}
			}
		}
	}
	for key, cs := range chains {
		tool, table, _ := strings.Cut(key, " ")
		for c := range cs {
			exec.Command(tool, "-w", "-t", table, "-F", c).Run() //nolint:errcheck
			exec.Command(tool, "-w", "-t", table, "-X", c).Run() //nolint:errcheck
		}
	}
	// Every cgroup under the env's root, deepest first.
	for _, root := range e.cgroupDirs() {
		var dirs []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error { //nolint:errcheck
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}
	for _, m := range mountsUnder(e.t, e.dir) {
		syscall.Unmount(m, syscall.MNT_DETACH) //nolint:errcheck
	}
	exec.Command("ip", "link", "del", e.bridge).Run() //nolint:errcheck // absent unless CNI ran
}

// perPodChain matches the chains the bridge and portmap plugins make per
// attachment (not the shared CNI-HOSTPORT-* ones), and podbay's
// masquerade chain of a network, which forceClean removes alike.
var perPodChain = regexp.MustCompile(`\b(CNI-(DN-)?[0-9a-f]{12,}|PODBAY-MASQ-[0-9a-f]{12})\b`)

// netnsEntries lists the env's netns dir.
func (e *env) netnsEntries(t *testing.T) map[string]bool {
	names := map[string]bool{}
	entries, err := os.ReadDir(e.netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read %s: %v", e.netnsDir, err)
	}
	for _, ent := range entries {
		names[ent.Name()] = true
	}
	return names
}

// mountPoints lists the mount points of the test's mount namespace. It
// may run on a subtest's goroutine with the parent's t, so it does not stop
// the test.
func mountPoints(t *testing.T) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("mountinfo: %v", err)
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 {
			out = append(out, unescapeMount(fs[4]))
		}
	}
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMounted reports whether path is a mount point.
func isMounted(t *testing.T, path string) bool {
	real := path
	if p, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		real = filepath.Join(p, filepath.Base(path))
	}
	for _, m := range mountPoints(t) {
		if m == real || m == path {
			return true
		}
	}
	return false
}

// mountsUnder lists mount points below dir, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	var out []string
	for _, m := range mountPoints(t) {
		if strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// bridgePorts lists the interfaces attached to bridge.
func bridgePorts(bridge string) []string {
	out, err := exec.Command("ip", "-j", "link", "show", "master", bridge).Output()
	if err != nil {
		return nil // no such bridge
	}
	var links []struct {
		IfName string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil
	}
	var names []string
	for _, l := range links {
		names = append(names, l.IfName)
	}
	return names
}

// ifbName is the ifb device the bandwidth plugin makes for the egress limit
// of containerID on network: "bwp" and the start of
// sha512(network + containerID) in hex, 15 characters in all.
func ifbName(network, containerID string) string {
	sum := sha512.Sum512([]byte(network + containerID))
	return ("bwp" + hex.EncodeToString(sum[:]))[:15]
}

// ifbDevices lists the host's ifb devices.
func ifbDevices() map[string]bool {
	out, err := exec.Command("ip", "-j", "link", "show", "type", "ifb").Output()
	if err != nil {
		return nil
	}
	var links []struct {
		IfName string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil
	}
	names := map[string]bool{}
	for _, l := range links {
		names[l.IfName] = true
	}
	return names
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fs := strings.Fields(rest)
	return len(fs) > 0 && fs[0] != "Z" && fs[0] != "X"
}
