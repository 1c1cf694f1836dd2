package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// floor times the OCI runtime alone, from its command line, with no
// daemon, monitor, image store or network: `create` and `start` of a
// busybox container that runs sleep, in a pid and mount namespace of its
// own and a cgroup, and the host's other namespaces (cheaper than joining
// a pod's). It is what both daemons' CreateContainer + StartContainer pay
// at the least: a target below it cannot be met by either.
type floor struct {
	runtime      string // the runtime's binary
	dir          string // state root and bundles; removed by cleanup
	rootfs       string // a busybox root filesystem with bin/sleep
	cgroupParent string // cgroupfs path the containers' cgroups go under
	seq          int
	live         []string // containers not deleted yet
	create       []time.Duration
	start        []time.Duration
	both         []time.Duration
	cpu          []time.Duration // create, start and delete: runc's CPU time
}

// newFloor prepares the state root and the bundle's spec.
func newFloor(runtimePath, dir, rootfs, cgroupParent string) (*floor, error) {
	if _, err := os.Stat(filepath.Join(rootfs, "bin", "sleep")); err != nil {
		return nil, fmt.Errorf("floor root filesystem: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		return nil, err
	}
	return &floor{runtime: runtimePath, dir: dir, rootfs: rootfs, cgroupParent: cgroupParent}, nil
}

// spec is the container's config: the runtime's own default (`spec`),
// running sleep, with the host's network, IPC and UTS namespaces.
func (f *floor) spec(ctx context.Context, bundle, id string) error {
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, f.runtime, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return fmt.Errorf("%s spec: %w: %s", f.runtime, err, out)
	}
	path := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	s.Root = &specs.Root{Path: f.rootfs, Readonly: true}
	s.Process.Terminal = false
	s.Hostname = ""
	s.Process.Args = []string{"sleep", "3600"}
	s.Linux.CgroupsPath = f.cgroupParent + "/" + id
	s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
		return ns.Type == specs.NetworkNamespace || ns.Type == specs.IPCNamespace || ns.Type == specs.UTSNamespace
	})
	if data, err = json.Marshal(&s); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// run is the runtime's command with the floor's state root.
func (f *floor) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, f.runtime, append([]string{"--root", filepath.Join(f.dir, "state")}, args...)...)
	// Files, not pipes: the container's process inherits create's stdio
	// and would hold a pipe open for as long as it runs.
	errFile, err := os.CreateTemp(f.dir, "stderr-")
	if err != nil {
		return err
	}
	defer os.Remove(errFile.Name())
	defer errFile.Close()
	cmd.Stderr = errFile // stdin and stdout: /dev/null
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errFile.Name())
		return fmt.Errorf("%s %s: %w: %s", f.runtime, args[0], err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// block times k creates and starts; each container is deleted (untimed)
// before the next is made.
func (f *floor) block(ctx context.Context, k int) error {
	for range k {
		f.seq++
		id := fmt.Sprintf("podbay-bench-floor-%d-%d", os.Getpid(), f.seq)
		bundle := filepath.Join(f.dir, id)
		if err := f.spec(ctx, bundle, id); err != nil {
			return err
		}
		f.live = append(f.live, id)
		c0 := childCPU()
		t0 := time.Now()
		if err := f.run(ctx, "create", "--bundle", bundle, id); err != nil {
			return err
		}
		t1 := time.Now()
		if err := f.run(ctx, "start", id); err != nil {
			return err
		}
		t2 := time.Now()
		f.create = append(f.create, t1.Sub(t0))
		f.start = append(f.start, t2.Sub(t1))
		f.both = append(f.both, t2.Sub(t0))
		if err := f.remove(ctx, id); err != nil {
			return err
		}
		f.cpu = append(f.cpu, childCPU()-c0)
	}
	return nil
}

// remove deletes container id (killing it) and its bundle.
func (f *floor) remove(ctx context.Context, id string) error {
	if err := f.run(ctx, "delete", "--force", id); err != nil {
		return err
	}
	f.live = slices.DeleteFunc(f.live, func(s string) bool { return s == id })
	return os.RemoveAll(filepath.Join(f.dir, id))
}

// cleanup deletes whatever a failed block left and the floor's dir.
func (f *floor) cleanup(ctx context.Context) error {
	var errs []error
	for _, id := range slices.Clone(f.live) {
		if err := f.remove(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}

// p50 is the floor's create + start p50 in ms.
func (f *floor) p50() float64 { return p50ms(f.both) }

// report is the floor's line under a table: its p50s, and the
// Create+StartContainer target against it.
func (f *floor) report(t table) string {
	if len(f.both) == 0 {
		return ""
	}
	line := fmt.Sprintf("floor: %s create + start alone (no daemon, monitor or network; %d samples): p50 %.1f ms (create %.1f, start %.1f)",
		filepath.Base(f.runtime), len(f.both), f.p50(), p50ms(f.create), p50ms(f.start))
	for _, r := range t.rows {
		if r.name == rowCreateStart && r.goal.kind == goalFloorPlus {
			line += fmt.Sprintf("; Create+StartContainer's target is %.1f ms (the floor + %g ms)", f.p50()+r.goal.limit, r.goal.limit)
		}
	}
	return line
}
