package doctor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/procfs"
)

// Scan lists what of podbay's the host holds on a node configured by cfg,
// reading only. n is the network podbayd uses (nil when none).
func Scan(ctx context.Context, cfg *config.Config, n *Network, daemonPID int) (*Inventory, []error) {
	return ScanScope(ctx, ScopeOf(cfg, n, daemonPID))
}

// ScanScope lists what of podbay's the host holds in scope, reading only.
// What cannot be listed is returned as errors; the rest is still listed.
func ScanScope(ctx context.Context, sc Scope) (*Inventory, []error) {
	cfg := sc.Config
	inv := &Inventory{Self: os.Getpid(), Daemon: sc.DaemonPID, Marks: marks(cfg), Owns: realPaths(sc.Owns)}
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	netInodes := processNetNamespaces()
	var err error
	inv.Namespaces, err = scanNamespaces(cfg.NetNSDir, netInodes)
	add("network namespaces", err)
	rootfses, err := readStorageContainers(cfg.Image.StorageRoot, cfg.Image.Driver)
	add("root filesystems", err)
	mounts, err := selfMounts()
	add("mounts", err)
	ms := mountScope(cfg, inv.Owns)
	inv.DriverHome = ms.layers
	inv.Rootfses, inv.Mounts = classifyMounts(mounts, rootfses, ms)
	if n := sc.Network; n != nil {
		if n.IPAMDir != "" {
			inv.Reservations, err = scanReservations(n.IPAMDir)
			add("IP reservations", err)
		}
		if n.Bridge != "" {
			inv.Veths, err = scanVeths(ctx, n.Bridge, inv.Namespaces)
			add("veths", err)
		}
		inv.Rules, err = scanRules(ctx, n.Name, sc.KnownIDs)
		add("iptables", err)
	}
	inv.Cached, err = scanCached(sc.cniConfig())
	add("libcni cache", err)
	inv.Processes, err = scanProcesses()
	add("processes", err)
	inv.Dirs = scanDirs(cfg)
	if sc.CgroupRoot != "" {
		inv.CgroupRoot = sc.CgroupRoot
		inv.Cgroups = scanCgroups(sc.CgroupRoot)
	}
	// Last: the things named by a hash of an ID, for every ID found.
	ids := inv.ids(sc.KnownIDs)
	if sc.Network != nil {
		inv.Ifbs, err = scanIfbs(ctx, sc.Network.Name, ids)
		add("ifb devices", err)
	}
	inv.Dirs = append(inv.Dirs, scanShimSockets(cfg, ids)...)
	return inv, errs
}

// marks are the directories whose paths in a process's arguments make it
// podbay's.
func marks(cfg *config.Config) []string {
	m := []string{cfg.Root, cfg.State}
	for _, name := range cfg.RuntimeNames() {
		rt := cfg.Runtimes[name]
		m = append(m, rt.Root)
		if dir := shimRuncState(rt); dir != "" {
			m = append(m, dir)
		}
	}
	return m
}

// processNetNamespaces returns the inodes of the network namespaces some
// process is in.
func processNetNamespaces() map[uint64]bool {
	inodes := map[uint64]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		link, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "net"))
		if err != nil {
			continue
		}
		var ino uint64
		if _, err := fmt.Sscanf(link, "net:[%d]", &ino); err == nil {
			inodes[ino] = true
		}
	}
	return inodes
}

// scanNamespaces lists the podbay-<id> files of dir.
func scanNamespaces(dir string, inUse map[uint64]bool) ([]Namespace, error) {
	ids, err := netns.List(dir)
	if err != nil {
		return nil, err
	}
	var out []Namespace
	for _, id := range ids {
		if !objectid.Is(id) {
			continue // not a name podbay gives
		}
		ns := Namespace{ID: id, Path: netns.Path(dir, id)}
		ns.Mounted, _ = netns.IsMounted(ns.Path)
		if ns.Mounted {
			var st unix.Stat_t
			if unix.Stat(ns.Path, &st) == nil {
				ns.InUse = inUse[st.Ino]
			}
		}
		out = append(out, ns)
	}
	return out, nil
}

// selfMounts reads the daemon's mount table, /proc/self/mountinfo.
func selfMounts() ([]procfs.Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return procfs.ParseMountinfo(f)
}

// storageContainer is an entry of containers/storage's containers.json or
// volatile-containers.json.
type storageContainer struct {
	ID    string `json:"id"`
	Layer string `json:"layer"`
}

// readStorageContainers reads containers/storage's lists of containers
// directly, without opening the store (which locks and may write): the
// synced one and the volatile one, where podbay keeps root filesystems
// unless sync_rootfs_records.
func readStorageContainers(storageRoot, driver string) ([]storageContainer, error) {
	var all []storageContainer
	for _, name := range []string{"containers.json", "volatile-containers.json"} {
		path := filepath.Join(storageRoot, driver+"-containers", name)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(data) == 0) {
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

// mountScopeT says which mount points are podbay's to look at.
type mountScopeT struct {
	// dirs are podbay's directories (symlinks resolved, as mountinfo
	// shows them).
	dirs []string
	// layers is the directory of the overlay driver's layers.
	layers string
	// netns is netns_dir, whose pins are reported as namespaces.
	netns string
	// owns are directories wholly podbay's: a mount there that names no
	// ID is listed too.
	owns []string
}

func mountScope(cfg *config.Config, owns []string) mountScopeT {
	s := mountScopeT{
		layers: realPath(filepath.Join(cfg.Image.StorageRoot, cfg.Image.Driver)),
		netns:  realPath(cfg.NetNSDir),
		owns:   owns,
	}
	for _, d := range []string{cfg.Root, cfg.State, cfg.Image.StorageRoot, cfg.Image.RunRoot} {
		s.dirs = append(s.dirs, realPath(d))
	}
	return s
}

func realPaths(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = realPath(p)
	}
	return out
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// classifyMounts pairs the root filesystems with their layer mounts, and
// returns the other mounts in podbay's directories that name an ID or
// mount a layer no root filesystem uses. The overlay driver's own mount
// of its directory names nothing and is left out.
func classifyMounts(mounts []procfs.Mount, containers []storageContainer, s mountScopeT) ([]Rootfs, []Mount) {
	byLayer := map[string]int{}
	rootfses := make([]Rootfs, len(containers))
	for i, c := range containers {
		rootfses[i] = Rootfs{ID: c.ID, Layer: c.Layer}
		byLayer[c.Layer] = i
	}
	var out []Mount
	for _, m := range mounts {
		if within(s.netns, m.Point) {
			continue
		}
		owned := inAny(s.owns, m.Point)
		if !owned && !inAny(s.dirs, m.Point) {
			continue
		}
		if rel, err := filepath.Rel(s.layers, m.Point); err == nil && !strings.HasPrefix(rel, "..") && rel != "." {
			layer := strings.Split(rel, string(filepath.Separator))[0]
			if i, ok := byLayer[layer]; ok {
				rootfses[i].MountPoint = m.Point
				continue
			}
			if objectid.Is(layer) {
				out = append(out, Mount{Point: m.Point, FSType: m.FSType, Layer: layer})
			}
			continue
		}
		if id := idInPath(m.Point); id != "" || owned {
			out = append(out, Mount{Point: m.Point, FSType: m.FSType, ID: id, Bare: id == ""})
		}
	}
	return rootfses, out
}

func inAny(dirs []string, p string) bool {
	for _, d := range dirs {
		if within(d, p) && d != p {
			return true
		}
	}
	return false
}

// idInPath returns the last path element that is an ID or podbay-<ID>.
func idInPath(p string) string {
	parts := strings.Split(p, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		el := strings.TrimPrefix(parts[i], netns.Prefix)
		if objectid.Is(el) {
			return el
		}
	}
	return ""
}

// scanReservations reads host-local's reservation files: one per IP,
// holding the container ID and the interface on separate lines.
func scanReservations(dir string) ([]Reservation, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Reservation
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "lock" || strings.HasPrefix(name, "last_reserved_ip") {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		owner := ""
		if f := strings.Fields(string(data)); len(f) > 0 {
			owner = f[0]
		}
		out = append(out, Reservation{IP: name, Owner: owner, Path: path})
	}
	return out, nil
}

// scanCached lists podbay's libcni cache as podbayd's garbage collection
// does.
func scanCached(nc network.Config) ([]Cached, error) {
	m, err := network.New(nc)
	if err != nil {
		return nil, err
	}
	atts, err := m.Cached()
	if err != nil {
		return nil, err
	}
	out := make([]Cached, 0, len(atts))
	for _, a := range atts {
		files, _ := filepath.Glob(filepath.Join(nc.CacheDir, "results", "*-"+a.ID+"-*"))
		out = append(out, Cached{ID: a.ID, NetNS: a.NetNS, Networks: a.Networks, Files: files})
	}
	return out, nil
}

// ipLink is what `ip -j link` prints of an interface.
type ipLink struct {
	IfName      string `json:"ifname"`
	LinkNetnsID *int   `json:"link_netnsid"`
}

func parseLinks(data []byte) ([]ipLink, error) {
	var links []ipLink
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	err := json.Unmarshal(data, &links)
	return links, err
}

// scanVeths lists the ports of bridge and finds the pinned namespace each
// one's peer is in, by the namespace IDs the host gives the pinned ones.
func scanVeths(ctx context.Context, bridge string, namespaces []Namespace) ([]Veth, error) {
	if _, err := os.Stat("/sys/class/net/" + bridge); err != nil {
		return nil, nil // no bridge: no pod ever had a network here
	}
	out, err := exec.CommandContext(ctx, "ip", "-j", "link", "show", "master", bridge).Output()
	if err != nil {
		return nil, fmt.Errorf("ip link show master %s: %w", bridge, err)
	}
	links, err := parseLinks(out)
	if err != nil {
		return nil, err
	}
	byNSID := map[int]string{}
	for _, ns := range namespaces {
		if !ns.Mounted {
			continue
		}
		if id, err := nsid(ns.Path); err == nil && id >= 0 {
			byNSID[id] = ns.ID
		}
	}
	var veths []Veth
	for _, l := range links {
		v := Veth{Name: l.IfName, PeerNSID: -1}
		if l.LinkNetnsID != nil {
			v.PeerNSID = *l.LinkNetnsID
			v.PeerID = byNSID[v.PeerNSID]
		}
		veths = append(veths, v)
	}
	return veths, nil
}

// scanRules runs iptables-save and ip6tables-save.
func scanRules(ctx context.Context, netName string, known map[string]bool) ([]Rule, error) {
	var out []Rule
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		bin, err := exec.LookPath(tool + "-save")
		if err != nil {
			continue
		}
		data, err := exec.CommandContext(ctx, bin).Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", bin, err))
			continue
		}
		out = append(out, parseIptablesSave(tool, data, netName, known)...)
	}
	return out, errors.Join(errs...)
}

// commentID matches the comments the bridge ("name: …") and portmap
// ("dnat name: …", "snat name: …") plugins put on a pod's rules.
var commentID = regexp.MustCompile(`name: \\?"([^"\\]*)\\?" id: \\?"([0-9a-f]{64})\\?"`)

// perPodChain matches the chains the bridge and portmap plugins make per
// attachment (not the shared CNI-HOSTPORT-* ones).
var perPodChain = regexp.MustCompile(`^CNI-(DN-)?[0-9a-f]{12,}$`)

// parseIptablesSave returns the rules of network netName that name a
// container ID in their comment, the rules of the per-pod chains those
// jump to, the rules that name an ID of known, and the other rules that
// name the network (podbay's masquerade of it, say), with no ID.
func parseIptablesSave(tool string, data []byte, netName string, known map[string]bool) []Rule {
	type line struct{ table, text, chain, target string }
	var lines []line
	table := ""
	chainOwner := map[string]string{} // table/chain → ID
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		text := sc.Text()
		if strings.HasPrefix(text, "*") {
			table = text[1:]
			continue
		}
		if !strings.HasPrefix(text, "-A ") {
			continue
		}
		f := strings.Fields(text)
		l := line{table: table, text: text, chain: f[1]}
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-j" || f[i] == "-g" {
				l.target = f[i+1]
			}
		}
		lines = append(lines, l)
		if m := commentID.FindStringSubmatch(text); m != nil && m[1] == netName {
			for _, c := range []string{l.chain, l.target} {
				if perPodChain.MatchString(c) {
					chainOwner[table+"/"+c] = m[2]
				}
			}
		}
	}
	var out []Rule
	for _, l := range lines {
		id := ""
		if m := commentID.FindStringSubmatch(l.text); m != nil && m[1] == netName {
			id = m[2]
		}
		chain := ""
		if owner, ok := chainOwner[l.table+"/"+l.chain]; ok {
			chain = l.chain
			if id == "" {
				id = owner
			}
		}
		if id == "" {
			id = knownIn(l.text, known)
		}
		masq := netName != "" && strings.Contains(l.text, network.MasqueradeChain(netName))
		// The network's name, as the plugins' and podbay's comments quote it.
		named := netName != "" && strings.Contains(l.text, `\"`+netName+`\"`)
		if id == "" && !named && !masq {
			continue
		}
		out = append(out, Rule{Tool: tool, Table: l.table, Line: l.text, ID: id, Chain: chain, Masquerade: masq})
	}
	return out
}

// scanProcesses reads every process's parent and command line.
func scanProcesses() ([]Process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.Dead() {
			continue // gone meanwhile, or a zombie
		}
		base := filepath.Join("/proc", e.Name())
		p := Process{PID: pid, PPID: st.PPID}
		cmd, _ := os.ReadFile(filepath.Join(base, "cmdline"))
		p.Args = strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		p.Cwd, _ = os.Readlink(filepath.Join(base, "cwd"))
		p.Exe, _ = os.Readlink(filepath.Join(base, "exe"))
		p.Cgroups = readCgroupPaths(filepath.Join(base, "cgroup"))
		out = append(out, p)
	}
	return out, nil
}

// shimRuncState is where containerd-shim-runc-v2 keeps runc's state for
// podbay's pods: <runtime_root>/<namespace>, runtime_root defaulting to
// containerd's /run/containerd/runc; "" for a Kata handler (config_path)
// and for oci handlers.
func shimRuncState(rt config.Runtime) string {
	if rt.Type != config.TypeVM || rt.ConfigPath != "" {
		return ""
	}
	root := rt.RuntimeRoot
	if root == "" {
		root = "/run/containerd/runc"
	}
	return filepath.Join(root, shimNamespace)
}

// shimNamespace is the containerd namespace podbay gives its shims
// (internal/shim's DefaultNamespace; not imported, to keep the CLI free of
// the shim client).
const shimNamespace = "podbay"

// scanDirs lists the per-ID directories and files podbay makes: sandbox
// and container dirs, their OCI bundles, pinned pods' namespace dirs, the runtimes' state, conmon's exit files and attach
// links.
func scanDirs(cfg *config.Config) []Dir {
	var out []Dir
	list := func(dir, what string, any bool) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if any || objectid.Is(e.Name()) {
				out = append(out, Dir{ID: e.Name(), Path: filepath.Join(dir, e.Name()), What: what})
			}
		}
	}
	// podbayd removes every entry of sandboxes/ that no record owns.
	list(filepath.Join(cfg.Root, "sandboxes"), "sandbox dir", true)
	list(filepath.Join(cfg.Root, "containers"), "container dir", false)
	list(config.BundlesRoot(cfg.State), "bundle dir", false)
	list(filepath.Join(cfg.State, "attach"), "conmon attach link", false)
	// A pinned pod's namespaces; mounted ones are reported as mounts too.
	list(podns.Root(cfg.State), "pinned pod namespaces dir", false)
	// A pod's shared /dev/shm; a mounted one is reported as a mount too.
	list(podshm.Root(cfg.State), "pod shm dir", false)
	for _, name := range cfg.RuntimeNames() {
		rt := cfg.Runtimes[name]
		if rt.Type == config.TypeVM {
			list(filepath.Join(rt.Root, "pods"), "shim pod state ("+name+")", false)
			list(filepath.Join(rt.Root, "containers"), "shim container state ("+name+")", false)
			if dir := shimRuncState(rt); dir != "" {
				list(dir, "shim runc state ("+name+")", false)
			}
			continue
		}
		list(rt.Root, "runtime state ("+name+")", false)
		list(filepath.Join(cfg.State, "exits", name), "exit file ("+name+")", false)
	}
	return out
}
