package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/store"
)

// TestRestartWithOldRecords: records written by a podbay before records
// held the pod and container requests (the CRI configs as protobuf JSON
// only) are read by a restarted daemon: the pod stays ready, its running
// container keeps running and answers exec, verbose status still shows
// the pod's config, a container created in the old pod without the pod's
// config in the request starts, and everything is removed without leaks.
func TestRestartWithOldRecords(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "old-records")
	running, _ := e.runContainer(t, pod, containerConfig("running", ref, ctrCommand("sleep", "1000")))

	e.kill9()
	db, err := store.Open(filepath.Join(e.rootDir, "podbay.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ bucket, id string }{{"sandboxes", pod.id}, {"containers", running}} {
		var rec map[string]json.RawMessage
		version, err := db.Get(r.bucket, r.id, &rec)
		if err != nil {
			t.Fatal(err)
		}
		if rec["request"] == nil || rec["config"] == nil {
			t.Fatalf("%s record %s: request and config, want both", r.bucket, short(r.id))
		}
		delete(rec, "request")
		if err := db.Put(r.bucket, r.id, version, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	e.restart("")

	st, info := e.status(t, pod.id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("old pod is %v after restart", st.State)
	}
	if !strings.Contains(string(info.Config), `"old-records"`) {
		t.Errorf("verbose status config of an old pod: %s", info.Config)
	}
	if cst, _ := e.containerStatus(t, running); cst.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("old container is %v after restart", cst.State)
	}
	if out := e.execSync(t, running, 10, "echo", "alive"); strings.TrimSpace(string(out.Stdout)) != "alive" {
		t.Errorf("exec in an old container: %q", out.Stdout)
	}

	// The pod's config comes from the converted record.
	resp, err := e.rt.CreateContainer(rpcCtx(t), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.id, Config: containerConfig("new", ref, ctrCommand("sleep", "1000")),
	})
	if err != nil {
		t.Fatalf("CreateContainer in an old pod: %v", err)
	}
	e.startContainer(t, resp.ContainerId)
	e.waitContainerState(t, resp.ContainerId, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)

	for _, id := range []string{running, resp.ContainerId} {
		e.stopContainer(t, id, 0)
		e.removeContainer(t, id)
		e.requireNoMonitor(t, id)
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
