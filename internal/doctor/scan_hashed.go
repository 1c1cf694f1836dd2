package doctor

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/podbay/podbay/internal/config"
)

// ids are the IDs the inventory names, and known.
func (inv *Inventory) ids(known map[string]bool) []string {
	set := map[string]bool{}
	for id := range known {
		set[id] = true
	}
	for _, ns := range inv.Namespaces {
		set[ns.ID] = true
	}
	for _, r := range inv.Rootfses {
		set[r.ID] = true
	}
	for _, r := range inv.Reservations {
		set[r.Owner] = true
	}
	for _, c := range inv.Cached {
		set[c.ID] = true
	}
	for _, r := range inv.Rules {
		set[r.ID] = true
	}
	for _, d := range inv.Dirs {
		set[d.ID] = true
	}
	delete(set, "")
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// ifbName is the ifb device the bandwidth plugin makes for the egress limit
// of containerID on network: "bwp" and the start of sha512(network +
// containerID) in hex, 15 characters in all.
func ifbName(network, containerID string) string {
	sum := sha512.Sum512([]byte(network + containerID))
	return ("bwp" + hex.EncodeToString(sum[:]))[:15]
}

// scanIfbs lists the host's ifb devices that the bandwidth plugin made on
// network netName for one of ids.
func scanIfbs(ctx context.Context, netName string, ids []string) ([]Ifb, error) {
	out, err := exec.CommandContext(ctx, "ip", "-j", "link", "show", "type", "ifb").Output()
	if err != nil {
		return nil, fmt.Errorf("ip link show type ifb: %w", err)
	}
	links, err := parseLinks(out)
	if err != nil {
		return nil, err
	}
	present := map[string]bool{}
	for _, l := range links {
		present[l.IfName] = true
	}
	var ifbs []Ifb
	for _, id := range ids {
		if name := ifbName(netName, id); present[name] {
			ifbs = append(ifbs, Ifb{Name: name, ID: id})
		}
	}
	return ifbs, nil
}

// scanShimSockets lists the sockets of the shims of ids that the vm
// handlers start: /run/containerd/s/<sha256 of address/namespace/pod>,
// the address being the handler's events socket. A shim that exits cleanly
// removes its socket; podbay removes a dead shim's.
func scanShimSockets(cfg *config.Config, ids []string) []Dir {
	var out []Dir
	for _, name := range cfg.RuntimeNames() {
		rt := cfg.Runtimes[name]
		if rt.Type != config.TypeVM {
			continue
		}
		events := filepath.Join(rt.Root, "events.sock")
		for _, id := range ids {
			sum := sha256.Sum256([]byte(filepath.Join(events, shimNamespace, id)))
			p := filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:]))
			if _, err := os.Lstat(p); err == nil {
				out = append(out, Dir{ID: id, Path: p, What: "shim socket (" + name + ")"})
			}
		}
	}
	return out
}

// scanCgroups lists the cgroups below root in every mounted hierarchy: the
// unified one at /sys/fs/cgroup on a pure cgroup v2 host, the v1 ones (and
// a hybrid host's unified/) below it elsewhere.
func scanCgroups(root string) []Cgroup {
	var tops []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		tops = []string{filepath.Join("/sys/fs/cgroup", root)}
	} else {
		entries, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range entries {
			tops = append(tops, filepath.Join("/sys/fs/cgroup", e.Name(), root))
		}
	}
	var out []Cgroup
	for _, top := range tops {
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error { //nolint:errcheck // best effort: a cgroup may go meanwhile
			if err != nil || !d.IsDir() || p == top {
				return nil
			}
			cg := Cgroup{Path: p, ID: hexID.FindString(filepath.Base(p))}
			data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					cg.PIDs = append(cg.PIDs, pid)
				}
			}
			out = append(out, cg)
			return nil
		})
	}
	return out
}

// hexID is an ID as cgroup names, mount points and rules carry it.
var hexID = regexp.MustCompile(`[0-9a-f]{64}`)

// readCgroupPaths returns the cgroup paths of a process's /proc/<pid>/cgroup.
func readCgroupPaths(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if parts := strings.SplitN(sc.Text(), ":", 3); len(parts) == 3 {
			out = append(out, parts[2])
		}
	}
	return out
}

// knownIn returns an ID of known that s names, "" when none does.
func knownIn(s string, known map[string]bool) string {
	for _, m := range hexID.FindAllString(s, -1) {
		if known[m] {
			return m
		}
	}
	return ""
}
