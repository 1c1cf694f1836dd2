package server

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/imageservice"
)

// The node-level RPCs and the ImageService on the fakes.

func TestStatusReady(t *testing.T) {
	e := newTestEnv(t, "")
	e.unavailable = map[string]error{"kata": errors.New("shim not found")}
	e.srv.Shutdown(t.Context())
	e.srv = e.newServer(t, nil)
	resp, err := call(e.srv, "Status", e.srv.Status, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if !c.Status {
			t.Errorf("condition %v not ready", c)
		}
	}
	var names []string
	for _, h := range resp.RuntimeHandlers {
		names = append(names, h.Name)
	}
	if !slices.Contains(names, "runc") || !slices.Contains(names, "") || slices.Contains(names, "kata") {
		t.Errorf("runtime handlers %q, want runc and the default under \"\"", names)
	}
	var unavailable map[string]string
	if err := json.Unmarshal([]byte(resp.Info["unavailableRuntimes"]), &unavailable); err != nil || unavailable["kata"] == "" {
		t.Errorf("verbose info %q: %v", resp.Info, err)
	}
	// The configuration in effect, under the configuration file's keys.
	var cfg map[string]any
	if err := json.Unmarshal([]byte(resp.Info["config"]), &cfg); err != nil || cfg["default_runtime"] != "runc" {
		t.Errorf("verbose config %q: %v", resp.Info["config"], err)
	}
	var handlers map[string]struct {
		Default bool `json:"default"`
	}
	if err := json.Unmarshal([]byte(resp.Info["runtimeHandlerConfig"]), &handlers); err != nil || len(handlers) != 1 || !handlers["runc"].Default {
		t.Errorf("verbose runtimeHandlerConfig %q: %v", resp.Info["runtimeHandlerConfig"], err)
	}
	// crictl info puts these info keys over its own: none may be one.
	for _, k := range []string{"status", "runtimeHandlers", "features"} {
		if v, ok := resp.Info[k]; ok {
			t.Errorf("verbose info has key %q (%s), which hides crictl's own", k, v)
		}
	}
	if v, d := resp.Info["cgroupVersion"], resp.Info["cgroupDriver"]; (v != `"v1"` && v != `"v2"`) || (d != `"cgroupfs"` && d != `"systemd"`) {
		t.Errorf("verbose cgroupVersion %s, cgroupDriver %s", v, d)
	}
	if resp.Info["lastReload"] != "null" {
		t.Errorf("lastReload before any reload: %q", resp.Info["lastReload"])
	}
}

func TestVersion(t *testing.T) {
	e := newTestEnv(t, "")
	resp, err := call(e.srv, "Version", e.srv.Version, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.RuntimeName != "podbay" || resp.RuntimeApiVersion != "v1" || resp.RuntimeVersion != Version {
		t.Errorf("version %v", resp)
	}
}

func TestRuntimeConfig(t *testing.T) {
	e := newTestEnv(t, "")
	resp, err := call(e.srv, "RuntimeConfig", e.srv.RuntimeConfig, &runtimeapi.RuntimeConfigRequest{})
	if err != nil || resp.Linux.CgroupDriver != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig: %v, %v", resp, err)
	}
}

// UpdateRuntimeConfig hands the pod CIDR to the network; without one it
// does nothing.
func TestUpdateRuntimeConfig(t *testing.T) {
	e := newTestEnv(t, "")
	for _, req := range []*runtimeapi.UpdateRuntimeConfigRequest{
		{},
		{RuntimeConfig: &runtimeapi.RuntimeConfig{}},
		{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.88.0.0/16"}}},
	} {
		if _, err := call(e.srv, "UpdateRuntimeConfig", e.srv.UpdateRuntimeConfig, req); err != nil {
			t.Fatalf("UpdateRuntimeConfig(%v): %v", req, err)
		}
	}
	e.net.mu.Lock()
	calls := e.net.calls
	e.net.mu.Unlock()
	if !slices.Equal(calls, []string{"cidr 10.88.0.0/16"}) {
		t.Errorf("network calls %v, want the one CIDR update", calls)
	}
}

func TestImageService(t *testing.T) {
	e := newTestEnv(t, "")
	is := imageservice.New(imageservice.Options{Store: e.img})
	e.img.registry["nginx:1"] = &image.Image{ID: "2222222222222222222222222222222222222222222222222222222222222222", RepoTags: []string{"nginx:1"}, Size: 42}
	spec := func(ref string) *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: ref} }

	// Pull.
	_, err := call(e.srv, "PullImage", is.PullImage, &runtimeapi.PullImageRequest{})
	wantStatus(t, "PullImage without a reference", err, codes.InvalidArgument)
	_, err = call(e.srv, "PullImage", is.PullImage, &runtimeapi.PullImageRequest{Image: spec("unreachable:1")})
	wantStatus(t, "PullImage of an unreachable image", err, codes.Unavailable)
	pulled, err := call(e.srv, "PullImage", is.PullImage, &runtimeapi.PullImageRequest{
		Image: spec("nginx:1"), Auth: &runtimeapi.AuthConfig{Username: "u", Password: "p"}})
	if err != nil || pulled.ImageRef != "sha256:2222222222222222222222222222222222222222222222222222222222222222" {
		t.Fatalf("PullImage: %v, %v", pulled, err)
	}
	if e.img.lastAuth == nil || e.img.lastAuth.Username != "u" || e.img.lastAuth.Password != "p" {
		t.Errorf("pull credentials %+v", e.img.lastAuth)
	}

	// Status: by tag or by the ID PullImage returned; absent is no error.
	for _, ref := range []string{"nginx:1", pulled.ImageRef} {
		st, err := call(e.srv, "ImageStatus", is.ImageStatus, &runtimeapi.ImageStatusRequest{Image: spec(ref), Verbose: true})
		if err != nil || st.Image.GetId() != pulled.ImageRef || st.Image.Size != 42 || st.Info["info"] == "" {
			t.Errorf("ImageStatus(%s): %v, %v", ref, st, err)
		}
	}
	st, err := call(e.srv, "ImageStatus", is.ImageStatus, &runtimeapi.ImageStatusRequest{Image: spec("absent:1")})
	if err != nil || st.Image != nil {
		t.Errorf("ImageStatus of an absent image: %v, %v; want no image and no error", st, err)
	}
	_, err = call(e.srv, "ImageStatus", is.ImageStatus, &runtimeapi.ImageStatusRequest{})
	wantStatus(t, "ImageStatus without a reference", err, codes.InvalidArgument)

	// List, all and filtered.
	list, err := call(e.srv, "ListImages", is.ListImages, &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.Images) != 1 {
		t.Errorf("ListImages: %v, %v", list, err)
	}
	list, err = call(e.srv, "ListImages", is.ListImages, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: spec("other:1")}})
	if err != nil || len(list.Images) != 0 {
		t.Errorf("ListImages other:1: %v, %v", list, err)
	}
	e.img.failOn("list", errors.New("storage broken"))
	_, err = call(e.srv, "ListImages", is.ListImages, &runtimeapi.ListImagesRequest{})
	wantStatus(t, "ListImages with a broken store", err, codes.Unknown)
	e.img.failOn("list", nil)

	// Filesystem info.
	fs, err := call(e.srv, "ImageFsInfo", is.ImageFsInfo, &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(fs.ImageFilesystems) != 1 || fs.ImageFilesystems[0].FsId.Mountpoint != e.img.dir {
		t.Errorf("ImageFsInfo: %v, %v", fs, err)
	}
	e.img.failOn("fsinfo", errors.New("statfs failed"))
	if _, err := call(e.srv, "ImageFsInfo", is.ImageFsInfo, &runtimeapi.ImageFsInfoRequest{}); err == nil {
		t.Error("ImageFsInfo succeeded with a broken store")
	}

	// Remove is idempotent; an image in use is refused.
	for i := 0; i < 2; i++ {
		if _, err := call(e.srv, "RemoveImage", is.RemoveImage, &runtimeapi.RemoveImageRequest{Image: spec("nginx:1")}); err != nil {
			t.Fatalf("RemoveImage #%d: %v", i, err)
		}
	}
	_, err = call(e.srv, "RemoveImage", is.RemoveImage, &runtimeapi.RemoveImageRequest{})
	wantStatus(t, "RemoveImage without a reference", err, codes.InvalidArgument)
	e.img.failOn("remove", errdefs.ErrFailedPrecondition)
	_, err = call(e.srv, "RemoveImage", is.RemoveImage, &runtimeapi.RemoveImageRequest{Image: spec("busy:1")})
	wantStatus(t, "RemoveImage of an image in use", err, codes.FailedPrecondition)
}
