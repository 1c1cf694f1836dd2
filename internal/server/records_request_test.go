package server

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/sandbox"
)

// asWrittenBefore rewrites the records of pod and ctr as a podbay before
// Record.Request wrote them: the CRI configs as protobuf JSON only.
func (e *testEnv) asWrittenBefore(t *testing.T, pod, ctr string) {
	t.Helper()
	var sb sandbox.Record
	if _, err := e.db.Get(sandboxBucket, pod, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Request == nil || len(sb.Config) == 0 {
		t.Fatalf("new sandbox record: request %v, config %d bytes; want both", sb.Request, len(sb.Config))
	}
	sb.Request = nil
	if err := e.db.Put(sandboxBucket, pod, sandbox.RecordVersion, sb); err != nil {
		t.Fatal(err)
	}
	var c container.Record
	if _, err := e.db.Get(containerBucket, ctr, &c); err != nil {
		t.Fatal(err)
	}
	if c.Request == nil || len(c.Config) == 0 {
		t.Fatalf("new container record: request %v, config %d bytes; want both", c.Request, len(c.Config))
	}
	c.Request = nil
	if err := e.db.Put(containerBucket, ctr, container.RecordVersion, c); err != nil {
		t.Fatal(err)
	}
}

// Records written before they held the requests (the CRI configs as
// protobuf JSON only) still load after a restart: the pod's resources,
// the container's stdio, a resize and a new container in the old pod all
// come from the converted requests.
func TestRecordsWithoutRequestLoad(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.resizablePod(t, "old", "", podCgroupParent)
	if _, err := e.img.ImportFromFiles(context.Background(), "busybox", nil, image.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	cfg := containerConfig("c")
	cfg.Tty, cfg.Stdin, cfg.StdinOnce = true, true, true
	ctr := e.mustCreate(t, pod, cfg)
	e.startFakeContainer(t, ctr)

	e.srv.Shutdown(context.Background())
	e.asWrittenBefore(t, pod, ctr)
	e.srv = e.newServer(t, nil)

	sb, err := e.srv.index.Get(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := sb.Record().Request
	if req == nil || req.Resources == nil || req.Resources.CPUQuota != 50000 || req.Metadata.Name != "old" || req.NetworkOrder != sb.Record().NetworkOrder {
		t.Fatalf("converted pod request: %+v", req)
	}
	if p := e.srv.nriPod(sb.Record()); p.GetLinux().GetPodResources().GetCpu().GetQuota().GetValue() != 50000 {
		t.Errorf("NRI pod resources of an old record: %v", p.GetLinux().GetPodResources())
	}
	c, err := e.srv.containers.Get(ctr)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Record().Request; r == nil || !r.Tty || !r.Stdin || !r.StdinOnce || r.Name != "c" {
		t.Fatalf("converted container request: %+v", r)
	}
	if st := e.containerStatus(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("old container is %v after restart", st.State)
	}

	// A resize of the old pod works and persists the request.
	if err := e.resize(pod, &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 200000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20}, nil); err != nil {
		t.Fatalf("resize an old pod: %v", err)
	}
	if res, _ := e.storedResources(t, pod); res.GetCpuQuota() != 200000 {
		t.Errorf("verbose status after resizing an old pod: %v", res)
	}
	var persisted sandbox.Record
	if _, err := e.db.Get(sandboxBucket, pod, &persisted); err != nil {
		t.Fatal(err)
	}
	if persisted.Request == nil || persisted.Request.Resources.CPUQuota != 200000 {
		t.Errorf("persisted request after resize: %+v", persisted.Request)
	}

	// A container created in the old pod without the pod's config in the
	// request reads the converted pod.
	created, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: containerConfig("d")})
	if err != nil {
		t.Fatalf("create in an old pod: %v", err)
	}
	if created.ContainerId == "" {
		t.Error("create in an old pod: no container ID")
	}
}
