package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/podbay/podbay/internal/netns"
)

// cniFloor times the shared conflist alone, through libcni with no daemon
// and no runtime: CNI ADD into a fresh network namespace, then DEL. The
// arguments are those a kubelet's runtime passes (CNI_ARGS with the K8S_*
// keys, an empty portMappings capability: a pod with no ports). Making and
// removing the namespace is not timed. It is what RunPodSandbox and
// StopPodSandbox of any daemon on that network pay at the least (each adds
// its own loopback, namespace and bookkeeping): a target below it cannot
// be met by any runtime on that network.
type cniFloor struct {
	cni      *libcni.CNIConfig
	list     *libcni.NetworkConfigList
	netnsDir string // the namespaces' pin files; left to the caller
	seq      int
	live     []string // attachments whose namespace is pinned, DEL'd or not
	add, del []time.Duration
	cpu      []time.Duration // ADD and DEL: the plugins' CPU time
}

// newCNIFloor reads the conflist; CNI's cache (cacheDir) and the pinned
// namespaces (netnsDir) stay in the caller's dirs, empty after cleanup.
func newCNIFloor(conflist string, binDirs []string, cacheDir, netnsDir string) (*cniFloor, error) {
	list, err := libcni.ConfListFromFile(conflist)
	if err != nil {
		return nil, fmt.Errorf("CNI floor conflist: %w", err)
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, err
	}
	return &cniFloor{
		cni:      libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, nil),
		list:     list,
		netnsDir: netnsDir,
	}, nil
}

// runtimeConf is attachment id's CNI arguments, as a kubelet runtime's.
func (c *cniFloor) runtimeConf(id string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       filepath.Join(c.netnsDir, id),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "podbay-bench"},
			{"K8S_POD_NAME", id},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
		},
		CapabilityArgs: map[string]any{"portMappings": []any{}},
	}
}

// block times k ADDs and DELs, each in a namespace of its own, pinned
// before the ADD and removed after the DEL (untimed).
func (c *cniFloor) block(ctx context.Context, k int) error {
	for range k {
		c.seq++
		id := fmt.Sprintf("podbay-bench-cnifloor-%d-%d", os.Getpid(), c.seq)
		rt := c.runtimeConf(id)
		c.live = append(c.live, id)
		if err := netns.Pin(rt.NetNS); err != nil {
			return err
		}
		c0 := childCPU()
		t0 := time.Now()
		if _, err := c.cni.AddNetworkList(ctx, c.list, rt); err != nil {
			return fmt.Errorf("CNI ADD %s: %w", c.list.Name, err)
		}
		t1 := time.Now()
		if err := c.cni.DelNetworkList(ctx, c.list, rt); err != nil {
			return fmt.Errorf("CNI DEL %s: %w", c.list.Name, err)
		}
		t2 := time.Now()
		c.add = append(c.add, t1.Sub(t0))
		c.del = append(c.del, t2.Sub(t1))
		c.cpu = append(c.cpu, childCPU()-c0)
		if err := c.forget(id); err != nil {
			return err
		}
	}
	return nil
}

// forget removes attachment id's namespace and its bookkeeping.
func (c *cniFloor) forget(id string) error {
	if err := netns.Remove(filepath.Join(c.netnsDir, id)); err != nil {
		return err
	}
	c.live = slices.DeleteFunc(c.live, func(s string) bool { return s == id })
	return nil
}

// cleanup DELs and removes whatever a failed block left: DEL of an
// attachment that was never added, or is gone already, succeeds.
func (c *cniFloor) cleanup(ctx context.Context) error {
	var errs []error
	for _, id := range slices.Clone(c.live) {
		if err := c.cni.DelNetworkList(ctx, c.list, c.runtimeConf(id)); err != nil {
			errs = append(errs, fmt.Errorf("CNI DEL %s of %s: %w", c.list.Name, id, err))
		}
		// The namespace goes even when DEL failed: what DEL left outside
		// it (an address, rules) is the caller's leak check's to find.
		errs = append(errs, c.forget(id))
	}
	return errors.Join(errs...)
}

// cniFloorRows are the rows the CNI floor bounds: RunPodSandbox by the
// ADD, StopPodSandbox by the DEL.
var cniFloorRows = []struct{ row, op string }{{rpcRun, "ADD"}, {rpcStop, "DEL"}}

// report is the CNI floor's line under a table: the ADD's and DEL's
// p50s, and RunPodSandbox's and StopPodSandbox's targets against them.
func (c *cniFloor) report(t table) string {
	return cniFloorReport(t, c.list.Name, c.add, c.del)
}

func cniFloorReport(t table, network string, add, del []time.Duration) string {
	if len(add) == 0 {
		return ""
	}
	q := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return msOf(quantile(s, p))
	}
	p50 := map[string]float64{"ADD": q(add, 0.5), "DEL": q(del, 0.5)}
	var b strings.Builder
	fmt.Fprintf(&b, "CNI floor: the shared conflist's ADD alone (network %s; libcni, no daemon or runtime; %d samples): p50 %.1f ms (p95 %.1f), DEL alone p50 %.1f ms (p95 %.1f)",
		network, len(add), p50["ADD"], q(add, 0.95), p50["DEL"], q(del, 0.95))
	for _, f := range cniFloorRows {
		for _, r := range t.rows {
			if r.name != f.row || r.goal.kind != goalMaxRatio {
				continue
			}
			v, col := t.best(r)
			if col < 0 {
				continue
			}
			target := r.goal.limit * v
			gap := target - p50[f.op]
			where := "above"
			if gap < 0 {
				where = "below"
			}
			fmt.Fprintf(&b, "; %s's target is %.1f ms (%g × %s's %.1f) — %.1f ms %s the %s alone", r.name, target, r.goal.limit, t.cols[col], v, math.Abs(gap), where, f.op)
			if gap < 0 {
				b.WriteString(", out of reach on this network")
			}
		}
	}
	return b.String()
}
