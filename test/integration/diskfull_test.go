package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// TestDiskFull: the daemon's root (database, image store, bundles) and
// state (runtime state, run root) directories sit on small file systems of
// their own, which the test fills. RunPodSandbox, CreateContainer and
// PullImage then fail with ResourceExhausted naming the full disk, and
// leave nothing behind; the daemon keeps serving, restarts after a kill on
// the full disk, and can stop and remove a pod made before the disk
// filled. With a little space left, each call either succeeds or fails the
// same way at whichever step ran out, and leaves nothing. Once space is
// freed the same calls succeed.
func TestDiskFull(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	for _, name := range []string{"busybox", "user-uid"} {
		push(t, r, defaultSpec(t, "test", name))
	}
	root := e.mountSmallFS(t, e.rootDir, 128<<20)
	state := e.mountSmallFS(t, e.stateDir, 32<<20)
	e.start("")
	e.waitPauseImage(t)
	busybox := r.Reference("test/busybox:latest")
	e.pullImage(t, busybox, nil)
	notPulled := r.Reference("test/user-uid:latest")

	live := e.runTestPod(t, "before-full")
	liveCtr, _ := e.runContainer(t, live, containerConfig("sleeper", busybox, ctrCommand("sleep", "600")))

	root.leave(t, 0)
	state.leave(t, 0)
	e.requireDiskFullRefused(t, live, busybox, notPulled, true)

	// Killed and restarted on the full disk: recovery must not fail
	// fatally, and the pod made before is still there.
	e.restart("")
	if pods := e.listPods(t, nil); len(pods) != 1 || pods[0].Id != live.id {
		t.Fatalf("after a restart on a full disk List has %v, want only %s", podIDs(pods), short(live.id))
	}
	if st, _ := e.containerStatus(t, liveCtr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after a restart on a full disk the container is %v, want running", st.State)
	}
	e.requireDiskFullRefused(t, live, busybox, notPulled, true)

	// A little space left on one of them: whichever step runs out fails
	// the call, and the undo of the steps before it leaves nothing.
	for _, sc := range []struct {
		name        string
		root, state int64 // bytes left free; -1: all
	}{
		{"state-full", -1, 0},
		{"root-4K", 4 << 10, -1},
		{"root-16K", 16 << 10, -1},
		{"root-32K", 32 << 10, -1},
		{"root-64K", 64 << 10, -1},
		{"root-128K", 128 << 10, -1},
		{"root-256K", 256 << 10, -1},
		{"root-2M", 2 << 20, -1},
		{"state-4K", -1, 4 << 10},
		{"state-8K", -1, 8 << 10},
		{"state-16K", -1, 16 << 10},
		{"state-64K", -1, 64 << 10},
	} {
		t.Run(sc.name, func(t *testing.T) {
			root.leave(t, sc.root)
			state.leave(t, sc.state)
			e.requireDiskFullRefused(t, live, busybox, notPulled, false)
		})
	}

	// What was made before the disk filled can be taken down on it.
	root.leave(t, 0)
	state.leave(t, 0)
	e.stopContainer(t, liveCtr, 0)
	e.removeContainer(t, liveCtr)
	e.stopAndRemove(t, live.id)
	e.assertNoLeaks(t)

	root.leave(t, -1)
	state.leave(t, -1)
	pod := e.runTestPod(t, "after-full")
	id, _ := e.runContainer(t, pod, containerConfig("sleeper", busybox, ctrCommand("sleep", "600")))
	e.pullImage(t, notPulled, nil)
	e.stopContainer(t, id, 0)
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// requireDiskFullRefused runs RunPodSandbox, CreateContainer (in live, a
// running pod) and PullImage of notPulled with little or no disk space.
// Each must fail with ResourceExhausted (or, unless mustFail, succeed, and
// is then undone), and leave no resource, record, container or image
// behind; the daemon must still answer Version and status.
func (e *env) requireDiskFullRefused(t *testing.T, live testPod, image, notPulled string, mustFail bool) {
	t.Helper()
	pods := podIDs(e.listPods(t, nil))
	ctrs := containerIDs(e.listContainers(t, nil))
	unchanged := func(after string) {
		t.Helper()
		if now := podIDs(e.listPods(t, nil)); !slices.Equal(now, pods) {
			t.Errorf("after %s List has %v, want %v", after, now, pods)
		}
		if now := containerIDs(e.listContainers(t, nil)); !slices.Equal(now, ctrs) {
			t.Errorf("after %s ListContainers has %v, want %v", after, now, ctrs)
		}
		e.assertNoLeaksExcept(t, live.id)
	}

	cfg := e.podConfig("low-disk")
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := e.tryRunPod(rpcCtx(t), cfg, "")
	if requireDiskFullError(t, "RunPodSandbox", err, mustFail) {
		e.stopPod(t, id)
		e.removePod(t, id)
	}
	unchanged("RunPodSandbox with a full disk")

	ctr, err := e.tryCreateContainer(rpcCtx(t), live, containerConfig("low-disk", image, ctrCommand("sleep", "600")))
	if requireDiskFullError(t, "CreateContainer", err, mustFail) {
		e.removeContainer(t, ctr)
		e.waitContainerReleased(t, ctr)
	}
	unchanged("CreateContainer with a full disk")

	before := e.storageState(t)
	_, err = e.tryPull(rpcCtx(t), notPulled, nil)
	if requireDiskFullError(t, "PullImage", err, mustFail) {
		e.removeImage(t, notPulled)
	}
	e.requireStorageBack(t, before, "a pull with a full disk")
	e.requireNoImage(t, notPulled)
	unchanged("PullImage with a full disk")

	if _, err := e.rt.Version(rpcCtx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version with a full disk: %v", err)
	}
	if _, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: live.id}); err != nil {
		t.Errorf("PodSandboxStatus of the live pod with a full disk: %v", err)
	}
}

// requireDiskFullError checks that err is ResourceExhausted and says why;
// unless mustFail, err may be nil. It reports whether the call succeeded.
func requireDiskFullError(t *testing.T, what string, err error, mustFail bool) bool {
	t.Helper()
	t.Logf("%s with a full disk: %v", what, err)
	if err == nil {
		if mustFail {
			t.Errorf("%s succeeded on a full disk", what)
		}
		return true
	}
	if code(err) != codes.ResourceExhausted {
		t.Errorf("%s with a full disk: code %v, want ResourceExhausted", what, code(err))
	}
	if !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("%s with a full disk: %q does not say the disk is full", what, err)
	}
	return false
}

// smallFS is a small ext4 file system, loop-mounted over one of the env's
// directories, that the test can fill and free.
type smallFS struct {
	dir     string
	ballast string // file that fills it
}

// mountSmallFS mounts a fresh ext4 file system of size bytes on dir, which
// must be empty. ext4 rather than tmpfs because a full ext4 also refuses
// new directories and files, as a real full disk does. No blocks are
// reserved for root, which the daemon runs as. The env unmounts it after
// its leak check.
func (e *env) mountSmallFS(t *testing.T, dir string, size int64) *smallFS {
	t.Helper()
	img := filepath.Join(e.dir, filepath.Base(dir)+".ext4")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v\n%s", img, err, out)
	}
	e.mountsBefore[dir] = true
	e.ownMounts = append(e.ownMounts, dir)
	// lost+found would be taken for something the daemon left.
	if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil {
		t.Fatal(err)
	}
	return &smallFS{dir: dir, ballast: filepath.Join(dir, "ballast")}
}

// unmountOwn unmounts the env's own file systems that forceClean has not
// already detached; their loop devices go with them.
func (e *env) unmountOwn() {
	mounted := map[string]bool{}
	for _, m := range mountPoints(e.t) {
		mounted[m] = true
	}
	for i := len(e.ownMounts) - 1; i >= 0; i-- {
		dir := e.ownMounts[i]
		if !mounted[dir] {
			continue
		}
		for _, m := range mountsUnder(e.t, dir) {
			syscall.Unmount(m, syscall.MNT_DETACH) //nolint:errcheck // a leak the check reported
		}
		if err := syscall.Unmount(dir, 0); err != nil {
			e.t.Errorf("unmount %s: %v", dir, err)
		}
	}
	e.ownMounts = nil
}

// leave fills the file system with the ballast until only free bytes are
// left (rounded to blocks); free < 0 removes the ballast.
func (d *smallFS) leave(t *testing.T, free int64) {
	t.Helper()
	if err := os.Remove(d.ballast); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if free < 0 {
		return
	}
	f, err := os.OpenFile(d.ballast, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4096, 1} {
		buf := make([]byte, chunk)
		for {
			_, err := f.Write(buf)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatal(err)
		}
	}
	if free == 0 {
		// Nothing more fits: not a file, not a directory.
		if err := os.Mkdir(filepath.Join(d.dir, "probe"), 0o755); !errors.Is(err, syscall.ENOSPC) {
			os.Remove(filepath.Join(d.dir, "probe"))
			t.Fatalf("%s is not full: mkdir: %v (%s)", d.dir, err, df(d.dir))
		}
	} else {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(max(0, st.Size()-free)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: %s", d.dir, df(d.dir))
}

// df is a file system's free space, for messages.
func df(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d blocks of %d free, %d inodes free", st.Bavail, st.Blocks, st.Ffree)
}

// waitContainerReleased waits until the background release that follows
// RemoveContainer has removed id's directory (its root filesystem, the
// storage layer included, goes before it), so that a storage snapshot
// taken next does not race it.
func (e *env) waitContainerReleased(t *testing.T, id string) {
	t.Helper()
	dir := filepath.Join(e.rootDir, "containers", id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: %s still there 30s after RemoveContainer", short(id), dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
