package image

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

const pauseRef = "registry.k8s.io/pause:3.10"

// importPause imports an image like podbay's default pause image, with
// content as its /pause.
func importPause(t testing.TB, e *testEnv, content string) *Image {
	t.Helper()
	src := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(src, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := e.store.ImportFromFiles(testCtx(t), pauseRef, []File{
		{Path: "/pause", Source: src, Mode: 0o755},
		{Path: "/etc/podbay/marker", Source: src, Mode: 0o600},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}, ImageConfig{Entrypoint: []string{"/pause"}, User: "65535:65535"})
	if err != nil {
		t.Fatalf("ImportFromFiles: %v", err)
	}
	return img
}

func TestImportFromFiles(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "#!/bin/true\n")
	if !slices.Equal(img.RepoTags, []string{pauseRef}) || !slices.Equal(img.Config.Entrypoint, []string{"/pause"}) ||
		img.UID == nil || *img.UID != 65535 {
		t.Errorf("imported image = %+v", img)
	}
	st, err := e.store.Status(ctx, "registry.k8s.io/pause:3.10")
	if err != nil || st.ID != img.ID {
		t.Fatalf("Status = %v, %v", st, err)
	}
	// The same files give the same image.
	again := importPause(t, e, "#!/bin/true\n")
	if again.ID != img.ID {
		t.Errorf("re-import changed the ID: %s → %s", img.ID, again.ID)
	}
	// New content replaces the image; the old one, now nameless, goes.
	changed := importPause(t, e, "#!/bin/false\n")
	if changed.ID == img.ID {
		t.Fatal("new content, same ID")
	}
	if _, err := e.store.Status(ctx, img.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("replaced image still there: %v", err)
	}
	if images, layers := e.counts(); images != 1 || layers != 1 {
		t.Errorf("%d images, %d layers; want 1, 1", images, layers)
	}
	for _, bad := range [][]File{
		{{Path: "relative", Source: "/etc/hostname", Mode: 0o644}},
		{{Path: "/dev/null", Source: "/dev/null", Mode: fs.ModeDevice | 0o644}},
		{{Path: "/missing", Source: "/nonexistent", Mode: 0o644}},
	} {
		if _, err := e.store.ImportFromFiles(ctx, pauseRef, bad, ImageConfig{}); err == nil {
			t.Errorf("ImportFromFiles(%+v) succeeded", bad)
		}
	}
	if st, err := e.store.Status(ctx, pauseRef); err != nil || st.ID != changed.ID {
		t.Errorf("failed imports changed %s: %v, %v", pauseRef, st, err)
	}
}

func TestRootfs(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "pause-binary")

	mp, err := e.store.CreateRootfs(ctx, "ctr1", img.ID, RootfsOptions{})
	if err != nil {
		t.Fatalf("CreateRootfs: %v", err)
	}
	if !isMounted(t, mp) {
		t.Fatalf("%s is not a mount point", mp)
	}
	data, err := os.ReadFile(filepath.Join(mp, "pause"))
	if err != nil || string(data) != "pause-binary" {
		t.Errorf("/pause in rootfs: %q, %v", data, err)
	}
	if st, err := os.Stat(filepath.Join(mp, "pause")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("/pause mode: %v, %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(mp, "tmp")); err != nil || st.Mode()&fs.ModeSticky == 0 {
		t.Errorf("/tmp not sticky: %v, %v", st, err)
	}
	// The writable layer takes writes; other root filesystems do not see
	// them.
	if err := os.WriteFile(filepath.Join(mp, "written"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatalf("write into rootfs: %v", err)
	}
	usage, err := e.store.RootfsUsage(ctx, "ctr1")
	if err != nil || usage.UsedBytes < 64<<10 || usage.InodesUsed == 0 {
		t.Errorf("RootfsUsage = %+v, %v", usage, err)
	}
	mp2, err := e.store.CreateRootfs(ctx, "ctr2", pauseRef, RootfsOptions{})
	if err != nil {
		t.Fatalf("CreateRootfs by reference: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mp2, "written")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write leaked into another rootfs: %v", err)
	}

	// Idempotent: the same mountpoint, and one unmount still unmounts.
	again, err := e.store.CreateRootfs(ctx, "ctr1", img.ID, RootfsOptions{})
	if err != nil || again != mp {
		t.Errorf("second CreateRootfs = %q, %v; want %q", again, err, mp)
	}
	if _, err := e.store.CreateRootfs(ctx, "ctr1", "sha256:"+strings.Repeat("0", 64), RootfsOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("CreateRootfs from an unknown image = %v, want ErrNotFound", err)
	}

	ids, err := e.store.Rootfses(ctx)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"ctr1", "ctr2"}) {
		t.Errorf("Rootfses = %v, %v", ids, err)
	}
	if err := e.store.Remove(ctx, img.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remove of an image in use = %v, want ErrFailedPrecondition", err)
	}
	if err := e.store.Remove(ctx, pauseRef); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remove of the last tag of an image in use = %v, want ErrFailedPrecondition", err)
	}
	if _, err := e.store.Status(ctx, pauseRef); err != nil {
		t.Errorf("failed Remove untagged the image: %v", err)
	}

	for _, id := range []string{"ctr1", "ctr1", "never-created"} {
		if err := e.store.RemoveRootfs(ctx, id); err != nil {
			t.Errorf("RemoveRootfs(%s): %v", id, err)
		}
	}
	if isMounted(t, mp) {
		t.Errorf("%s still mounted after RemoveRootfs", mp)
	}
	if _, err := os.Stat(mp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rootfs directory left: %v", err)
	}
	if err := e.store.RemoveRootfs(ctx, "ctr2"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Remove(ctx, img.ID); err != nil {
		t.Errorf("Remove after its root filesystems went: %v", err)
	}
	if images, layers := e.counts(); images != 0 || layers != 0 {
		t.Errorf("%d images, %d layers left", images, layers)
	}
}

// Rootfs of an image whose ID prefix is also a container's: IDs are not
// confused with c/storage's prefix lookup.
func TestRootfsIDsAreExact(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "x")
	if _, err := e.store.CreateRootfs(ctx, "abcdef", img.ID, RootfsOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RemoveRootfs(ctx, "abc"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.store.Rootfses(ctx); !slices.Equal(ids, []string{"abcdef"}) {
		t.Errorf("RemoveRootfs(prefix) removed another rootfs: %v", ids)
	}
	mp, err := e.store.CreateRootfs(ctx, "abc", img.ID, RootfsOptions{})
	if err != nil || !isMounted(t, mp) {
		t.Errorf("CreateRootfs(abc) = %q, %v", mp, err)
	}
}

// mountOptions returns the per-mount options of the mount at path.
func mountOptions(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 5 && fields[4] == path {
			return fields[5]
		}
	}
	return ""
}

func TestRootfsMountIsNodevAndCountedOnce(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "x")
	mp, err := e.store.CreateRootfs(ctx, "c", img.ID, RootfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if opts := mountOptions(t, mp); !slices.Contains(strings.Split(opts, ","), "nodev") {
		t.Errorf("rootfs mount options %q lack nodev", opts)
	}
	for range 3 {
		if _, err := e.store.CreateRootfs(ctx, "c", img.ID, RootfsOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.store.store.Mounted("c"); err != nil || n != 1 {
		t.Errorf("mount count after repeated CreateRootfs = %d, %v; want 1", n, err)
	}
}

// A daemon restart: Close keeps running containers' root filesystems
// mounted, and the re-opened store finds its images and root filesystems
// and drops layers a crash left unreferenced.
func TestCloseAndReopen(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Metrics = reg })
	ctx := testCtx(t)
	img := importPause(t, e, "x")
	mp, err := e.store.CreateRootfs(ctx, "running", img.ID, RootfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := e.store.store.CreateLayer("", "", nil, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Close(); err != nil {
		t.Fatalf("Close with a mounted rootfs: %v", err)
	}
	if !isMounted(t, mp) {
		t.Fatal("Close unmounted a running container's rootfs")
	}
	if _, err := e.store.Pull(ctx, "busybox", nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Pull after Close = %v, want ErrUnavailable", err)
	}

	s, err := New(ctx, e.store.cfg)
	if err != nil {
		t.Fatalf("re-open: %v", err)
	}
	e.store = s
	if st, err := s.Status(ctx, pauseRef); err != nil || st.ID != img.ID {
		t.Errorf("Status after re-open = %v, %v", st, err)
	}
	if again, err := s.CreateRootfs(ctx, "running", img.ID, RootfsOptions{}); err != nil || again != mp {
		t.Errorf("CreateRootfs after re-open = %q, %v; want %q", again, err, mp)
	}
	if _, err := s.store.Layer(orphan.ID); err == nil {
		t.Error("orphan layer survived the re-open")
	}
	if images, layers := e.counts(); images != 1 || layers != 2 {
		t.Errorf("%d images, %d layers; want 1 image, its layer and the rootfs layer", images, layers)
	}

	// With nothing mounted, Close releases everything, and the store
	// opens again.
	if err := s.RemoveRootfs(ctx, "running"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if mounts := mountsUnder(t, e.root); len(mounts) > 0 {
		t.Errorf("mounts left after Close: %v", mounts)
	}
	if s, err = New(ctx, e.store.cfg); err != nil {
		t.Fatalf("second re-open: %v", err)
	}
	e.store = s
	if mp, err := s.CreateRootfs(ctx, "again", pauseRef, RootfsOptions{}); err != nil || !isMounted(t, mp) {
		t.Errorf("CreateRootfs after a clean re-open = %q, %v", mp, err)
	}
}

// A daemon killed in the middle of c/storage's DeleteContainer: the layer
// was flagged for deletion (its "incomplete" flag saved) but the container
// record was not yet deleted. The next open drops the layer and keeps the
// container; RemoveRootfs must still remove it (it used to fail for ever
// with "layer not known", so that the pod could never be removed).
func TestRemoveRootfsAfterInterruptedDelete(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "x")
	if _, err := e.store.CreateRootfs(ctx, "victim", img.ID, RootfsOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := e.store.store.Container("victim")
	if err != nil {
		t.Fatal(err)
	}
	// RemoveRootfs's first step, done; the crash comes in the second.
	if _, err := e.store.store.Unmount(c.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	flagLayerIncomplete(t, e.store.cfg.StorageRoot, c.LayerID)
	s, err := New(ctx, e.store.cfg)
	if err != nil {
		t.Fatalf("re-open: %v", err)
	}
	e.store = s
	// c/storage drops the layer at its first write-locked access: the
	// unmount that RemoveRootfs starts with.
	for i := range 2 { // the second time: nothing left, still no error
		if err := s.RemoveRootfs(ctx, "victim"); err != nil {
			t.Fatalf("RemoveRootfs #%d of a rootfs whose layer is gone: %v", i+1, err)
		}
	}
	if ids, err := s.Rootfses(ctx); err != nil || slices.Contains(ids, "victim") {
		t.Errorf("Rootfses after removal = %v, %v", ids, err)
	}
	if _, err := s.store.Layer(c.LayerID); err == nil {
		t.Error("the interrupted layer is still there; the test did not make the state it means to")
	}
	if _, err := s.CreateRootfs(ctx, "victim", img.ID, RootfsOptions{}); err != nil {
		t.Errorf("CreateRootfs with the removed id: %v", err)
	}
}

// A rootfs whose mount went away behind c/storage's back (an operator's
// umount, a crash between the unmount and the record update) is removed.
func TestRemoveRootfsUnmountedBehindStorage(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	img := importPause(t, e, "x")
	mp, err := e.store.CreateRootfs(ctx, "c", img.ID, RootfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RemoveRootfs(ctx, "c"); err != nil {
		t.Fatalf("RemoveRootfs: %v", err)
	}
	if ids, err := e.store.Rootfses(ctx); err != nil || slices.Contains(ids, "c") {
		t.Errorf("Rootfses after removal = %v, %v", ids, err)
	}
}

// flagLayerIncomplete sets c/storage's "incomplete" flag on layer id in
// the closed store under graphRoot, as its layer deletion does first.
func flagLayerIncomplete(t *testing.T, graphRoot, id string) {
	t.Helper()
	// A root filesystem's layer is in the volatile list (CreateRootfs).
	path := filepath.Join(graphRoot, "overlay-layers", "volatile-layers.json")
	if data, err := os.ReadFile(path); err != nil || !strings.Contains(string(data), id) {
		path = filepath.Join(graphRoot, "overlay-layers", "layers.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var layers []map[string]any
	if err := json.Unmarshal(data, &layers); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range layers {
		if l["id"] == id {
			flags, _ := l["flags"].(map[string]any)
			if flags == nil {
				flags = map[string]any{}
			}
			flags["incomplete"] = true
			l["flags"] = flags
			found = true
		}
	}
	if !found {
		t.Fatalf("layer %s not in %s", id, path)
	}
	if data, err = json.Marshal(layers); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Root filesystems' records are volatile unless SyncRootfsRecords: kept in
// containers/storage's volatile lists (written without fsync). A host
// crash that loses those lists leaves the directories they named, which
// the next New collects.
func TestRootfsRecordsVolatile(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "volatile", true: "synced"}[sync], func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.SyncRootfsRecords = sync })
			ctx := testCtx(t)
			img := importPause(t, e, "x")
			if _, err := e.store.CreateRootfs(ctx, "ctr", img.ID, RootfsOptions{}); err != nil {
				t.Fatal(err)
			}
			c, err := e.store.store.Container("ctr")
			if err != nil {
				t.Fatal(err)
			}
			volatile, _ := c.Flags["Volatile"].(bool)
			graph := e.store.cfg.StorageRoot
			lists, err := os.ReadFile(filepath.Join(graph, "overlay-containers", "volatile-containers.json"))
			inVolatile := err == nil && strings.Contains(string(lists), c.ID)
			if volatile == sync || inVolatile == sync {
				t.Fatalf("sync %v: container flagged volatile %v, in the volatile list %v", sync, volatile, inVolatile)
			}
			if sync {
				return
			}

			// The host crashes: mounts go, and the lists written without
			// fsync are lost.
			if _, err := e.store.store.Unmount(c.ID, true); err != nil {
				t.Fatal(err)
			}
			if err := e.store.Close(); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"overlay-containers/volatile-containers.json", "overlay-layers/volatile-layers.json"} {
				if err := os.Remove(filepath.Join(graph, f)); err != nil {
					t.Fatal(err)
				}
			}
			// containers/storage keeps its stores in memory per process
			// and reloads a list when its lock file says another writer
			// came: the new daemon's process would read them afresh.
			for _, f := range []string{"overlay-containers/containers.lock", "overlay-layers/layers.lock"} {
				if err := os.WriteFile(filepath.Join(graph, f), []byte(strings.Repeat("r", 64)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			layerDir := filepath.Join(graph, "overlay", c.LayerID)
			if _, err := os.Stat(layerDir); err != nil {
				t.Fatalf("before the restart: %v", err)
			}
			s, err := New(ctx, e.store.cfg)
			if err != nil {
				t.Fatalf("re-open: %v", err)
			}
			e.store = s
			if _, err := os.Stat(layerDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the lost layer's directory is left after the restart: %v", err)
			}
			if _, err := s.CreateRootfs(ctx, "ctr", img.ID, RootfsOptions{}); err != nil {
				t.Errorf("CreateRootfs with the lost id: %v", err)
			}
		})
	}
}
