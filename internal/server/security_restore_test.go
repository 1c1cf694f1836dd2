package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
)

// TestSecurityRestoreAnnotations: a checkpoint archive is input too. The
// annotations of its spec.dump (here reserved ones runc acts on, and a
// forged container type) do not reach the restored container's spec: the
// restore takes the checkpointed process from the archive and everything
// else from the request, through the handler's allow-list.
func TestSecurityRestoreAnnotations(t *testing.T) {
	e := newTestEnv(t, "")
	fakeCRIU(t, true)
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("counter"))
	e.startFakeContainer(t, id)
	loc := filepath.Join(t.TempDir(), "cp.tar")
	if err := e.checkpoint(id, loc); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}

	// Rewrite the archive's spec.dump as an archive author would.
	dir := t.TempDir()
	if _, err := checkpoint.Extract(loc, dir); err != nil {
		t.Fatal(err)
	}
	var dump specs.Spec
	if err := checkpoint.ReadJSON(dir, checkpoint.SpecDumpFile, &dump); err != nil {
		t.Fatal(err)
	}
	forged := map[string]string{
		"org.criu.config":                   "/tmp/evil-criu.conf",
		"org.systemd.property.ExecStartPre": "/bin/evil",
		"io.kubernetes.cri.container-type":  "sandbox",
		"io.kubernetes.cri-o.ContainerType": "sandbox",
		"example.com/from-archive":          "x",
	}
	for k, v := range forged {
		dump.Annotations[k] = v
	}
	if err := checkpoint.WriteJSON(filepath.Join(dir, checkpoint.SpecDumpFile), &dump); err != nil {
		t.Fatal(err)
	}
	crafted := filepath.Join(t.TempDir(), "crafted.tar")
	if err := checkpoint.Write(crafted, dir); err != nil {
		t.Fatal(err)
	}

	pod2 := e.mustRun(t, podConfig("restored"))
	rcfg := containerConfig("counter")
	rcfg.Image = &runtimeapi.ImageSpec{Image: crafted}
	rid := e.mustCreate(t, pod2, rcfg)
	e.startFakeContainer(t, rid)
	bundle := e.rt.bundles[rid]
	if bundle == "" {
		t.Fatalf("the runtime was handed no bundle for the restored container")
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got specs.Spec
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations["io.kubernetes.cri.container-type"] != "container" {
		t.Errorf("restored container-type %q, want container", got.Annotations["io.kubernetes.cri.container-type"])
	}
	for k := range forged {
		if k == "io.kubernetes.cri.container-type" {
			continue
		}
		if v, ok := got.Annotations[k]; ok {
			t.Errorf("the archive's %s = %q reached the restored spec", k, v)
		}
	}
}
