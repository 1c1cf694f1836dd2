package integration

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criuCheck runs `criu check` as podbayd does before a checkpoint: nil
// when CRIU can checkpoint here, else what criu says.
func criuCheck() error {
	out, err := exec.Command("criu", "check").CombinedOutput()
	if err != nil {
		return fmt.Errorf("criu check: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// archiveEntries reads a checkpoint archive's entries: name -> content
// (for the small files) or "" (for the others).
func archiveEntries(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	tr := tar.NewReader(r)
	out := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("checkpoint archive %s: %v", path, err)
		}
		var content []byte
		if hdr.Typeflag == tar.TypeReg && hdr.Size < 1<<20 {
			content, _ = io.ReadAll(tr)
		}
		out[strings.TrimSuffix(hdr.Name, "/")] = string(content)
	}
}

// readCount reads the counter the container writes to /count (retried:
// the shell truncates the file before it writes the next number).
func (e *env) readCount(t *testing.T, id string) int {
	t.Helper()
	var s string
	for range 20 {
		s = strings.TrimSpace(e.execOutput(t, id, "cat", "/count"))
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("/count in %s: %q", short(id), s)
	return 0
}

// TestCheckpointContainer checkpoints a busybox container that counts in
// a shell variable (its memory) and writes the count to /count, checks the
// archive, and restores it into another pod, where the count goes on from
// where it was, not from 0. Where the kernel and CRIU cannot checkpoint,
// it checks that CheckpointContainer says so (FailedPrecondition with
// criu's reason) and leaves nothing, and skips the rest with that reason.
func TestCheckpointContainer(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	// Before the env's leak check, also when the test skips.
	t.Cleanup(e.removeAllPods)
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "cp")
	dir := t.TempDir()
	loc := filepath.Join(dir, "counter.tar.gz")

	created := e.createContainer(t, pod, containerConfig("idle", ref, ctrShell("sleep 1000")))
	_, err := e.rt.CheckpointContainer(rpcCtx(t), &runtimeapi.CheckpointContainerRequest{ContainerId: created, Location: loc})
	if code(err) != codes.FailedPrecondition {
		t.Errorf("checkpoint of a created container: %v, want FailedPrecondition", err)
	}
	_, err = e.rt.CheckpointContainer(rpcCtx(t), &runtimeapi.CheckpointContainerRequest{ContainerId: created, Location: "relative.tar"})
	if code(err) != codes.InvalidArgument {
		t.Errorf("checkpoint to a relative location: %v, want InvalidArgument", err)
	}
	_, err = e.rt.CheckpointContainer(rpcCtx(t), &runtimeapi.CheckpointContainerRequest{ContainerId: "0123456789ab", Location: loc})
	if code(err) != codes.NotFound {
		t.Errorf("checkpoint of an unknown container: %v, want NotFound", err)
	}

	id, _ := e.runContainer(t, pod, containerConfig("counter", ref,
		ctrShell("i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.2; done")))
	if err := eventually(10*time.Second, func() error {
		if n := e.readCount(t, id); n < 30 {
			return fmt.Errorf("count %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The count in memory at the dump is at least this.
	before := e.readCount(t, id)
	_, err = e.rt.CheckpointContainer(rpcCtx(t), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: loc, Timeout: 60})
	if suiteRuntimeType == "vm" {
		if code(err) != codes.Unimplemented {
			t.Fatalf("checkpoint with a vm handler: %v, want Unimplemented", err)
		}
		t.Skipf("vm handlers do not checkpoint: %v", err)
	}
	if reason := criuCheck(); reason != nil {
		// This kernel: CRIU cannot work; podbayd says why.
		if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "CRIU cannot checkpoint on this host") {
			t.Fatalf("checkpoint where %v: %v, want FailedPrecondition with criu's reason", reason, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("a refused checkpoint left %v", ents)
		}
		if st, _ := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container after a refused checkpoint: %v", st.State)
		}
		t.Skipf("CRIU cannot checkpoint on this host; podbayd answered %v", err)
	}
	if err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}

	// The archive: CRIU's images, the spec, the metadata, the rootfs diff.
	ents := archiveEntries(t, loc)
	for _, want := range []string{"checkpoint", "checkpoint/inventory.img", "spec.dump", "config.dump", "rootfs-diff.tar"} {
		if _, ok := ents[want]; !ok {
			t.Errorf("archive has no %s", want)
		}
	}
	var meta struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		RootfsImage string `json:"rootfsImage"`
	}
	if err := json.Unmarshal([]byte(ents["config.dump"]), &meta); err != nil || meta.ID != id || meta.RootfsImage != ref {
		t.Errorf("config.dump %+v (%v), want ID %s image %s", meta, err, short(id), ref)
	}
	var spec struct {
		Process     struct{ Args []string }
		Annotations map[string]string
	}
	if err := json.Unmarshal([]byte(ents["spec.dump"]), &spec); err != nil || len(spec.Process.Args) != 3 ||
		!strings.Contains(spec.Process.Args[2], "echo $i > /count") || spec.Annotations["io.kubernetes.cri.container-name"] != "counter" {
		t.Errorf("spec.dump: process %q, annotations %v (%v)", spec.Process.Args, spec.Annotations, err)
	}
	if !strings.Contains(ents["rootfs-diff.tar"], "count") {
		t.Errorf("rootfs-diff.tar does not hold /count")
	}
	// The checkpointed container goes on running (the kubelet's
	// checkpoint leaves it running).
	if st, _ := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after checkpoint: %v", st.State)
	}
	e.stopContainer(t, id, 0)

	// Restore into another pod: the image is the archive.
	pod2 := e.runTestPod(t, "restored")
	rid := e.createContainer(t, pod2, containerConfig("counter", loc, ctrShell("exit 3")))
	if st, _ := e.containerStatus(t, rid); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("restored container after create: %v", st.State)
	}
	e.startContainer(t, rid)
	e.waitContainerState(t, rid, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
	first := e.readCount(t, rid)
	time.Sleep(time.Second)
	later := e.readCount(t, rid)
	t.Logf("counter: at least %d at the checkpoint; restored: %d, a second later %d; archive: %d entries", before, first, later, len(ents))
	if first < before || later <= first {
		t.Errorf("restored counter: %d then %d; it was at least %d at the checkpoint (a fresh start counts from 1)", first, later, before)
	}
	// Its processes are in its own cgroup: a stop kills them all.
	e.stopContainer(t, rid, 0)
	if st, _ := e.containerStatus(t, rid); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("restored container after stop: %v", st.State)
	}
}
