package oci

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/test/testbundle"
)

// Stop with SIGKILL and no grace kills every process of the container: an
// init that is pid 1 of its own pid namespace through its pidfd alone (the
// kernel takes the namespace's processes with it), without running the
// runtime; one in the host's pid namespace, whose children outlive it,
// through the runtime's kill --all of its cgroup.
func TestIntegrationKillAll(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hostPID     bool
		runtimeKill bool
	}{
		{"own pid namespace", false, false},
		{"host pid namespace", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ctx := newTestEnv(t, time.Minute)
			calls := filepath.Join(e.dir, "runtime-calls")
			wrapper := filepath.Join(e.dir, "runc-logged")
			script := "#!/bin/sh\necho \"$*\" >> " + calls + "\nexec " + runcPath + " \"$@\"\n"
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			e.cfg.RuntimePath = wrapper
			e.rt = e.newRuntime()

			id := e.newID("killall")
			bundle := e.bundle(id, func(s *specs.Spec) {
				if tc.hostPID {
					s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
						return ns.Type == specs.PIDNamespace
					})
				}
			}, "sh", "-c", "sleep 100 & sleep 100 & wait")
			pid := e.create(ctx, e.rt, runtime.CreateOptions{ID: id, BundleDir: bundle})
			if err := e.rt.Start(ctx, id); err != nil {
				t.Fatalf("Start: %v", err)
			}
			testbundle.WaitForChild(t, pid, "sleep")

			if err := e.rt.Stop(ctx, id, 0, syscall.SIGKILL); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			testbundle.CheckNoProcesses(t, id)
			data, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			killed := strings.Contains(string(data), " kill ")
			if killed != tc.runtimeKill {
				t.Errorf("runtime's kill run: %v, want %v; runtime calls:\n%s", killed, tc.runtimeKill, data)
			}
		})
	}
}
