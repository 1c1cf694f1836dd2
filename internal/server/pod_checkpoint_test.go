package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/runtime"
)

// The fake pauses and resumes: "pause id" and "resume id" calls; as a real
// runtime's command, neither runs once ctx is done.

func (f *fakeRuntime) Pause(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("pause", id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.containers[id] = runtime.StatusPaused
	return nil
}

func (f *fakeRuntime) Resume(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("resume", id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.containers[id] = runtime.StatusRunning
	return nil
}

// failingCheckpoint fails the checkpoint of one container: a failure in
// the middle of a pod checkpoint.
type failingCheckpoint struct {
	*fakeRuntime
	id string
}

func (f failingCheckpoint) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	if id == f.id {
		f.mu.Lock()
		_ = f.enter("checkpoint", id)
		f.mu.Unlock()
		return errors.New("criu failed: type DUMP errno 0")
	}
	return f.fakeRuntime.Checkpoint(ctx, id, opts)
}

// noPause is a handler that checkpoints but cannot pause.
type noPause struct {
	runtime.Runtime
	runtime.Checkpointer
}

func (e *testEnv) checkpointPod(pod, out string, ids ...string) error {
	_, err := call(e.srv, "CheckpointPod", e.srv.CheckpointPod,
		&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids})
	return err
}

// runningPod runs a pod with running containers of the given names.
func (e *testEnv) runningPod(t *testing.T, name string, ctrs ...string) (string, []string) {
	t.Helper()
	pod := e.podWithImage(t, name)
	var ids []string
	for _, c := range ctrs {
		id := e.mustCreate(t, pod, containerConfig(c))
		e.startFakeContainer(t, id)
		ids = append(ids, id)
	}
	return pod, ids
}

// callsOf returns the runtime's calls of the given verbs, in order.
func (f *fakeRuntime) callsOf(verbs ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if v, _, _ := strings.Cut(c, " "); slices.Contains(verbs, v) {
			out = append(out, c)
		}
	}
	return out
}

func TestCheckpointPodFreezesThenRestores(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod, ids := e.runningPod(t, "web", "a", "b", "c")
	out := t.TempDir()
	if err := e.checkpointPod(pod, out, ids[1], ids[0]); err != nil {
		t.Fatalf("CheckpointPod: %v", err)
	}
	got := e.rt.callsOf("pause", "checkpoint", "resume")
	sorted := slices.Sorted(slices.Values(ids[:2]))
	want := []string{"pause " + sorted[0], "pause " + sorted[1], "checkpoint " + sorted[0], "checkpoint " + sorted[1], "resume " + sorted[0], "resume " + sorted[1]}
	if !slices.Equal(got, want) {
		t.Errorf("runtime calls: %v, want %v", got, want)
	}
	for _, id := range ids {
		if st := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("%s after the pod checkpoint: %v", id, st.State)
		}
	}
	p, err := checkpoint.ReadPod(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != pod || len(p.Containers) != 2 || !strings.Contains(string(p.Config), `"web-uid"`) {
		t.Errorf("pod.json: %+v", p)
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 3 {
		t.Errorf("output holds %v", ents)
	}
	meta, _, err := checkpoint.ReadMeta(filepath.Join(out, "a.tar"))
	if err != nil || meta.ID != ids[0] {
		t.Errorf("a.tar: %+v %v", meta, err)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.cfg.Root, "containers", "*", "checkpoint-*")); len(ents) != 0 {
		t.Errorf("staging dirs left: %v", ents)
	}

	// Restore: a new pod, the containers created, not started.
	resp, err := call(e.srv, "RestorePod", e.srv.RestorePod, &runtimeapi.RestorePodRequest{
		CheckpointPath:   out,
		Config:           podConfig("web-restored"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("b"), containerConfig("a")},
	})
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	if resp.PodSandboxId == "" || resp.PodSandboxId == pod || len(resp.RestoredContainers) != 2 ||
		resp.RestoredContainers[0].Name != "b" || resp.RestoredContainers[1].Name != "a" {
		t.Fatalf("RestorePod: %v", resp)
	}
	st, err := call(e.srv, "PodSandboxStatus", e.srv.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId})
	if err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("restored pod: %v %v", st, err)
	}
	for _, rc := range resp.RestoredContainers {
		cs := e.containerStatus(t, rc.ContainerId)
		if cs.State != runtimeapi.ContainerState_CONTAINER_CREATED || cs.Metadata.Name != rc.Name || cs.Image.GetImage() != "busybox" {
			t.Errorf("restored %s: %v %v", rc.Name, cs.State, cs.Image)
		}
		if e.rt.called("restore", rc.ContainerId) != 0 {
			t.Errorf("%s restored before StartContainer", rc.Name)
		}
	}
	e.startFakeContainer(t, resp.RestoredContainers[1].ContainerId)
	if e.rt.called("restore", resp.RestoredContainers[1].ContainerId) != 1 {
		t.Errorf("start of a restored container: %v", e.rt.calls)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 3 {
		t.Errorf("restore changed the checkpoint: %v", ents)
	}
}

func TestCheckpointPodFailureInTheMiddle(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod, ids := e.runningPod(t, "web", "a", "b", "c")
	sorted := slices.Sorted(slices.Values(ids))
	e.runtimes["runc"] = failingCheckpoint{e.rt, sorted[1]}
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	out := t.TempDir()
	err := e.checkpointPod(pod, out, ids...)
	if err == nil || !strings.Contains(err.Error(), "criu failed") {
		t.Fatalf("CheckpointPod with a failing container: %v", err)
	}
	got := e.rt.callsOf("pause", "checkpoint", "resume")
	want := []string{"pause " + sorted[0], "pause " + sorted[1], "pause " + sorted[2],
		"checkpoint " + sorted[0], "checkpoint " + sorted[1],
		"resume " + sorted[0], "resume " + sorted[1], "resume " + sorted[2]}
	if !slices.Equal(got, want) {
		t.Errorf("runtime calls: %v, want %v", got, want)
	}
	for _, id := range ids {
		if st, _ := e.rt.State(context.Background(), id); st.Status != runtime.StatusRunning {
			t.Errorf("%s left %s", id, st.Status)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("failed pod checkpoint left %v", ents)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.cfg.Root, "containers", "*", "checkpoint-*")); len(ents) != 0 {
		t.Errorf("staging dirs left: %v", ents)
	}

	// A pause that fails: those paused so far are resumed.
	e.rt.calls = nil
	e.rt.failOn("pause", errors.New("freezer: device busy"))
	if err := e.checkpointPod(pod, out, ids...); err == nil || !strings.Contains(err.Error(), "device busy") {
		t.Errorf("failing pause: %v", err)
	}
	if got := e.rt.callsOf("pause", "checkpoint", "resume"); !slices.Equal(got, []string{"pause " + sorted[0], "resume " + sorted[0]}) {
		t.Errorf("runtime calls after a failed pause: %v", got)
	}
}

func TestCheckpointPodRefusals(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod, ids := e.runningPod(t, "web", "a", "b")
	created := e.mustCreate(t, pod, containerConfig("created"))
	other, oids := e.runningPod(t, "other", "x")
	out := t.TempDir()

	wantStatus(t, "no pod", e.checkpointPod("", out, ids...), codes.InvalidArgument)
	wantStatus(t, "unknown pod", e.checkpointPod("nope", out, ids...), codes.NotFound)
	wantStatus(t, "no output", e.checkpointPod(pod, "", ids...), codes.InvalidArgument)
	wantStatus(t, "relative output", e.checkpointPod(pod, "out", ids...), codes.InvalidArgument)
	wantStatus(t, "missing output", e.checkpointPod(pod, filepath.Join(out, "missing"), ids...), codes.InvalidArgument)
	wantStatus(t, "no containers", e.checkpointPod(pod, out), codes.InvalidArgument)
	wantStatus(t, "repeated container", e.checkpointPod(pod, out, ids[0], ids[0]), codes.InvalidArgument)
	wantStatus(t, "unknown container", e.checkpointPod(pod, out, ids[0], "nope"), codes.NotFound)
	wantStatus(t, "container of another pod", e.checkpointPod(pod, out, ids[0], oids[0]), codes.InvalidArgument)
	wantStatus(t, "container not running", e.checkpointPod(pod, out, ids[0], created), codes.FailedPrecondition)
	_, err := call(e.srv, "CheckpointPod", e.srv.CheckpointPod, &runtimeapi.CheckpointPodRequest{
		PodSandboxId: pod, OutputPath: out, ContainerIds: ids, Options: map[string]string{"tcp-established": "true"}})
	wantStatus(t, "options", err, codes.InvalidArgument)
	file := filepath.Join(out, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "output is a file", e.checkpointPod(pod, file, ids...), codes.InvalidArgument)
	wantStatus(t, "output not empty", e.checkpointPod(pod, out, ids...), codes.FailedPrecondition)
	os.Remove(file)

	fakeCRIU(t, false)
	err = e.checkpointPod(pod, out, ids...)
	wantStatus(t, "criu check fails", err, codes.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "vDSO area bounds") {
		t.Errorf("criu's reason not given: %v", err)
	}
	fakeCRIU(t, true)
	if _, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: other}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "pod not ready", e.checkpointPod(other, out, oids...), codes.FailedPrecondition)
	if got := e.rt.callsOf("pause", "checkpoint"); len(got) != 0 {
		t.Errorf("refused checkpoints reached the runtime: %v", got)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("refused checkpoints left %v", ents)
	}

	// Handlers that cannot: no checkpoint (a vm handler), no pause.
	for name, rt := range map[string]runtime.Runtime{"no checkpoint": plainRuntime{e.rt}, "no pause": noPause{e.rt, e.rt}} {
		e.runtimes["runc"] = rt
		e.srv.Shutdown(context.Background())
		e.srv = e.newServer(t, nil)
		wantStatus(t, name, e.checkpointPod(pod, out, ids...), codes.Unimplemented)
	}
}

func TestRestorePodRefusalsAndCleanup(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod, ids := e.runningPod(t, "web", "a", "b")
	out := t.TempDir()
	if err := e.checkpointPod(pod, out, ids...); err != nil {
		t.Fatal(err)
	}
	restore := func(path string, cfg *runtimeapi.PodSandboxConfig, names ...string) error {
		req := &runtimeapi.RestorePodRequest{CheckpointPath: path, Config: cfg}
		for _, n := range names {
			req.ContainerConfigs = append(req.ContainerConfigs, containerConfig(n))
		}
		_, err := call(e.srv, "RestorePod", e.srv.RestorePod, req)
		return err
	}
	pods := func() int {
		r, err := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Items)
	}
	ctrs := func() int {
		r, err := call(e.srv, "ListContainers", e.srv.ListContainers, &runtimeapi.ListContainersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Containers)
	}
	np, nc := pods(), ctrs()

	wantStatus(t, "relative path", restore("cp", podConfig("r"), "a", "b"), codes.InvalidArgument)
	wantStatus(t, "no config", restore(out, nil, "a", "b"), codes.InvalidArgument)
	wantStatus(t, "no containers", restore(out, podConfig("r")), codes.InvalidArgument)
	wantStatus(t, "repeated name", restore(out, podConfig("r"), "a", "a"), codes.InvalidArgument)
	wantStatus(t, "a name missing", restore(out, podConfig("r"), "a"), codes.InvalidArgument)
	wantStatus(t, "an unknown name", restore(out, podConfig("r"), "a", "b", "c"), codes.InvalidArgument)
	wantStatus(t, "not a checkpoint", restore(t.TempDir(), podConfig("r"), "a", "b"), codes.InvalidArgument)
	_, err := call(e.srv, "RestorePod", e.srv.RestorePod, &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig("r"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a"), containerConfig("b")}, RuntimeHandler: "nope"})
	if err == nil {
		t.Error("unknown handler accepted")
	}
	fakeCRIU(t, false)
	wantStatus(t, "criu check fails", restore(out, podConfig("r"), "a", "b"), codes.FailedPrecondition)
	fakeCRIU(t, true)
	if got := e.rt.callsOf("create"); len(got) != 3 { // the pod's pause container and its two
		t.Errorf("refused restores reached the runtime: %v", got)
	}

	// The second container fails: the pod and the first are removed.
	bad := t.TempDir()
	for _, f := range []string{checkpoint.PodFile, "a.tar", "b.tar"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "b.tar" {
			b = []byte("not an archive")
		}
		if err := os.WriteFile(filepath.Join(bad, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A corrupt archive is refused before the pod is made.
	if err := restore(bad, podConfig("r"), "a", "b"); err == nil {
		t.Fatal("restore of a corrupt checkpoint succeeded")
	}
	// So is a config that does not describe the checkpointed process.
	mismatched := containerConfig("b")
	mismatched.Envs = append(mismatched.Envs, &runtimeapi.KeyValue{Key: "NOT_IN_THE_CHECKPOINT", Value: []byte("1")})
	_, err = call(e.srv, "RestorePod", e.srv.RestorePod, &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig("r"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a"), mismatched}})
	wantStatus(t, "env mismatch", err, codes.InvalidArgument)
	if got := e.rt.callsOf("create"); len(got) != 3 {
		t.Errorf("refused restores reached the runtime: %v", got)
	}
	// The second container fails once the pod is made: the pod and the
	// first container are removed.
	badMount := containerConfig("b")
	badMount.Mounts = []*runtimeapi.Mount{{HostPath: "relative", ContainerPath: "/x"}}
	_, err = call(e.srv, "RestorePod", e.srv.RestorePod, &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig("r"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a"), badMount}})
	wantStatus(t, "second container refused", err, codes.InvalidArgument)
	if pods() != np || ctrs() != nc {
		t.Errorf("failed restore left pods %d (was %d), containers %d (was %d)", pods(), np, ctrs(), nc)
	}
	if got := e.rt.callsOf("create"); len(got) != 4 { // + the restored pod's pause container (a restored container is made by its start)
		t.Errorf("runtime calls: %v", got)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 3 {
		t.Errorf("restores changed the checkpoint: %v", ents)
	}

	// A handler that cannot restore (a vm handler).
	e.runtimes["runc"] = plainRuntime{e.rt}
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	wantStatus(t, "handler without restore", restore(out, podConfig("r"), "a", "b"), codes.Unimplemented)

	// Once the original pod is gone, nothing is left.
	if _, err := call(e.srv, "StopPodSandbox", e.srv.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := call(e.srv, "RemovePodSandbox", e.srv.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	e.assertNothingHeld(t)
}

// hangingCheckpoint dumps until the caller's deadline.
type hangingCheckpoint struct{ *fakeRuntime }

func (f hangingCheckpoint) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	f.mu.Lock()
	_ = f.enter("checkpoint", id)
	f.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// The caller's deadline passes during a dump: every container is resumed
// all the same (the resume is not bound by that deadline).
func TestCheckpointPodDeadline(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod, ids := e.runningPod(t, "web", "a", "b")
	e.runtimes["runc"] = hangingCheckpoint{e.rt}
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := e.srv.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CheckpointPod past its deadline: %v", err)
	}
	if got := e.rt.callsOf("resume"); len(got) != 2 {
		t.Errorf("resumed: %v", got)
	}
	for _, id := range ids {
		if st, _ := e.rt.State(context.Background(), id); st.Status != runtime.StatusRunning {
			t.Errorf("%s left %s", id, st.Status)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output holds %v", ents)
	}
}
