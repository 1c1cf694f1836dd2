package server

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/ocifeatures"
)

// featuresRuntime is the fake runtime with optional features, as an oci
// handler reports them.
type featuresRuntime struct {
	*fakeRuntime
	f ocifeatures.Handler
}

func (r featuresRuntime) Features() ocifeatures.Handler { return r.f }

// setFeatures restarts the env's server with its "runc" handler
// reporting f.
func (e *testEnv) setFeatures(t *testing.T, f ocifeatures.Handler) {
	t.Helper()
	e.runtimes["runc"] = featuresRuntime{e.rt, f}
	e.srv.Shutdown(t.Context())
	e.srv = e.newServer(t, nil)
}

func TestStatusHandlerFeatures(t *testing.T) {
	e := newTestEnv(t, "")
	for _, f := range []ocifeatures.Handler{{}, {RecursiveReadOnlyMounts: true}, {UserNamespaces: true}} {
		if f != (ocifeatures.Handler{}) {
			e.setFeatures(t, f)
		}
		resp, err := call(e.srv, "Status", e.srv.Status, &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.RuntimeHandlers) != 2 {
			t.Fatalf("handlers %v", resp.RuntimeHandlers)
		}
		// The default handler, also under "", with the same features.
		for _, h := range resp.RuntimeHandlers {
			got := h.GetFeatures()
			if got.GetRecursiveReadOnlyMounts() != f.RecursiveReadOnlyMounts || got.GetUserNamespaces() != f.UserNamespaces {
				t.Errorf("features %+v: handler %q reports %v", f, h.Name, got)
			}
		}
	}
}

func rroConfig(m *runtimeapi.Mount) *runtimeapi.ContainerConfig {
	c := containerConfig("rro")
	c.Mounts = []*runtimeapi.Mount{m}
	return c
}

func TestCreateContainerRecursiveReadOnly(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	host := t.TempDir()
	rro := func(readonly bool, p runtimeapi.MountPropagation) *runtimeapi.Mount {
		return &runtimeapi.Mount{HostPath: host, ContainerPath: "/mnt", Readonly: readonly, RecursiveReadOnly: true, Propagation: p}
	}

	// A handler without the feature refuses, naming itself.
	_, err := e.create(pod, rroConfig(rro(true, runtimeapi.MountPropagation_PROPAGATION_PRIVATE)))
	wantStatus(t, "rro on a handler without it", err, codes.InvalidArgument)
	if err == nil || !strings.Contains(err.Error(), `"runc"`) {
		t.Errorf("error does not name the handler: %v", err)
	}

	e.setFeatures(t, ocifeatures.Handler{RecursiveReadOnlyMounts: true})
	for _, tc := range []struct {
		name string
		m    *runtimeapi.Mount
	}{
		{"writable", rro(false, runtimeapi.MountPropagation_PROPAGATION_PRIVATE)},
		{"host to container", rro(true, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER)},
		{"bidirectional", rro(true, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL)},
	} {
		before := e.rt.count()
		_, err := e.create(pod, rroConfig(tc.m))
		wantStatus(t, tc.name, err, codes.InvalidArgument)
		if e.rt.count() != before {
			t.Errorf("%s: a runtime container was left", tc.name)
		}
	}

	id := e.mustCreate(t, pod, rroConfig(rro(true, runtimeapi.MountPropagation_PROPAGATION_PRIVATE)))
	spec := e.bundleSpec(t, id)
	i := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == "/mnt" })
	if i < 0 || !slices.Contains(spec.Mounts[i].Options, "rro") || !slices.Contains(spec.Mounts[i].Options, "ro") {
		t.Errorf("OCI mounts %v: want /mnt with ro and rro", spec.Mounts)
	}
	st := e.containerStatus(t, id)
	if len(st.Mounts) != 1 || !st.Mounts[0].RecursiveReadOnly || !st.Mounts[0].Readonly {
		t.Errorf("ContainerStatus mounts %v", st.Mounts)
	}
}
