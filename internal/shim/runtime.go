// Package shim drives a containerd shim v2 binary over ttrpc (the task API
// containerd.task.v2.Task): Kata Containers' containerd-shim-kata-v2, or
// containerd-shim-runc-v2, which speaks the same API. It is a runtime
// handler with the contract of internal/runtime.
//
// One shim serves one pod. The sandbox container's Create starts it; the
// pod's other containers are created in it, found through the
// io.kubernetes.cri.sandbox-id annotation of their bundle (containerd 2
// does the same: it skips the shim's start command for pod containers);
// the sandbox container's Delete shuts it down.
//
// podbay owns the containers' stdio: it makes a FIFO per stream and hands
// their paths to the shim, which opens the other ends; podbay copies
// stdout and stderr into the CRI log file and to attached clients.
// Everything needed to take over after the daemon restarted is on disk
// under Config.StateDir, which belongs on a tmpfs (the shims do not
// survive a reboot either):
//
//	events.sock                    the ttrpc events service the shims publish to (their TTRPC_ADDRESS)
//	pods/<pod>/pod.json            the shim's ttrpc address and pid, and the sandbox bundle
//	containers/<id>/container.json the container's pod, bundle, log path and stdio settings
//	containers/<id>/stdin, stdout, stderr  its stdio FIFOs
//	containers/<id>/exit           its exit status and time, once known
//	containers/<id>/exec-<n>/      the FIFOs of one exec under way
//	cleanup-*/                     short-lived: the working directory of a dead shim's delete
//	quarantine/                    records New could not read, moved aside
//
// The shim works in the sandbox bundle: podbay makes the FIFO "log" there,
// through which it reads the shim's own log, and the shim writes "address"
// and its runtime's files (runc-v2: "runtime", "options.json", "init.pid",
// "log.json"). When the shim reports that a container was killed for lack
// of memory, podbay creates <bundle>/oom, which runtime.OOMKilled reads.
//
// The shims get the events socket's path as their daemon address
// (-address); runc-v2 and Kata name their own sockets after it:
// /run/containerd/s/<sha256 of "<address>/<namespace>/<pod>">.
//
// Shims are not children of the daemon: the start command daemonises them
// (they are reparented to init) and they outlive the daemon. Close leaves
// them running; a new Runtime on the same StateDir reconnects to them.
// While no Runtime runs, a running container's output waits in its FIFO
// (runc-v2 keeps a read end of its own open, so its writes block rather
// than fail once the FIFO is full) and nothing is lost. What a container
// wrote just before it exited while no Runtime ran is lost when the shim
// closes the FIFO, as with containerd.
package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/runtime"
)

// Defaults for the zero values of the corresponding Config fields.
const (
	DefaultNamespace      = "podbay"
	DefaultCommandTimeout = time.Minute
	DefaultCreateTimeout  = 2 * time.Minute
)

const (
	// killWait bounds the wait for a container to die after SIGKILL.
	killWait = 10 * time.Second
	// drainTimeout is how long an exit waits for the container's output
	// to be copied before it is reported.
	drainTimeout = 2 * time.Second
	// shimExitGrace is how long a shim gets to exit after Shutdown before
	// it is killed.
	shimExitGrace = 3 * time.Second
)

// Config of one shim runtime handler. Paths must be absolute.
type Config struct {
	// Name is the runtime handler name, e.g. "kata".
	Name string
	// ShimPath is the shim binary.
	ShimPath string
	// StateDir holds podbay's state for this handler (see the package
	// documentation); it is created if missing. It should be on a tmpfs,
	// e.g. /run/podbay/shims/<name>, and its path short: the events socket
	// in it must fit a unix socket address.
	StateDir string
	// Namespace is the containerd namespace given to the shims. "" means
	// DefaultNamespace.
	Namespace string
	// Options is sent as CreateTaskRequest.Options for every task, and
	// on the standard input of the shim's start command, as containerd
	// does (RuncOptions, ConfigPathOptions). nil sends none.
	Options *anypb.Any
	// Units stops the systemd unit of a dead task's container (systemd
	// driver); nil under cgroupfs.
	Units runtime.UnitStopper
	// CommandTimeout bounds each call to a shim that has no tighter
	// deadline. 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// CreateTimeout bounds Create, shim start included. 0 means
	// DefaultCreateTimeout.
	CreateTimeout time.Duration
	// SpecVersion is the OCI runtime-spec version the OCI runtime behind
	// the shim implements (containerd-shim-runc-v2 runs runc, or crun as
	// its BinaryName), written as the bundles' ociVersion: crun before 1.9
	// refuses any but a 1.0 one. "" = podbay's own.
	SpecVersion string
}

// Features reports the runtime-spec version of the runtime behind the
// shim, for the bundles podbay writes (see Config.SpecVersion). Nothing
// else: a vm handler reports no optional features (see
// live.Config.Features).
func (r *Runtime) Features() ocifeatures.Handler {
	return ocifeatures.Handler{SpecVersion: r.cfg.SpecVersion}
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		return c, fmt.Errorf("name is empty: %w", errdefs.ErrInvalidArgument)
	}
	for _, p := range []struct{ field, path string }{{"ShimPath", c.ShimPath}, {"StateDir", c.StateDir}} {
		if !filepath.IsAbs(p.path) {
			return c, fmt.Errorf("%s %q is not an absolute path: %w", p.field, p.path, errdefs.ErrInvalidArgument)
		}
	}
	fi, err := os.Stat(c.ShimPath)
	if err != nil {
		return c, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return c, fmt.Errorf("%s is not an executable file: %w", c.ShimPath, errdefs.ErrInvalidArgument)
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if !runtime.ValidName(c.Namespace) {
		return c, fmt.Errorf("namespace %q: %w", c.Namespace, errdefs.ErrInvalidArgument)
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	if c.CreateTimeout <= 0 {
		c.CreateTimeout = DefaultCreateTimeout
	}
	return c, nil
}

// The capabilities a vm handler offers beyond runtime.Runtime.
var (
	_ runtime.Runtime         = (*Runtime)(nil)
	_ runtime.FeaturesRuntime = (*Runtime)(nil)
	_ runtime.TaskReporter    = (*Runtime)(nil)
	_ runtime.SandboxUpdater  = (*Runtime)(nil)
)

// Runtime drives one shim runtime handler. It is safe for concurrent use;
// calls for the same container ID must be serialized by the caller (the
// CRI server's per-container state does that), and no container may be
// created in a pod whose sandbox is being deleted.
type Runtime struct {
	cfg Config
	// exe is the daemon's own binary, the shims' -publish-binary. They
	// publish through TTRPC_ADDRESS and never run it.
	exe    string
	events *eventServer
	// ctx ends at Close; background work (exit watchers, shim monitors,
	// copies) runs on it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// restoring counts the pod take-overs under way (see restore), which
	// run in restoreSlots, at most restoreWorkers at a time.
	restoring    sync.WaitGroup
	restoreSlots chan struct{}
	// sweep is closed when the background take-over starts (see
	// restore).
	sweep     chan struct{}
	sweepOnce sync.Once

	mu         sync.Mutex
	pods       map[string]*pod       // by sandbox ID; guarded by mu
	containers map[string]*container // guarded by mu

	closeOnce sync.Once
	closeErr  error
}

// errClosed is returned by calls under way when the Runtime is closed.
var errClosed = fmt.Errorf("runtime closed: %w", errdefs.ErrUnavailable)

// New validates cfg, creates StateDir if missing, serves the events
// socket and takes over the pods recorded in StateDir: it reconnects to
// their shims, resumes copying the output of their live containers and
// records the exits that happened while no Runtime was running. It returns
// once the records are read; the take-over goes on in the background, and
// a call on a recorded container (Exited included) waits for its pod's.
// Call Close to stop.
func New(cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("runtime handler %q: %w", cfg.Name, err)
	}
	for _, dir := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, podsDir), filepath.Join(cfg.StateDir, containersDir)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("runtime handler %q: %w", cfg.Name, err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("runtime handler %q: own executable: %w", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(log.With(context.Background(), "handler", cfg.Name))
	r := &Runtime{
		cfg:          cfg,
		exe:          exe,
		ctx:          ctx,
		cancel:       cancel,
		pods:         make(map[string]*pod),
		containers:   make(map[string]*container),
		restoreSlots: make(chan struct{}, restoreWorkers),
		sweep:        make(chan struct{}),
	}
	r.events, err = serveEvents(r.eventsSocket(), r.handleEvent)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("runtime handler %q: %w", cfg.Name, err)
	}
	r.restore()
	return r, nil
}

// Name returns the runtime handler name.
func (r *Runtime) Name() string { return r.cfg.Name }

// Close stops serving events, copying output and watching exits, and
// drops the connections to the shims. The shims and their containers keep
// running: a new Runtime on the same StateDir takes them over. Calls under
// way return errors.
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() {
		r.cancel()
		// Take-overs cut short leave their pods to the next Runtime.
		r.restoring.Wait()
		r.mu.Lock()
		pods := make([]*pod, 0, len(r.pods))
		for _, p := range r.pods {
			pods = append(pods, p)
		}
		containers := make([]*container, 0, len(r.containers))
		for _, c := range r.containers {
			containers = append(containers, c)
		}
		r.mu.Unlock()
		for _, c := range containers {
			c.io.close()
		}
		for _, p := range pods {
			p.disconnect()
		}
		r.closeErr = r.events.close()
		r.wg.Wait()
	})
	return r.closeErr
}

// lookup returns the container with id, or an error wrapping ErrNotFound,
// once its pod is taken over (see awaitRestore) or ctx ends.
func (r *Runtime) lookup(ctx context.Context, id string) (*container, error) {
	if err := runtime.ValidateID(id); err != nil {
		return nil, err
	}
	r.mu.Lock()
	c := r.containers[id]
	r.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	if err := r.awaitRestore(ctx, c.pod); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	return c, nil
}

// commandContext bounds one call to a shim by CommandTimeout.
func (r *Runtime) commandContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.CommandTimeout)
}

// timedOut explains err, the error of a call bounded by cctx (a child of
// ctx with the handler's timeout), when that timeout has passed. The shim
// gets the deadline with the call and may answer first, with the error of
// the runtime it killed then: the call is still a timeout, and is
// classified as one.
func timedOut(ctx, cctx context.Context, timeout time.Duration, err error) error {
	deadline, ok := cctx.Deadline()
	if err == nil || ctx.Err() != nil || !ok || time.Now().Before(deadline) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within the runtime handler's timeout (%s): %w", timeout, err)
	}
	return fmt.Errorf("no answer within the runtime handler's timeout (%s): %w: %v", timeout, context.DeadlineExceeded, err)
}

// removeIfExists removes path, which need not exist.
func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
