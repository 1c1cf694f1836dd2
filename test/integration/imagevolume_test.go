package integration

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/store"
	"github.com/podbay/podbay/test/testimage"
)

// volumeImageSpec is an image made for image volumes: one layer (no base),
// a file, a script and an absolute symlink.
func volumeImageSpec() testimage.Spec {
	return testimage.Spec{
		Repository: "test/volume-data",
		Tags:       []string{"v1"},
		Base:       testimage.BaseScratch,
		Files: []testimage.File{
			{Path: "/srv/data/hello.txt", Content: []byte("hello from the image volume\n")},
			{Path: "/srv/data/run.sh", Content: []byte("#!/bin/sh\necho ran from the volume\n"), Mode: 0o755},
			{Path: "/srv/escape", Mode: fs.ModeSymlink, Link: "/etc"},
			{Path: "/srv/afile", Content: []byte("x")},
		},
	}
}

// ctrImageVolume mounts image (as the kubelet passes it: PullImage's
// image ref) at containerPath, sub path sub.
func ctrImageVolume(image, containerPath, sub string) ctrMod {
	return func(c *runtimeapi.ContainerConfig) {
		c.Mounts = append(c.Mounts, &runtimeapi.Mount{
			ContainerPath: containerPath, Image: &runtimeapi.ImageSpec{Image: image},
			ImageSubPath: sub, Readonly: true,
		})
	}
}

// TestImageVolume: an image mounted read-only into a container (whole and
// a sub path), readable and its programs runnable but not writable; its
// image cannot be removed while mounted, and can once the container is
// gone, with no mount left. Refused volumes leave nothing behind, and a
// daemon killed half-way through a create releases the mount after its
// restart.
func TestImageVolume(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	push(t, images.reg, volumeImageSpec())
	volRef := images.reg.Reference("test/volume-data:v1")
	volID := e.pullImage(t, volRef, nil)
	pod := e.runTestPod(t, "imagevol")

	// Refused: nothing is made, nothing mounted.
	for _, tc := range []struct {
		name string
		mod  ctrMod
		want codes.Code
	}{
		{"unknown image", ctrImageVolume(images.reg.Reference("test/absent:v1"), "/vol", ""), codes.NotFound},
		{"missing sub path", ctrImageVolume(volID, "/vol", "srv/nope"), codes.NotFound},
		{"sub path leaving the image", ctrImageVolume(volID, "/vol", "srv/escape"), codes.InvalidArgument},
		{"sub path with ..", ctrImageVolume(volID, "/vol", "srv/../.."), codes.InvalidArgument},
		{"sub path is a file", ctrImageVolume(volID, "/vol", "srv/afile"), codes.InvalidArgument},
		{"host path too", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = append(c.Mounts, &runtimeapi.Mount{ContainerPath: "/vol", HostPath: "/tmp", Image: &runtimeapi.ImageSpec{Image: volID}})
		}, codes.InvalidArgument},
	} {
		cfg := containerConfig("refused", ref, ctrCommand("sleep", "1000"), tc.mod)
		if id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg); code(err) != tc.want {
			t.Errorf("%s: CreateContainer = %s, %v; want %v", tc.name, short(id), err, tc.want)
		}
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers after refused creates: %v", containerIDs(got))
	}
	e.assertNoLeaksExcept(t, pod.id)

	cfg := containerConfig("reader", ref, ctrCommand("sleep", "1000"),
		ctrImageVolume(volID, "/vol", ""), ctrImageVolume(volRef, "/sub", "srv/data"))
	cfg.Mounts[0].Readonly = false // read-only whatever the request says
	id, _ := e.runContainer(t, pod, cfg)

	if got := e.execOutput(t, id, "cat", "/vol/srv/data/hello.txt"); got != "hello from the image volume\n" {
		t.Errorf("/vol/srv/data/hello.txt = %q", got)
	}
	if got := e.execOutput(t, id, "cat", "/sub/hello.txt"); got != "hello from the image volume\n" {
		t.Errorf("/sub/hello.txt = %q", got)
	}
	if got := e.execOutput(t, id, "/sub/run.sh"); got != "ran from the volume\n" {
		t.Errorf("/sub/run.sh = %q", got)
	}
	for _, path := range []string{"/vol/new", "/sub/new", "/vol/srv/data/hello.txt"} {
		resp := e.execSync(t, id, 10, "sh", "-c", "echo x > "+path)
		if resp.ExitCode == 0 || !strings.Contains(string(resp.Stderr), "Read-only file system") {
			t.Errorf("write to %s: exit %d, stderr %q; want a read-only file system error", path, resp.ExitCode, resp.Stderr)
		}
	}
	mounts := e.execOutput(t, id, "cat", "/proc/self/mounts")
	for _, dest := range []string{"/vol", "/sub"} {
		var opts string
		for _, line := range strings.Split(mounts, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[1] == dest {
				opts = f[3]
			}
		}
		for _, o := range []string{"ro", "nosuid", "nodev"} {
			if !strings.Contains(","+opts+",", ","+o+",") {
				t.Errorf("mount %s options %q lack %s", dest, opts, o)
			}
		}
	}

	st, _ := e.containerStatus(t, id)
	if len(st.Mounts) != 2 {
		t.Fatalf("status mounts: %v", st.Mounts)
	}
	for i, sub := range []string{"", "srv/data"} {
		m := st.Mounts[i]
		if m.GetImage().GetImage() != volID || m.ImageSubPath != sub || !m.Readonly || m.HostPath != "" {
			t.Errorf("status mount %d = %v; want image %s, sub path %q, read-only", i, m, volID, sub)
		}
	}

	// The leak check sees the image mount: it is one while no container
	// holds it.
	var seen bool
	for _, l := range e.findLeaks(keepSet([]string{pod.id})) {
		seen = seen || (l.kind == "mount" && strings.HasPrefix(l.path, filepath.Join(e.storageRoot, "overlay")+"/"))
	}
	if !seen {
		t.Error("the leak check does not see the image volume's mount")
	}

	for _, r := range []string{volID, volRef} {
		if err := e.tryRemoveImage(r); code(err) != codes.FailedPrecondition {
			t.Errorf("RemoveImage %s of a mounted image = %v, want FailedPrecondition", r, err)
		}
	}
	e.requireImage(t, volRef, volID)

	// A daemon killed once the runtime made a container with the volume:
	// the restart undoes the container and releases the mount.
	e.restart("container.create=kill")
	half := containerConfig("half-made", ref, ctrCommand("sleep", "1000"), ctrImageVolume(volID, "/vol", ""))
	if _, err := e.tryCreateContainer(rpcCtx(t), pod, half); code(err) != codes.Unavailable {
		t.Errorf("CreateContainer with container.create=kill: %v, want Unavailable (daemon gone)", err)
	}
	e.waitExit(10 * time.Second)
	e.restart("")
	if err := e.tryRemoveImage(volID); code(err) != codes.FailedPrecondition {
		t.Errorf("RemoveImage of an image mounted by a reloaded container = %v, want FailedPrecondition", err)
	}
	if got := e.execOutput(t, id, "cat", "/sub/hello.txt"); got != "hello from the image volume\n" {
		t.Errorf("/sub/hello.txt after the restarts = %q", got)
	}

	e.stopContainer(t, id, 0)
	e.removeContainer(t, id)
	e.eventuallyNoLeaks(t, 20*time.Second, pod.id)
	e.removeImage(t, volID)
	e.requireNoImage(t, volRef)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestImageVolumeRecordLost: a container whose record cannot be read at
// start-up (it is set aside) holds nothing: the restarted daemon's garbage
// collection removes the container and finds its image mount, which no
// record holds, and unmounts it; the image can then be removed.
func TestImageVolumeRecordLost(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	push(t, images.reg, volumeImageSpec())
	volID := e.pullImage(t, images.reg.Reference("test/volume-data:v1"), nil)
	pod := e.runTestPod(t, "imagevol-lost")
	id, _ := e.runContainer(t, pod, containerConfig("lost", ref, ctrCommand("sleep", "1000"),
		ctrImageVolume(volID, "/vol", "srv/data")))
	if got := e.execOutput(t, id, "cat", "/vol/hello.txt"); got != "hello from the image volume\n" {
		t.Errorf("/vol/hello.txt = %q", got)
	}

	e.kill9()
	db, err := store.Open(filepath.Join(e.rootDir, "podbay.db"))
	if err != nil {
		t.Fatal(err)
	}
	// A version no daemon reads: recovery quarantines the record.
	err = db.Put("containers", id, 1<<20, map[string]string{"id": id})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	e.restart("")
	e.eventuallyNoLeaks(t, 30*time.Second, pod.id)
	e.removeImage(t, volID)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
