package shim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/test/testbundle"
)

// A create cut short: runc create killed after it made its state directory
// (with exec.fifo, before state.json) and started "runc init" in the
// container's cgroup. The shim cancels a Create whose connection is lost
// (the daemon killed) and so leaves exactly that, which runc does not list
// and the shim does not know. These tests make it with a runc wrapper, the
// test binary itself, that stalls in create of a bundle marked cutShortMark.

const (
	fakeRuncEnv     = "PODBAY_SHIM_TEST_FAKE_RUNC"
	createHelperEnv = "PODBAY_SHIM_TEST_CREATE_HELPER"
	// cutShortMark in a bundle makes the fake runc stall in its create;
	// it writes cutShortReady there once the state and cgroup are made.
	cutShortMark  = "cut-short"
	cutShortReady = "cut-short.ready"
)

// fakeRunc is runc, except for a create of a marked bundle: it makes
// runc's state directory with exec.fifo and a process standing for "runc
// init" in the container's cgroup, then waits to be killed (or for its
// parent, the shim, to die).
func fakeRunc(args []string) int {
	var root, bundle, sub string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case strings.Contains(a, "="):
		case (a == "--root" || a == "--bundle" || a == "-b" || a == "--log" || a == "--log-format" ||
			a == "--pid-file" || a == "--console-socket") && i+1 < len(args):
			switch a {
			case "--root":
				root = args[i+1]
			case "--bundle", "-b":
				bundle = args[i+1]
			}
			i++
		case sub == "" && !strings.HasPrefix(a, "-"):
			sub = a
		}
	}
	if sub != "create" || bundle == "" {
		return execRunc(args)
	}
	if _, err := os.Stat(filepath.Join(bundle, cutShortMark)); err != nil {
		return execRunc(args)
	}
	id := args[len(args)-1]
	if err := cutShortCreate(root, bundle, id); err != nil {
		fmt.Fprintln(os.Stderr, "fake runc:", err)
		return 1
	}
	parent := os.Getppid()
	for os.Getppid() == parent {
		time.Sleep(20 * time.Millisecond)
	}
	return 1
}

func cutShortCreate(root, bundle, id string) error {
	state := filepath.Join(root, id)
	if err := os.MkdirAll(state, 0o711); err != nil {
		return err
	}
	if err := syscall.Mkfifo(filepath.Join(state, "exec.fifo"), 0o622); err != nil {
		return err
	}
	spec, err := runtime.ReadSpec(bundle)
	if err != nil {
		return err
	}
	initProc := exec.Command(filepath.Join(bundle, "rootfs", "bin", "busybox"), "sleep", "1000")
	initProc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := initProc.Start(); err != nil {
		return err
	}
	if err := cgroups.MoveProcess(initProc.Process.Pid, spec.Linux.CgroupsPath); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, cutShortReady), nil, 0o644)
}

func execRunc(args []string) int {
	err := syscall.Exec(runcPath, append([]string{runcPath}, args...), os.Environ())
	fmt.Fprintln(os.Stderr, "fake runc:", err)
	return 1
}

// createHelper is a daemon that creates one sandbox container and is
// killed during the create: the environment names the state, runc root,
// runc binary, ID and bundle.
func createHelper() int {
	opts, err := RuncOptions(os.Getenv("HELPER_RUNC"), os.Getenv("HELPER_RUNC_ROOT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := New(Config{Name: "shim-test", ShimPath: shimBinary, StateDir: os.Getenv("HELPER_STATE"), Namespace: testNamespace, Options: opts})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = r.Create(context.Background(), runtime.CreateOptions{ID: os.Getenv("HELPER_ID"), BundleDir: os.Getenv("HELPER_BUNDLE"), MonitorCgroup: shimCgroup})
	fmt.Fprintln(os.Stderr, "create returned:", err)
	return 1
}

// useFakeRunc makes e's shims run the test binary as their runc.
func (e *testEnv) useFakeRunc() string {
	e.t.Helper()
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	wrapper := filepath.Join(e.dir, "fake-runc")
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %s \"$@\"\n", fakeRuncEnv, self)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if e.cfg.Options, err = RuncOptions(wrapper, e.runcRoot); err != nil {
		e.t.Fatal(err)
	}
	return wrapper
}

// waitCutShort waits for the fake runc to have made its state in bundle.
func waitCutShort(t *testing.T, bundle string) {
	t.Helper()
	// Whatever the test finds, its "runc init" does not outlive it.
	t.Cleanup(func() { _ = runtime.RemoveSpecCgroup(context.Background(), bundle, nil) })
	if !testbundle.WaitFor(30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(bundle, cutShortReady))
		return err == nil
	}) {
		t.Fatal("the fake runc did not get to its create")
	}
}

// assertCutShortGone checks that what the cut-short create of id made is
// gone: runc's state directory, the container's cgroup and its "runc init".
func (e *testEnv) assertCutShortGone(id string) {
	t := e.t
	t.Helper()
	if _, err := os.Lstat(filepath.Join(e.runcRoot, testNamespace, id)); err == nil {
		t.Errorf("runc state of %s left", id)
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, ent := range entries {
		cg := filepath.Join("/sys/fs/cgroup", ent.Name(), testCgroupParent, id)
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup left: %s", cg)
		}
	}
	if !testbundle.WaitFor(5*time.Second, func() bool { return len(testbundle.ProcessesOf(id)) == 0 }) {
		t.Errorf("processes left: %q", testbundle.ProcessesOf(id))
	}
}

// TestIntegrationDaemonKilledDuringCreate kills the daemon while its
// shim runs the sandbox's runc create: the shim cancels the create, which
// leaves runc's state and the cgroup; a restarted Runtime finds a task
// its shim does not know, and Delete must remove them.
func TestIntegrationDaemonKilledDuringCreate(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	if err := e.rt.Close(); err != nil {
		t.Fatal(err)
	}
	wrapper := e.useFakeRunc()
	id := e.newID("pod")
	e.pods = append(e.pods, id)
	bundle := e.bundle(id, id, nil, "sleep", "1000")
	if err := os.WriteFile(filepath.Join(bundle, cutShortMark), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(self)
	helper.Env = append(os.Environ(), createHelperEnv+"=1",
		"HELPER_STATE="+e.cfg.StateDir, "HELPER_RUNC="+wrapper, "HELPER_RUNC_ROOT="+e.runcRoot,
		"HELPER_ID="+id, "HELPER_BUNDLE="+bundle)
	var out strings.Builder
	helper.Stdout, helper.Stderr = &out, &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	waitCutShort(t, bundle)
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	t.Logf("helper daemon: %s", out.String())

	r := e.newRuntime()
	if exit, ok, err := r.Exited(id); err != nil || !ok {
		t.Errorf("Exited after restart = %+v, %v, %v; want exited", exit, ok, err)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.assertCutShortGone(id)
}

// TestIntegrationShimKilledDuringCreate kills the shim while it runs a
// container's runc create: Create fails, and its rollback must remove what
// the create left, which no shim knows any more.
func TestIntegrationShimKilledDuringCreate(t *testing.T) {
	e, ctx := newTestEnv(t, time.Minute)
	if err := e.rt.Close(); err != nil {
		t.Fatal(err)
	}
	e.useFakeRunc()
	r := e.newRuntime()
	pod := e.startPod(ctx, r, "pod")
	id, opts := e.newContainer(pod, "victim", nil, "sleep", "1000")
	if err := os.WriteFile(filepath.Join(opts.BundleDir, cutShortMark), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() {
		_, err := r.Create(ctx, opts)
		created <- err
	}()
	waitCutShort(t, opts.BundleDir)
	for _, pid := range shimsOf(pod) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-created; err == nil {
		t.Fatal("Create succeeded although its shim was killed")
	}
	e.assertCutShortGone(id)
	if err := r.Delete(ctx, pod); err != nil {
		t.Errorf("Delete pod: %v", err)
	}
}
