package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/runtime"
)

// The fakes checkpoint: the runtime writes a CRIU image file, the image
// store reports /bin/sh modified and /gone deleted.

func (f *fakeImages) RootfsChanges(ctx context.Context, id string) ([]checkpoint.Change, error) {
	return []checkpoint.Change{{Path: "/bin/sh", Kind: checkpoint.Modified}, {Path: "/gone", Kind: checkpoint.Deleted}}, nil
}

func (f *fakeRuntime) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("checkpoint", id); err != nil {
		return err
	}
	if !opts.LeaveRunning {
		return errors.New("checkpoint would stop the container")
	}
	return os.WriteFile(filepath.Join(opts.ImagePath, "pages-1.img"), []byte("memory of "+id), 0o600)
}

func (f *fakeRuntime) Restore(ctx context.Context, opts runtime.CreateOptions, imagePath string) (int, error) {
	if b, err := os.ReadFile(filepath.Join(imagePath, "pages-1.img")); err != nil || !strings.HasPrefix(string(b), "memory of ") {
		return 0, fmt.Errorf("restore from %s: %q, %v", imagePath, b, err)
	}
	pid, err := f.Create(ctx, opts)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[opts.ID] = runtime.StatusRunning
	return pid, f.enter("restore", opts.ID)
}

// plainRuntime hides the fake's Checkpoint and Restore: a handler that
// cannot (a vm handler).
type plainRuntime struct{ runtime.Runtime }

// fakeCRIU points criuPath at a script that passes or fails `criu check`.
func fakeCRIU(t *testing.T, ok bool) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "criu")
	script := "#!/bin/sh\necho Looks good.\n"
	if !ok {
		script = "#!/bin/sh\necho 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds' >&2\nexit 1\n"
	}
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := criuPath
	criuPath = bin
	t.Cleanup(func() { criuPath = old })
}

func (e *testEnv) checkpoint(id, location string) error {
	_, err := call(e.srv, "CheckpointContainer", e.srv.CheckpointContainer,
		&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location, Timeout: 30})
	return err
}

func TestCheckpointContainerRefusals(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	dir := t.TempDir()
	loc := filepath.Join(dir, "cp.tar")
	fakeCRIU(t, true)

	wantStatus(t, "created container", e.checkpoint(id, loc), codes.FailedPrecondition)
	e.startFakeContainer(t, id)
	wantStatus(t, "no id", e.checkpoint("", loc), codes.InvalidArgument)
	wantStatus(t, "no location", e.checkpoint(id, ""), codes.InvalidArgument)
	wantStatus(t, "relative location", e.checkpoint(id, "cp.tar"), codes.InvalidArgument)
	wantStatus(t, "unknown container", e.checkpoint("nope", loc), codes.NotFound)
	wantStatus(t, "missing directory", e.checkpoint(id, filepath.Join(dir, "missing", "cp.tar")), codes.InvalidArgument)
	wantStatus(t, "directory location", e.checkpoint(id, dir), codes.InvalidArgument)
	_, err := call(e.srv, "CheckpointContainer", e.srv.CheckpointContainer,
		&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: loc, Timeout: -1})
	wantStatus(t, "negative timeout", err, codes.InvalidArgument)

	e.rt.failOn("checkpoint", errors.New("criu failed: type DUMP errno 0"))
	err = e.checkpoint(id, loc)
	if err == nil || !strings.Contains(err.Error(), "criu failed") {
		t.Errorf("failed runtime checkpoint: %v", err)
	}
	e.rt.failOn("checkpoint", nil)

	fakeCRIU(t, false)
	err = e.checkpoint(id, loc)
	wantStatus(t, "criu check fails", err, codes.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "vDSO area bounds") {
		t.Errorf("criu's reason not given: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed checkpoints left %v", ents)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.cfg.Root, "containers", id, "checkpoint-*")); len(ents) != 0 {
		t.Errorf("staging dirs left: %v", ents)
	}

	// A handler that cannot checkpoint.
	e.runtimes["runc"] = plainRuntime{e.rt}
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	fakeCRIU(t, true)
	wantStatus(t, "handler without checkpoint", e.checkpoint(id, loc), codes.Unimplemented)
}

func TestCheckpointAndRestoreOnFakes(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod := e.podWithImage(t, "web")
	cfg := containerConfig("counter")
	cfg.Command = []string{"sh", "-c", "count"}
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b=c")}}
	id := e.mustCreate(t, pod, cfg)
	e.startFakeContainer(t, id)
	rootfs := e.img.rootfses[id]
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "sh"), []byte("patched"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cp.tar", "cp.tar.gz"} {
		loc := filepath.Join(t.TempDir(), name)
		if err := e.checkpoint(id, loc); err != nil {
			t.Fatalf("CheckpointContainer: %v", err)
		}
		if st := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("after checkpoint: %v", st.State)
		}
		out := t.TempDir()
		meta, err := checkpoint.Extract(loc, out)
		if err != nil {
			t.Fatal(err)
		}
		if meta.ID != id || !strings.HasPrefix(meta.Name, "k8s_counter_web_") || meta.RootfsImage != "busybox" ||
			!strings.HasPrefix(meta.RootfsImageRef, "sha256:") || meta.CheckpointedAt.IsZero() || meta.OCIRuntime != "runc" {
			t.Errorf("config.dump: %+v", meta)
		}
		var deleted []string
		if err := checkpoint.ReadJSON(out, checkpoint.DeletedFilesFile, &deleted); err != nil || len(deleted) != 1 || deleted[0] != "/gone" {
			t.Errorf("deleted.files: %v, %v", deleted, err)
		}
		spec, err := os.ReadFile(filepath.Join(out, checkpoint.SpecDumpFile))
		if err != nil || !strings.Contains(string(spec), `"io.kubernetes.cri.container-name": "counter"`) {
			t.Errorf("spec.dump: %v\n%s", err, spec)
		}
		for _, f := range []string{"checkpoint/pages-1.img", checkpoint.RootFsDiffTar} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Error(err)
			}
		}
		if checkpoint.Compressed(loc) != strings.HasSuffix(name, ".gz") {
			t.Errorf("%s compression", name)
		}

		// Restore into another pod, with the archive as the image.
		pod2 := e.mustRun(t, podConfig("restored-"+strings.ReplaceAll(name, ".", "-")))
		rcfg := containerConfig("counter")
		rcfg.Image = &runtimeapi.ImageSpec{Image: loc}
		rcfg.Command = []string{"true"}
		rid := e.mustCreate(t, pod2, rcfg)
		st := e.containerStatus(t, rid)
		if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Image.GetImage() != "busybox" {
			t.Errorf("restored container: %v %v", st.State, st.Image)
		}
		if b, _ := os.ReadFile(filepath.Join(e.img.rootfses[rid], "bin", "sh")); string(b) != "patched" {
			t.Errorf("rootfs diff not applied: /bin/sh = %q", b)
		}
		rc, err := e.srv.containers.Get(rid)
		if err != nil {
			t.Fatal(err)
		}
		if raw := string(rc.Record().Config); !strings.Contains(raw, `"count"`) || !strings.Contains(raw, base64.StdEncoding.EncodeToString([]byte("b=c"))) { // env values are bytes
			t.Errorf("restored config: %s", raw)
		}
		e.startFakeContainer(t, rid)
		if e.rt.called("restore", rid) != 1 || e.rt.called("start", rid) != 0 {
			t.Errorf("start of a restored container: %v", e.rt.calls)
		}
		if st := e.containerStatus(t, rid); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("after restore: %v", st.State)
		}
		if _, err := os.Stat(filepath.Join(e.cfg.Root, "containers", rid, restoreDir)); err == nil {
			t.Error("restore dir kept after the restore")
		}
	}

	// Not a checkpoint: a file that is no archive.
	bad := filepath.Join(t.TempDir(), "bad.tar")
	if err := os.WriteFile(bad, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	rcfg := containerConfig("bad")
	rcfg.Image = &runtimeapi.ImageSpec{Image: bad}
	_, err := e.create(pod, rcfg)
	wantStatus(t, "create from a non-archive", err, codes.InvalidArgument)
}

// A container created from a checkpoint stays created across a daemon
// restart (its runtime container is made only by the restore), and its
// StartContainer then restores it.
func TestRestoredContainerSurvivesRestart(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	e.startFakeContainer(t, id)
	loc := filepath.Join(t.TempDir(), "cp.tar")
	if err := e.checkpoint(id, loc); err != nil {
		t.Fatal(err)
	}
	rcfg := containerConfig("c")
	rcfg.Image = &runtimeapi.ImageSpec{Image: loc}
	pod2 := e.mustRun(t, podConfig("other"))
	rid := e.mustCreate(t, pod2, rcfg)

	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	if st := e.containerStatus(t, rid); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("restored container after a daemon restart: %v %q", st.State, st.Message)
	}
	e.startFakeContainer(t, rid)
	if e.rt.called("restore", rid) != 1 {
		t.Errorf("runtime calls: %v", e.rt.calls)
	}
	if st := e.containerStatus(t, rid); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after restore: %v", st.State)
	}
}
