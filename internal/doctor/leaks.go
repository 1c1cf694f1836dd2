package doctor

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/podbay/podbay/internal/objectid"
)

// Inventory is what of podbay's the host holds, as Scan lists it (before
// the records are read, so that a pod made meanwhile is owned by the time
// they are). Classify compares it with the records.
type Inventory struct {
	Namespaces   []Namespace
	Mounts       []Mount
	Rootfses     []Rootfs
	Reservations []Reservation
	Cached       []Cached
	Veths        []Veth
	Rules        []Rule
	Processes    []Process
	Dirs         []Dir
	Ifbs         []Ifb
	Cgroups      []Cgroup
	// Marks are podbay's directories (root, state, runtime roots): a
	// process with a path inside one among its arguments, and an ID, is
	// podbay's.
	Marks []string
	// Owns are the scope's directories that are wholly podbay's (Scope.Owns).
	Owns []string
	// CgroupRoot is Scope.CgroupRoot: a process in it is podbay's.
	CgroupRoot string
	// DriverHome is the storage driver's directory, which the driver
	// mounts onto itself while a layer is mounted.
	DriverHome string
	// Self is the scanning process's PID, and Daemon the running podbayd's
	// (0 when none runs): never reported.
	Self, Daemon int
}

// Namespace is a podbay-<id> file in netns_dir.
type Namespace struct {
	ID, Path string
	Mounted  bool // an nsfs mount pins a namespace on it
	InUse    bool // a process is in that namespace
}

// Mount is a mount point under podbay's directories that is not a
// namespace pin in netns_dir.
type Mount struct {
	Point, FSType string
	// ID is the sandbox or container it belongs to: the containers/storage
	// container whose layer is mounted, or a podbay ID in the path.
	ID string
	// Layer is set for an overlay layer mount; with ID empty, no root
	// filesystem uses the layer.
	Layer string
	// Bare is set for a mount in a directory wholly podbay's (Scope.Owns)
	// that names no ID: a leak once the daemon is stopped.
	Bare bool
}

// Rootfs is a containers/storage container in podbay's image store: the
// root filesystem of the sandbox or container of the same ID.
type Rootfs struct {
	ID, Layer string
	// MountPoint is where its layer is mounted, "" when it is not.
	MountPoint string
}

// Reservation is a host-local IP reservation file of podbay's network.
type Reservation struct {
	IP, Owner, Path string
}

// Cached is an attachment in podbay's private libcni cache: a CNI ADD not
// yet deleted.
type Cached struct {
	ID       string
	NetNS    string
	Networks []string
	Files    []string
}

// Veth is a port of podbay's bridge.
type Veth struct {
	Name string
	// PeerID is the pod whose pinned namespace holds the peer, "" when the
	// peer is in no namespace pinned in netns_dir.
	PeerID string
	// PeerNSID is the peer's namespace ID as the host sees it, -1 when it
	// has none (the peer is gone or in the host's namespace).
	PeerNSID int
}

// Rule is an iptables rule a CNI plugin made for a container ID, found by
// its comment or by the per-pod chain it is in.
type Rule struct {
	Tool, Table string
	// Line is the rule as iptables-save prints it ("-A CHAIN …").
	Line string
	ID   string
	// Chain is the rule's chain when it is a per-pod chain (CNI-<hash>,
	// CNI-DN-<hash>), which goes with the pod.
	Chain string
	// Masquerade is set for a rule of podbay's masquerade of the network
	// (ID ""): the daemon's while it runs or pods are left.
	Masquerade bool
}

// Process is a process of the host.
type Process struct {
	PID, PPID int
	Args      []string
	// Cwd and Exe are its working directory and binary; Cgroups its
	// cgroup paths, one per hierarchy.
	Cwd, Exe string
	Cgroups  []string
}

// Ifb is an ifb device the bandwidth plugin made for a pod's egress limit.
type Ifb struct {
	Name, ID string
}

// Cgroup is a cgroup below Scope.CgroupRoot.
type Cgroup struct {
	Path string
	// ID is the ID its name carries, "" when none.
	ID   string
	PIDs []int
}

// Dir is a per-sandbox or per-container directory podbay makes.
type Dir struct {
	ID, Path string
	// What says whose directory it is ("sandbox dir", "exit file", …).
	What string
}

// Classify returns what in inv no ID in owned owns, each with a suggested
// cleanup, in a stable order.
func Classify(inv *Inventory, owned map[string]bool) []Leak {
	var out []Leak
	for _, ns := range inv.Namespaces {
		if owned[ns.ID] {
			continue
		}
		state, cleanup := "file, no namespace mounted", "rm "+ns.Path
		if ns.Mounted {
			state, cleanup = "mounted namespace", "umount "+ns.Path+" && rm "+ns.Path
			if ns.InUse {
				state += ", a process is in it"
			}
		}
		out = append(out, Leak{Kind: KindNetns, ID: ns.ID, What: fmt.Sprintf("%s (%s)", ns.Path, state), Cleanup: cleanup, Object: ns.Path})
	}
	for _, r := range inv.Rootfses {
		if owned[r.ID] {
			continue
		}
		what := "root filesystem (containers/storage container, layer " + shortID(r.Layer) + ")"
		cleanup := "restart podbayd: its garbage collection removes root filesystems no record owns"
		if r.MountPoint != "" {
			what += ", mounted at " + r.MountPoint
			cleanup = "umount " + r.MountPoint + "; then " + cleanup
		}
		out = append(out, Leak{Kind: KindRootfs, ID: r.ID, What: what, Cleanup: cleanup, Object: r.ID})
		if r.MountPoint != "" {
			out = append(out, Leak{Kind: KindMount, ID: r.ID, What: fmt.Sprintf("%s (the layer of root filesystem %s)", r.MountPoint, shortID(r.ID)),
				Cleanup: "umount " + r.MountPoint, Object: r.MountPoint})
		}
	}
	ownedLayers := false
	for _, r := range inv.Rootfses {
		ownedLayers = ownedLayers || (owned[r.ID] && r.MountPoint != "")
	}
	for _, m := range inv.Mounts {
		if m.ID != "" && owned[m.ID] {
			continue
		}
		// While the daemon runs it may hold mounts of its own; the
		// driver's mount of its home stays while a layer is mounted.
		if m.Bare && (inv.Daemon != 0 || (m.Point == inv.DriverHome && ownedLayers)) {
			continue
		}
		what := fmt.Sprintf("%s (%s)", m.Point, m.FSType)
		if m.ID == "" && m.Layer != "" {
			what = fmt.Sprintf("%s (%s of layer %s, which no root filesystem uses)", m.Point, m.FSType, shortID(m.Layer))
		}
		out = append(out, Leak{Kind: KindMount, ID: m.ID, What: what, Cleanup: "umount " + m.Point, Object: m.Point})
	}
	for _, r := range inv.Reservations {
		if owned[r.Owner] {
			continue
		}
		out = append(out, Leak{Kind: KindIPAM, ID: r.Owner, What: fmt.Sprintf("IP %s reserved in %s", r.IP, r.Path),
			Cleanup: "rm " + r.Path, Object: r.Path})
	}
	for _, c := range inv.Cached {
		if owned[c.ID] {
			continue
		}
		what := fmt.Sprintf("CNI attachment to %s (netns %s) in podbay's libcni cache", strings.Join(c.Networks, ", "), c.NetNS)
		cleanup := "restart podbayd: its garbage collection runs CNI DEL from the cached config"
		if len(c.Files) > 0 {
			cleanup += "; or, once its IP and rules are released, rm " + strings.Join(c.Files, " ")
		}
		out = append(out, Leak{Kind: KindCNICache, ID: c.ID, What: what, Cleanup: cleanup, Object: strings.Join(c.Files, " ")})
	}
	for _, v := range inv.Veths {
		if v.PeerID != "" && owned[v.PeerID] {
			continue
		}
		what := v.Name + ": its peer is in no namespace pinned in netns_dir"
		switch {
		case v.PeerID != "":
			what = v.Name + ": its peer is in the namespace of " + v.PeerID + ", which no record owns"
		case v.PeerNSID < 0:
			what = v.Name + ": it has no peer in another namespace"
		}
		out = append(out, Leak{Kind: KindVeth, ID: v.PeerID, What: what, Cleanup: "ip link del " + v.Name, Object: v.Name})
	}
	for _, d := range inv.Ifbs {
		if owned[d.ID] {
			continue
		}
		out = append(out, Leak{Kind: KindIfb, ID: d.ID, What: "ifb device " + d.Name + " (the bandwidth plugin's egress limit)",
			Cleanup: "ip link del " + d.Name, Object: d.Name})
	}
	out = append(out, classifyRules(inv, owned)...)
	out = append(out, classifyProcesses(inv, owned)...)
	out = append(out, classifyCgroups(inv, owned)...)
	for _, d := range inv.Dirs {
		if owned[d.ID] {
			continue
		}
		out = append(out, Leak{Kind: KindDir, ID: d.ID, What: fmt.Sprintf("%s %s", d.What, d.Path), Cleanup: "rm -rf " + d.Path, Object: d.Path})
	}
	return out
}

func classifyRules(inv *Inventory, owned map[string]bool) []Leak {
	var out []Leak
	type chainKey struct{ tool, table, chain string }
	chains := map[chainKey]string{}
	var order []chainKey
	for _, r := range inv.Rules {
		if r.ID != "" && owned[r.ID] {
			continue
		}
		// The masquerade of the network is the daemon's while it runs,
		// and stays while pods are left; a clean stop with none removes it.
		if r.Masquerade && (inv.Daemon != 0 || len(owned) > 0) {
			continue
		}
		rule := strings.TrimPrefix(r.Line, "-A ")
		out = append(out, Leak{Kind: KindIptables, ID: r.ID, What: fmt.Sprintf("%s -t %s: %s", r.Tool, r.Table, r.Line),
			Cleanup: fmt.Sprintf("%s -t %s -D %s", r.Tool, r.Table, rule), Object: r.Tool + " " + r.Table + " " + r.Line})
		if r.Chain != "" {
			k := chainKey{r.Tool, r.Table, r.Chain}
			if _, seen := chains[k]; !seen {
				order = append(order, k)
			}
			chains[k] = r.ID
		}
	}
	for _, k := range order {
		out = append(out, Leak{Kind: KindIptables, ID: chains[k], What: fmt.Sprintf("%s -t %s: chain %s", k.tool, k.table, k.chain),
			Cleanup: fmt.Sprintf("%s -t %s -F %s && %s -t %s -X %s (after the rules jumping to it)", k.tool, k.table, k.chain, k.tool, k.table, k.chain),
			Object:  k.tool + " " + k.table + " " + k.chain})
	}
	return out
}

// classifyProcesses reports the processes of IDs no record owns: conmon
// (--cid), a shim (-id) or the runtime, told apart from other engines' by a
// path in podbay's directories among their arguments, and the processes
// under them (pause, the containers' processes). In a scope with
// directories or a cgroup root wholly podbay's, a process marked by those
// is reported though it names no ID. A process under one that names an
// owned ID is not.
func classifyProcesses(inv *Inventory, owned map[string]bool) []Leak {
	byPID := inv.processesByPID()
	var out []Leak
	for _, p := range inv.Processes {
		if p.PID == inv.Self || p.PID == inv.Daemon || p.PID <= 1 {
			continue
		}
		leaked, id, via := inv.processVerdict(&p, byPID, owned)
		if !leaked {
			continue
		}
		what := fmt.Sprintf("pid %d: %s", p.PID, truncate(strings.Join(p.Args, " "), 200))
		if p.Cwd != "" && len(inv.Owns) > 0 {
			what += " (cwd " + p.Cwd + ")"
		}
		if via != p.PID {
			what += fmt.Sprintf(" (under pid %d)", via)
		}
		out = append(out, Leak{Kind: KindProcess, ID: id, What: what, Cleanup: "kill -KILL " + strconv.Itoa(p.PID), Object: strconv.Itoa(p.PID)})
	}
	return out
}

func (inv *Inventory) processesByPID() map[int]*Process {
	byPID := map[int]*Process{}
	for i := range inv.Processes {
		byPID[inv.Processes[i].PID] = &inv.Processes[i]
	}
	return byPID
}

// processVerdict walks up from p, to init or the scanner or the daemon:
// p is leaked when some process on the way is podbay's, and no process on
// the way names an owned ID. id is the ID the podbay process named, via
// its PID.
func (inv *Inventory) processVerdict(p *Process, byPID map[int]*Process, owned map[string]bool) (leaked bool, id string, via int) {
	for q, depth := p, 0; q != nil && depth < 16; q, depth = byPID[q.PPID], depth+1 {
		if q.PID <= 1 || q.PID == inv.Self || q.PID == inv.Daemon {
			break
		}
		if namesOwned(q, owned) {
			return false, "", 0
		}
		if leaked {
			continue
		}
		qid := processID(q.Args)
		if (qid != "" && marked(q.Args, inv.Marks)) || inv.ownsProcess(q) {
			leaked, id, via = true, qid, q.PID
		}
	}
	return leaked, id, via
}

// namesOwned reports whether a process names an owned ID in its arguments
// or cgroups.
func namesOwned(p *Process, owned map[string]bool) bool {
	if len(owned) == 0 {
		return false
	}
	return knownIn(strings.Join(p.Args, " "), owned) != "" || knownIn(strings.Join(p.Cgroups, " "), owned) != ""
}

// ownsProcess reports whether p's arguments, working directory or binary
// lie in a directory wholly podbay's, or p is in the cgroup root.
func (inv *Inventory) ownsProcess(p *Process) bool {
	cmdline := strings.Join(p.Args, " ")
	for _, d := range inv.Owns {
		if strings.Contains(cmdline, d+"/") || p.Cwd == d || within(d, p.Cwd) && p.Cwd != "" || strings.HasPrefix(p.Exe, d+"/") {
			return true
		}
	}
	if inv.CgroupRoot == "" {
		return false
	}
	for _, cg := range p.Cgroups {
		if cg == inv.CgroupRoot || strings.HasPrefix(cg, inv.CgroupRoot+"/") {
			return true
		}
	}
	return false
}

// classifyCgroups reports the cgroups below the cgroup root that are named
// for an ID no record owns, or hold a process that is not an owned pod's.
func classifyCgroups(inv *Inventory, owned map[string]bool) []Leak {
	byPID := inv.processesByPID()
	var out []Leak
	for _, cg := range inv.Cgroups {
		if knownIn(cg.Path, owned) != "" {
			continue
		}
		// A shared cgroup (conmon's, say) may hold owned pods' processes,
		// and the daemon's: on a cgroup v1 host one of its threads, the
		// monitors' spawner, is in the monitor cgroup.
		var foreign []string
		for _, pid := range cg.PIDs {
			if pid == inv.Daemon || pid == inv.Self {
				continue
			}
			if q := byPID[pid]; q != nil {
				if kept := inv.processKept(q, byPID, owned); kept {
					continue
				}
			}
			foreign = append(foreign, strconv.Itoa(pid))
		}
		switch {
		case len(foreign) > 0:
			out = append(out, Leak{Kind: KindCgroup, ID: cg.ID, What: cg.Path + " holds processes " + strings.Join(foreign, ","),
				Cleanup: "kill the processes; then rmdir " + cg.Path, Object: cg.Path})
		case cg.ID != "":
			out = append(out, Leak{Kind: KindCgroup, ID: cg.ID, What: cg.Path + " left behind", Cleanup: "rmdir " + cg.Path, Object: cg.Path})
		}
	}
	return out
}

// processKept reports whether p, or a process above it, names an owned ID.
func (inv *Inventory) processKept(p *Process, byPID map[int]*Process, owned map[string]bool) bool {
	for q, depth := p, 0; q != nil && depth < 16; q, depth = byPID[q.PPID], depth+1 {
		if q.PID <= 1 || q.PID == inv.Self || q.PID == inv.Daemon {
			return false
		}
		if namesOwned(q, owned) {
			return true
		}
	}
	return false
}

// processID returns the container ID a podbay-started process names:
// conmon's --cid or -c, a shim's -id, else the last argument that is an
// ID (the runtime's "runc … kill <id>").
func processID(args []string) string {
	if len(args) == 0 {
		return ""
	}
	for i, a := range args[1:] {
		for _, flag := range []string{"--cid", "-c", "-id", "--id"} {
			if a == flag && i+2 < len(args) && objectid.Is(args[i+2]) {
				return args[i+2]
			}
			if v, ok := strings.CutPrefix(a, flag+"="); ok && objectid.Is(v) {
				return v
			}
		}
	}
	for i := len(args) - 1; i > 0; i-- {
		if objectid.Is(args[i]) {
			return args[i]
		}
	}
	return ""
}

// marked reports whether an argument (or a --flag=value's value) is a path
// in one of dirs.
func marked(args, dirs []string) bool {
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/") {
			a = v
		}
		if !strings.HasPrefix(a, "/") {
			continue
		}
		if slices.ContainsFunc(dirs, func(d string) bool { return d != "" && within(d, filepath.Clean(a)) }) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
