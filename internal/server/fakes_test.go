package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/runtime"
)

// fakeNetwork records the CNI calls the server makes.
type fakeNetwork struct {
	mu        sync.Mutex
	calls     []string
	setupErr  error
	added     map[string]bool
	statusErr error
}

func newFakeNetwork() *fakeNetwork { return &fakeNetwork{added: map[string]bool{}} }

func (f *fakeNetwork) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeNetwork) Status(context.Context) error { return f.statusErr }
func (f *fakeNetwork) UpdatePodCIDR(ctx context.Context, c string) error {
	f.record("cidr " + c)
	return nil
}

func (f *fakeNetwork) Setup(ctx context.Context, att network.Attachment) (*network.Settings, error) {
	f.record("add " + att.ID)
	f.mu.Lock()
	defer f.mu.Unlock()
	// Like a plugin that fails half way: the reservation is made first.
	f.added[att.ID] = true
	if f.setupErr != nil {
		return nil, f.setupErr
	}
	return &network.Settings{IPAddress: "10.1.0.2", IPPrefixLen: 24, Gateway: "10.1.0.1"}, nil
}

func (f *fakeNetwork) Teardown(ctx context.Context, att network.Attachment) error {
	f.record("del " + att.ID)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.added, att.ID)
	return nil
}

func (f *fakeNetwork) Cached() ([]network.CachedAttachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []network.CachedAttachment
	for id := range f.added {
		out = append(out, network.CachedAttachment{ID: id})
	}
	return out, nil
}

func (f *fakeNetwork) TeardownCached(ctx context.Context, c network.CachedAttachment) error {
	return f.Teardown(ctx, network.Attachment{ID: c.ID})
}

func (f *fakeNetwork) ConfigInUse(context.Context) network.ConfigInUse { return network.ConfigInUse{} }
func (f *fakeNetwork) ReleaseMasquerade(context.Context) error         { return nil }

func (f *fakeNetwork) holding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.added)
}

// fakeRuntime keeps containers in a map and records every call ("verb
// id"); each verb can be made to fail (failOn) or Start to block.
type fakeRuntime struct {
	mu         sync.Mutex
	containers map[string]runtime.Status
	fail       map[string]error
	calls      []string
	startDelay time.Duration
	exits      map[string]chan struct{}
	// stateGate, when set, holds every State call until it is closed: a
	// runtime that is slow to answer while the daemon recovers.
	stateGate chan struct{}
	// execResult, when set, is what ExecSync answers.
	execResult *runtime.ExecResult
	updates    map[string]*specs.LinuxResources // by ID
	bundles    map[string]string                // by ID, as created
	// onDelete, when set, is called with the ID of each container
	// deleted: a sandbox container's process leaves its namespace.
	onDelete func(id string)
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		containers: map[string]runtime.Status{}, fail: map[string]error{},
		exits: map[string]chan struct{}{}, updates: map[string]*specs.LinuxResources{},
	}
}

// failOn makes verb ("create", "start", "stop", "delete", "exec",
// "execsync", "attach", "update", "reopenlog") fail with err; nil: succeed
// again.
func (f *fakeRuntime) failOn(verb string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[verb] = err
}

// enter records a call and returns the failure set for verb; the caller
// holds f.mu.
func (f *fakeRuntime) enter(verb, id string) error {
	f.calls = append(f.calls, verb+" "+id)
	return f.fail[verb]
}

// called counts the calls of verb on id.
func (f *fakeRuntime) called(verb, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == verb+" "+id {
			n++
		}
	}
	return n
}

func (f *fakeRuntime) Create(ctx context.Context, opts runtime.CreateOptions) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.containers[opts.ID]; ok {
		return 0, fmt.Errorf("container %s: %w", opts.ID, errdefs.ErrAlreadyExists)
	}
	f.containers[opts.ID] = runtime.StatusCreated
	f.exits[opts.ID] = make(chan struct{})
	if f.bundles == nil {
		f.bundles = map[string]string{}
	}
	f.bundles[opts.ID] = opts.BundleDir
	if err := f.enter("create", opts.ID); err != nil {
		return 0, err // after making state, as a half-failed create does
	}
	return 4242, nil
}

// ListContainers lists what the fake holds, as runc list does.
func (f *fakeRuntime) Close() error { return nil }

func (f *fakeRuntime) ListContainers(context.Context) ([]runtime.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []runtime.State
	for id, st := range f.containers {
		out = append(out, runtime.State{ID: id, Status: st, Bundle: f.bundles[id]})
	}
	return out, nil
}

func (f *fakeRuntime) Start(ctx context.Context, id string) error {
	if f.startDelay > 0 {
		time.Sleep(f.startDelay)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("start", id); err != nil {
		return err
	}
	f.containers[id] = runtime.StatusRunning
	return nil
}

func (f *fakeRuntime) Stop(ctx context.Context, id string, timeout time.Duration, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("stop", id); err != nil {
		return err
	}
	if _, ok := f.containers[id]; ok && f.containers[id] != runtime.StatusStopped {
		f.containers[id] = runtime.StatusStopped
		close(f.exits[id])
	}
	return nil
}

func (f *fakeRuntime) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("delete", id); err != nil {
		return err
	}
	if _, ok := f.containers[id]; ok && f.onDelete != nil {
		f.onDelete(id)
	}
	delete(f.containers, id)
	return nil
}

func (f *fakeRuntime) State(ctx context.Context, id string) (runtime.State, error) {
	f.mu.Lock()
	gate := f.stateGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.containers[id]
	if !ok {
		return runtime.State{}, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return runtime.State{Status: st, Pid: 4242}, nil
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	f.mu.Lock()
	ch, ok := f.exits[id]
	f.mu.Unlock()
	if !ok {
		return runtime.ExitStatus{}, errors.New("no such container")
	}
	select {
	case <-ch:
		return runtime.ExitStatus{Code: 137, ExitedAt: time.Now()}, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}

func (f *fakeRuntime) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.containers)
}

// exit makes container id's process exit by itself.
func (f *fakeRuntime) exit(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.containers[id] != runtime.StatusStopped {
		f.containers[id] = runtime.StatusStopped
		close(f.exits[id])
	}
}

func (f *fakeRuntime) Exited(id string) (runtime.ExitStatus, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return runtime.ExitStatus{Code: 137, ExitedAt: time.Now()}, f.containers[id] == runtime.StatusStopped, nil
}

// fakeImages is an offline image store: pulls fail but of the images in
// registry, imports succeed, and root filesystems are directories under a
// temp dir. CreateRootfs, RemoveRootfs, Remove, List and FsInfo can be made
// to fail (failOn).
type fakeImages struct {
	mu       sync.Mutex
	dir      string
	images   map[string]*image.Image // by ref
	rootfses map[string]string
	imports  int
	registry map[string]*image.Image // pullable, by ref
	lastAuth *image.Auth
	fail     map[string]error

	// rootfsOpts are the options of each CreateRootfs, by id.
	rootfsOpts map[string]image.RootfsOptions
}

func newFakeImages(dir string) *fakeImages {
	return &fakeImages{dir: dir, images: map[string]*image.Image{}, rootfses: map[string]string{},
		registry: map[string]*image.Image{}, fail: map[string]error{}}
}

// failOn makes method ("createrootfs", "removerootfs", "remove", "list",
// "fsinfo") fail with err; nil: succeed again.
func (f *fakeImages) failOn(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

func (f *fakeImages) PullForNamespace(ctx context.Context, ref string, auth *image.Auth, _ string) (*image.Image, error) {
	return f.Pull(ctx, ref, auth)
}

func (f *fakeImages) Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastAuth = auth
	img, ok := f.registry[ref]
	if !ok {
		return nil, fmt.Errorf("pull %s: registry unreachable: %w", ref, errdefs.ErrUnavailable)
	}
	f.images[ref] = img
	return img, nil
}

func (f *fakeImages) Status(ctx context.Context, ref string) (*image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for r, img := range f.images {
		if r == ref || img.ID == ref {
			return img, nil
		}
	}
	return nil, fmt.Errorf("image %s: %w", ref, errdefs.ErrNotFound)
}

// List lists the images, or the one filter names.
func (f *fakeImages) List(ctx context.Context, filter string) ([]*image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["list"]; err != nil {
		return nil, err
	}
	var out []*image.Image
	for ref, img := range f.images {
		if filter == "" || filter == ref || filter == img.ID {
			out = append(out, img)
		}
	}
	return out, nil
}

func (f *fakeImages) Remove(ctx context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["remove"]; err != nil {
		return err
	}
	if _, ok := f.images[ref]; !ok {
		return fmt.Errorf("image %s: %w", ref, errdefs.ErrNotFound)
	}
	delete(f.images, ref)
	return nil
}

func (f *fakeImages) FsInfo(ctx context.Context) (image.FsUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["fsinfo"]; err != nil {
		return image.FsUsage{}, err
	}
	return image.FsUsage{Mountpoint: f.dir, UsedBytes: 1, InodesUsed: 1}, nil
}

func (f *fakeImages) ImportFromFiles(ctx context.Context, ref string, files []image.File, cfg image.ImageConfig) (*image.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.imports++
	sum := sha256.Sum256([]byte(ref))
	img := &image.Image{ID: hex.EncodeToString(sum[:]), RepoTags: []string{ref}, Config: cfg}
	f.images[ref] = img
	return img, nil
}

func (f *fakeImages) CreateRootfs(ctx context.Context, id, imageID string, opts image.RootfsOptions) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := filepath.Join(f.dir, id)
	if err := os.MkdirAll(filepath.Join(p, "bin"), 0o755); err != nil {
		return "", err
	}
	// The programs the tests run, which CreateContainer looks for.
	for _, prog := range []string{"sh", "sleep", "true", "fail"} {
		if err := os.WriteFile(filepath.Join(p, "bin", prog), nil, 0o755); err != nil {
			return "", err
		}
	}
	f.rootfses[id] = p
	if f.rootfsOpts == nil {
		f.rootfsOpts = map[string]image.RootfsOptions{}
	}
	f.rootfsOpts[id] = opts
	if err := f.fail["createrootfs"]; err != nil {
		return "", err // after making storage, as a half-failed create does
	}
	return p, nil
}

func (f *fakeImages) RemoveRootfs(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["removerootfs"]; err != nil {
		return err
	}
	delete(f.rootfses, id)
	return os.RemoveAll(filepath.Join(f.dir, id))
}

func (f *fakeImages) Rootfses(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.rootfses {
		ids = append(ids, id)
	}
	return ids, nil
}

func (f *fakeImages) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.rootfses)
}

func (f *fakeImages) RootfsUsage(ctx context.Context, id string) (image.FsUsage, error) {
	return image.FsUsage{UsedBytes: 4096, InodesUsed: 1}, nil
}

// The fake mounts no image volumes (fakeVolumeImages does): it holds none,
// so releasing and collecting find nothing.
func (f *fakeImages) MountVolume(ctx context.Context, ref, owner string) (string, string, error) {
	return "", "", fmt.Errorf("image volumes: the fake image store cannot mount images: %w", errdefs.ErrNotImplemented)
}
func (f *fakeImages) HoldVolume(ctx context.Context, imageID, owner string) error { return nil }
func (f *fakeImages) ReleaseVolumes(ctx context.Context, owner string) error      { return nil }
func (f *fakeImages) CollectVolumes(ctx context.Context) ([]string, error)        { return nil, nil }

// The reloadable settings: nothing to apply.
func (f *fakeImages) SetRegistries(image.Registries) {}
func (f *fakeImages) SetPinned(refs []string) error  { return nil }

func (f *fakeRuntime) ExecSync(ctx context.Context, id string, opts runtime.ExecOptions) (runtime.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("execsync", id); err != nil {
		return runtime.ExecResult{}, err
	}
	if f.execResult != nil {
		return *f.execResult, nil
	}
	return runtime.ExecResult{Stdout: []byte("ok\n")}, nil
}

// Exec prints its command line and exits with 3 when the command is
// "fail".
func (f *fakeRuntime) Exec(ctx context.Context, id string, opts runtime.ExecStreamOptions) (int32, error) {
	f.mu.Lock()
	err := f.enter("exec", id)
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if opts.Stdout != nil {
		fmt.Fprintf(opts.Stdout, "%s tty=%v\n", strings.Join(opts.Args, " "), opts.Tty)
	}
	if opts.Args[0] == "fail" {
		return 3, nil
	}
	return 0, nil
}

// Attach prints the container's stdio settings.
func (f *fakeRuntime) Attach(ctx context.Context, id string, opts runtime.AttachOptions) error {
	f.mu.Lock()
	err := f.enter("attach", id)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if opts.Stdout != nil {
		fmt.Fprintf(opts.Stdout, "attached tty=%v stdinOnce=%v stdin=%v\n", opts.Tty, opts.StdinOnce, opts.Stdin != nil)
	}
	return nil
}

func (f *fakeRuntime) Update(ctx context.Context, id string, r *specs.LinuxResources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("update", id); err != nil {
		return err
	}
	f.updates[id] = r
	return nil
}

func (f *fakeRuntime) ReopenLog(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enter("reopenlog", id)
}
