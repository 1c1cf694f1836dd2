package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/store"
)

// TestBundlesOnStateDir: a pod's and a container's OCI bundles are under
// the state dir (<state>/bundles/<id>), as containerd's and CRI-O's are
// on a tmpfs, and nothing of them is under the root; exec works from
// there; removal takes them, and a bundle dir no record owns is removed
// at the next start.
func TestBundlesOnStateDir(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "bundles")
	ctr, _ := e.runContainer(t, pod, containerConfig("sleeper", images.ref("busybox"), ctrCommand("sleep", "1000")))

	podBundle, ctrBundle := e.bundleDir(pod.id), e.bundleDir(ctr)
	if _, info := e.status(t, pod.id); info.Bundle != podBundle {
		t.Errorf("pod bundle %q, want %q", info.Bundle, podBundle)
	}
	if _, info := e.containerStatus(t, ctr); info.Bundle != ctrBundle || len(info.RuntimeSpec) == 0 {
		t.Errorf("container bundle %q (spec %d bytes), want %q with its spec", info.Bundle, len(info.RuntimeSpec), ctrBundle)
	}
	for _, dir := range []string{podBundle, ctrBundle} {
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
			t.Errorf("bundle config: %v", err)
		}
	}
	for _, dir := range []string{filepath.Join(e.rootDir, "sandboxes", pod.id, "bundle"), filepath.Join(e.rootDir, "containers", ctr, "bundle")} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("bundle under the root %s: %v, want none", dir, err)
		}
	}
	// ExecSync's process dir is made in the bundle.
	if out := e.execSync(t, ctr, 10, "echo", "alive"); strings.TrimSpace(string(out.Stdout)) != "alive" {
		t.Errorf("exec: %q", out.Stdout)
	}

	// A bundle dir no record owns (a crash between a removal's steps) is
	// collected at start.
	orphan := e.bundleDir(randHex(32))
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	e.restart("")
	if err := eventually(containerStateTimeout, func() error {
		if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
			return errors.New("orphaned bundle dir still there")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	e.stopContainer(t, ctr, 0)
	e.removeContainer(t, ctr)
	e.stopAndRemove(t, pod.id)
	for _, dir := range []string{podBundle, ctrBundle} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("bundle %s after removal: %v, want gone", dir, err)
		}
	}
	e.assertNoLeaks(t)
}

// TestBundlesOfOldRecords: a pod and a container made by a podbay that
// kept bundles in their dirs under the root (records without "bundle")
// are found there after an upgrade: status shows the bundle and its spec,
// and removal takes them and their dirs.
func TestBundlesOfOldRecords(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "old-bundles")
	ctr, _ := e.runContainer(t, pod, containerConfig("sleeper", images.ref("busybox"), ctrCommand("sleep", "1000")))
	// Stopped: a running container's monitor keeps its bundle's path.
	e.stopPod(t, pod.id)

	e.stop()
	oldBundle := map[string]string{
		pod.id: filepath.Join(e.rootDir, "sandboxes", pod.id, "bundle"),
		ctr:    filepath.Join(e.rootDir, "containers", ctr, "bundle"),
	}
	for id, old := range oldBundle {
		if out, err := exec.Command("mv", e.bundleDir(id), old).CombinedOutput(); err != nil {
			t.Fatalf("move bundle of %s: %v: %s", short(id), err, out)
		}
		// conmon's attach link, where an older podbay's conmon made it.
		if link := filepath.Join(e.stateDir, "attach", id); linkExists(link) {
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(old, link); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.stripRecordField(t, "bundle", map[string]string{pod.id: "sandboxes", ctr: "containers"})
	e.start("")

	if _, info := e.status(t, pod.id); info.Bundle != oldBundle[pod.id] {
		t.Errorf("old pod's bundle %q, want %q", info.Bundle, oldBundle[pod.id])
	}
	st, info := e.containerStatus(t, ctr)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || info.Bundle != oldBundle[ctr] || len(info.RuntimeSpec) == 0 {
		t.Errorf("old container: %v, bundle %q (spec %d bytes), want exited, %q with its spec", st.State, info.Bundle, len(info.RuntimeSpec), oldBundle[ctr])
	}
	e.removeContainer(t, ctr)
	e.removePod(t, pod.id)
	for _, dir := range []string{filepath.Join(e.rootDir, "sandboxes", pod.id), filepath.Join(e.rootDir, "containers", ctr)} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after removal: %v, want gone", dir, err)
		}
	}
	e.assertNoLeaks(t)
}

// TestBundlesGoneAfterReboot: a reboot empties the state dir, bundles and
// all; the records of a stopped container and pod, whose bundles are
// gone, are still listed, their status works, and they are removed.
func TestBundlesGoneAfterReboot(t *testing.T) {
	if suiteRuntimeType == "vm" {
		// A vm pod's shim outlives StopPodSandbox (it is deleted at
		// RemovePodSandbox) and serves its stopped containers from their
		// bundles; a reboot ends it with the bundles, which deleting the
		// bundles alone would not.
		t.Skip("a reboot also ends the vm pod's shim, which this test does not simulate")
	}
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "rebooted")
	ctr, _ := e.runContainer(t, pod, containerConfig("sleeper", images.ref("busybox"), ctrCommand("sleep", "1000")))
	e.stopContainer(t, ctr, 0)

	e.stop()
	if err := os.RemoveAll(e.bundleDir(ctr)); err != nil {
		t.Fatal(err)
	}
	e.start("")
	if got := e.listContainers(t, &runtimeapi.ContainerFilter{Id: ctr}); len(got) != 1 || got[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("ListContainers after the bundle is gone: %v, want the exited container", got)
	}
	if st, info := e.containerStatus(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || len(info.RuntimeSpec) != 0 {
		t.Errorf("container whose bundle is gone: %v, spec %d bytes; want exited, no spec", st.State, len(info.RuntimeSpec))
	}
	e.removeContainer(t, ctr)
	if got := e.listContainers(t, &runtimeapi.ContainerFilter{Id: ctr}); len(got) != 0 {
		t.Errorf("ListContainers after remove: %v", got)
	}

	// The same for a stopped pod.
	e.stopPod(t, pod.id)
	e.stop()
	if err := os.RemoveAll(e.bundleDir(pod.id)); err != nil {
		t.Fatal(err)
	}
	e.start("")
	if st, _ := e.status(t, pod.id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod whose bundle is gone: %v, want not ready", st.State)
	}
	e.removePod(t, pod.id)
	e.assertNoLeaks(t)
}

// bundleDir is where the daemon keeps the OCI bundle of a new pod or
// container id.
func (e *env) bundleDir(id string) string { return filepath.Join(e.stateDir, "bundles", id) }

func linkExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// stripRecordField removes field from the records of ids (id -> bucket),
// as an older podbay wrote them; the daemon must be down.
func (e *env) stripRecordField(t *testing.T, field string, ids map[string]string) {
	t.Helper()
	db, err := store.Open(filepath.Join(e.rootDir, "podbay.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, bucket := range ids {
		var rec map[string]json.RawMessage
		version, err := db.Get(bucket, id, &rec)
		if err != nil {
			t.Fatal(err)
		}
		if rec[field] == nil {
			t.Fatalf("%s record %s has no %q", bucket, short(id), field)
		}
		delete(rec, field)
		if err := db.Put(bucket, id, version, rec); err != nil {
			t.Fatal(err)
		}
	}
}
