package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
)

// fakeVolumeImages adds image volumes to fakeImages: an image's "mount" is
// a directory with data/file, a plain file and a symlink out of it.
type fakeVolumeImages struct {
	*fakeImages
	vmu     sync.Mutex
	owners  map[string]map[string]bool // guarded by vmu; image ID → owners
	mounted map[string]bool            // guarded by vmu
}

func newFakeVolumeImages(f *fakeImages) *fakeVolumeImages {
	return &fakeVolumeImages{fakeImages: f, owners: map[string]map[string]bool{}, mounted: map[string]bool{}}
}

func (f *fakeVolumeImages) MountVolume(ctx context.Context, ref, owner string) (string, string, error) {
	img, err := f.Status(ctx, ref)
	if err != nil {
		return "", "", err
	}
	mp := filepath.Join(f.dir, "volumes", img.ID)
	if err := os.MkdirAll(filepath.Join(mp, "data"), 0o755); err != nil {
		return "", "", err
	}
	for name, data := range map[string]string{"data/file": "in the image", "afile": "x"} {
		if err := os.WriteFile(filepath.Join(mp, name), []byte(data), 0o644); err != nil {
			return "", "", err
		}
	}
	if err := os.Symlink("/etc", filepath.Join(mp, "escape")); err != nil && !os.IsExist(err) {
		return "", "", err
	}
	f.vmu.Lock()
	defer f.vmu.Unlock()
	if f.owners[img.ID] == nil {
		f.owners[img.ID] = map[string]bool{}
	}
	f.owners[img.ID][owner] = true
	f.mounted[img.ID] = true
	return mp, img.ID, nil
}

func (f *fakeVolumeImages) HoldVolume(ctx context.Context, imageID, owner string) error {
	f.vmu.Lock()
	defer f.vmu.Unlock()
	if f.owners[imageID] == nil {
		f.owners[imageID] = map[string]bool{}
	}
	f.owners[imageID][owner] = true
	return nil
}

func (f *fakeVolumeImages) ReleaseVolumes(ctx context.Context, owner string) error {
	f.vmu.Lock()
	defer f.vmu.Unlock()
	for id, o := range f.owners {
		delete(o, owner)
		if len(o) == 0 {
			delete(f.owners, id)
			delete(f.mounted, id)
		}
	}
	return nil
}

func (f *fakeVolumeImages) CollectVolumes(ctx context.Context) ([]string, error) {
	f.vmu.Lock()
	defer f.vmu.Unlock()
	var out []string
	for id := range f.mounted {
		if len(f.owners[id]) == 0 {
			delete(f.mounted, id)
			out = append(out, id)
		}
	}
	return out, nil
}

// state returns the owners of each image and the mounted images.
func (f *fakeVolumeImages) state() (owners map[string][]string, mounted []string) {
	f.vmu.Lock()
	defer f.vmu.Unlock()
	owners = map[string][]string{}
	for id, o := range f.owners {
		for c := range o {
			owners[id] = append(owners[id], c)
		}
	}
	for id := range f.mounted {
		mounted = append(mounted, id)
	}
	return owners, mounted
}

// newVolumeEnv is a test env whose image store has image volumes, with a
// pod and image "busybox".
func newVolumeEnv(t *testing.T) (*testEnv, *fakeVolumeImages, string, string) {
	e := newTestEnv(t, "")
	vol := newFakeVolumeImages(e.img)
	e.images = vol
	e.srv.Shutdown(context.Background())
	e.srv = e.newServer(t, nil)
	pod := e.podWithImage(t, "web")
	img, err := e.img.Status(context.Background(), "busybox")
	if err != nil {
		t.Fatal(err)
	}
	return e, vol, pod, img.ID
}

func imageVolumeConfig(name string, mounts ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
	cfg := containerConfig(name)
	cfg.Mounts = mounts
	return cfg
}

func TestImageVolume(t *testing.T) {
	e, vol, pod, imgID := newVolumeEnv(t)
	id := e.mustCreate(t, pod, imageVolumeConfig("c",
		&runtimeapi.Mount{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: "busybox"}},
		&runtimeapi.Mount{ContainerPath: "/sub", Image: &runtimeapi.ImageSpec{Image: "sha256:" + imgID}, ImageSubPath: "data", Readonly: true},
	))
	mp := filepath.Join(e.img.dir, "volumes", imgID)

	raw, err := os.ReadFile(filepath.Join(e.cfg.State, "bundles", id, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/vol": mp, "/sub": filepath.Join(mp, "data")}
	for _, m := range spec.Mounts {
		src, ok := want[m.Destination]
		if !ok {
			continue
		}
		delete(want, m.Destination)
		if m.Source != src || m.Type != "bind" {
			t.Errorf("mount at %s: %s from %s, want a bind from %s", m.Destination, m.Type, m.Source, src)
		}
		for _, o := range []string{"rbind", "ro", "nosuid", "nodev"} {
			if !slices.Contains(m.Options, o) {
				t.Errorf("mount at %s: options %v lack %s", m.Destination, m.Options, o)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("no spec mounts at %v", want)
	}
	if owners, _ := vol.state(); !slices.Equal(owners[imgID], []string{id}) {
		t.Errorf("image volume owners = %v, want %s", owners, id)
	}

	st := e.containerStatus(t, id)
	if len(st.Mounts) != 2 {
		t.Fatalf("status mounts = %v", st.Mounts)
	}
	for i, sub := range []string{"", "data"} {
		m := st.Mounts[i]
		if m.GetImage().GetImage() != "sha256:"+imgID || m.ImageSubPath != sub || !m.Readonly || m.HostPath != "" {
			t.Errorf("status mount %d = %v", i, m)
		}
	}

	if err := e.removeContainer(id); err != nil {
		t.Fatal(err)
	}
	if owners, mounted := vol.state(); len(owners) != 0 || len(mounted) != 0 {
		t.Errorf("after RemoveContainer: owners %v, mounted %v", owners, mounted)
	}
	e.assertNoContainers(t)
}

func TestImageVolumeRefusals(t *testing.T) {
	e, vol, pod, _ := newVolumeEnv(t)
	img := &runtimeapi.ImageSpec{Image: "busybox"}
	for _, tc := range []struct {
		name  string
		mount *runtimeapi.Mount
		code  codes.Code
	}{
		{"host path and image", &runtimeapi.Mount{ContainerPath: "/v", HostPath: "/tmp", Image: img}, codes.InvalidArgument},
		{"sub path without image", &runtimeapi.Mount{ContainerPath: "/v", HostPath: "/tmp", ImageSubPath: "x"}, codes.InvalidArgument},
		{"relative container path", &runtimeapi.Mount{ContainerPath: "v", Image: img}, codes.InvalidArgument},
		{"sub path with ..", &runtimeapi.Mount{ContainerPath: "/v", Image: img, ImageSubPath: "data/../.."}, codes.InvalidArgument},
		{"absolute sub path", &runtimeapi.Mount{ContainerPath: "/v", Image: img, ImageSubPath: "/data"}, codes.InvalidArgument},
		{"unknown image", &runtimeapi.Mount{ContainerPath: "/v", Image: &runtimeapi.ImageSpec{Image: "example.com/none:1"}}, codes.NotFound},
		{"missing sub path", &runtimeapi.Mount{ContainerPath: "/v", Image: img, ImageSubPath: "nope"}, codes.NotFound},
		{"sub path is a file", &runtimeapi.Mount{ContainerPath: "/v", Image: img, ImageSubPath: "afile"}, codes.InvalidArgument},
		{"sub path leaves the image", &runtimeapi.Mount{ContainerPath: "/v", Image: img, ImageSubPath: "escape"}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.create(pod, imageVolumeConfig("c", tc.mount))
			if status.Code(err) != tc.code {
				t.Fatalf("CreateContainer = %v, want %v", err, tc.code)
			}
			e.assertNoContainers(t)
			if owners, mounted := vol.state(); len(owners) != 0 || len(mounted) != 0 {
				t.Errorf("left: owners %v, mounted %v", owners, mounted)
			}
		})
	}
}

// After a restart, the reloaded containers hold their image volumes again
// (a collection leaves them mounted), a container caught half-made
// releases its, and a mount no record holds is collected.
func TestImageVolumeRecover(t *testing.T) {
	e, vol, pod, imgID := newVolumeEnv(t)
	vm := &runtimeapi.Mount{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: "busybox"}}
	kept := e.mustCreate(t, pod, imageVolumeConfig("kept", vm))
	half := e.mustCreate(t, pod, imageVolumeConfig("half", vm))
	var rec container.Record
	if _, err := e.db.Get(containerBucket, half, &rec); err != nil {
		t.Fatal(err)
	}
	rec.State = container.StateCreating
	if err := e.db.Put(containerBucket, half, container.RecordVersion, rec); err != nil {
		t.Fatal(err)
	}
	e.srv.Shutdown(context.Background())

	// The restarted daemon's store knows no owner; one image is mounted
	// with no container at all.
	vol.vmu.Lock()
	vol.owners = map[string]map[string]bool{}
	vol.mounted["leaked"] = true
	vol.vmu.Unlock()
	e.srv = e.newServer(t, nil)

	owners, mounted := vol.state()
	if !slices.Equal(owners[imgID], []string{kept}) || len(owners) != 1 {
		t.Errorf("owners after restart = %v, want %s holding %s", owners, kept, imgID)
	}
	if !slices.Equal(mounted, []string{imgID}) {
		t.Errorf("mounted after restart = %v, want [%s]", mounted, imgID)
	}
	if err := e.removeContainer(kept); err != nil {
		t.Fatal(err)
	}
	if owners, mounted := vol.state(); len(owners) != 0 || len(mounted) != 0 {
		t.Errorf("after removal: owners %v, mounted %v", owners, mounted)
	}
	e.assertNoContainers(t)
}

// Without image volume support in the image store, an image volume is
// refused, never dropped.
func TestImageVolumeUnsupportedStore(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	_, err := e.create(pod, imageVolumeConfig("c", &runtimeapi.Mount{ContainerPath: "/v", Image: &runtimeapi.ImageSpec{Image: "busybox"}}))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("CreateContainer = %v, want Unimplemented", err)
	}
	e.assertNoContainers(t)
}
