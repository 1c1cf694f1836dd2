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
	// Marks are podbay's directories (root, state, runtime roots): a
	// process with a path inside one among its arguments is podbay's.
	Marks []string
	// Self is doctor's own PID, never reported.
	Self int
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
}

// Process is a process of the host.
type Process struct {
	PID, PPID int
	Args      []string
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
		out = append(out, Leak{Kind: KindNetns, ID: ns.ID, What: fmt.Sprintf("%s (%s)", ns.Path, state), Cleanup: cleanup})
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
		out = append(out, Leak{Kind: KindRootfs, ID: r.ID, What: what, Cleanup: cleanup})
	}
	for _, m := range inv.Mounts {
		if m.ID != "" && owned[m.ID] {
			continue
		}
		what := fmt.Sprintf("%s (%s)", m.Point, m.FSType)
		if m.ID == "" && m.Layer != "" {
			what = fmt.Sprintf("%s (%s of layer %s, which no root filesystem uses)", m.Point, m.FSType, shortID(m.Layer))
		}
		out = append(out, Leak{Kind: KindMount, ID: m.ID, What: what, Cleanup: "umount " + m.Point})
	}
	for _, r := range inv.Reservations {
		if owned[r.Owner] {
			continue
		}
		out = append(out, Leak{Kind: KindIPAM, ID: r.Owner, What: fmt.Sprintf("IP %s reserved in %s", r.IP, r.Path),
			Cleanup: "rm " + r.Path})
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
		out = append(out, Leak{Kind: KindCNICache, ID: c.ID, What: what, Cleanup: cleanup})
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
		out = append(out, Leak{Kind: KindVeth, ID: v.PeerID, What: what, Cleanup: "ip link del " + v.Name})
	}
	out = append(out, classifyRules(inv.Rules, owned)...)
	out = append(out, classifyProcesses(inv, owned)...)
	for _, d := range inv.Dirs {
		if owned[d.ID] {
			continue
		}
		out = append(out, Leak{Kind: KindDir, ID: d.ID, What: fmt.Sprintf("%s %s", d.What, d.Path), Cleanup: "rm -rf " + d.Path})
	}
	return out
}

func classifyRules(rules []Rule, owned map[string]bool) []Leak {
	var out []Leak
	type chainKey struct{ tool, table, chain string }
	chains := map[chainKey]string{}
	var order []chainKey
	for _, r := range rules {
		if owned[r.ID] {
			continue
		}
		rule := strings.TrimPrefix(r.Line, "-A ")
		out = append(out, Leak{Kind: KindIptables, ID: r.ID, What: fmt.Sprintf("%s -t %s: %s", r.Tool, r.Table, r.Line),
			Cleanup: fmt.Sprintf("%s -t %s -D %s", r.Tool, r.Table, rule)})
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
			Cleanup: fmt.Sprintf("%s -t %s -F %s && %s -t %s -X %s (after the rules jumping to it)", k.tool, k.table, k.chain, k.tool, k.table, k.chain)})
	}
	return out
}

// classifyProcesses reports the processes of IDs no record owns: conmon
// (--cid), a shim (-id) or the runtime, told apart from other engines' by a
// path in podbay's directories among their arguments, and the processes
// under them (pause, the containers' processes).
func classifyProcesses(inv *Inventory, owned map[string]bool) []Leak {
	byPID := map[int]*Process{}
	for i := range inv.Processes {
		byPID[inv.Processes[i].PID] = &inv.Processes[i]
	}
	var out []Leak
	for _, p := range inv.Processes {
		if p.PID == inv.Self || p.PID <= 1 {
			continue
		}
		id, via := "", 0
		for q, depth := &p, 0; q != nil && depth < 16 && q.PID > 1; q, depth = byPID[q.PPID], depth+1 {
			if qid := processID(q.Args); qid != "" && marked(q.Args, inv.Marks) {
				id, via = qid, q.PID
				break
			}
		}
		if id == "" || owned[id] {
			continue
		}
		what := fmt.Sprintf("pid %d: %s", p.PID, truncate(strings.Join(p.Args, " "), 200))
		if via != p.PID {
			what += fmt.Sprintf(" (under pid %d)", via)
		}
		out = append(out, Leak{Kind: KindProcess, ID: id, What: what, Cleanup: "kill -KILL " + strconv.Itoa(p.PID)})
	}
	return out
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
