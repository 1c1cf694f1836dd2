package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

// Files of the shim in the sandbox bundle, its working directory.
const (
	shimLogFifo     = "log"     // made by podbay; the shim's stderr
	shimAddressFile = "address" // written by the shim's start command
)

// shimBundleFiles are the files a runc-v2 shim leaves in a container's
// bundle, removed when the container is deleted.
var shimBundleFiles = []string{"runtime", "options.json", "init.pid", "log.json", runtime.OOMMarker}

// pod is one pod's shim.
type pod struct {
	id     string
	bundle string
	dir    string
	// ctx carries the logger, with the pod's ID.
	ctx context.Context

	// proc is the shim process, set once connected and not changed
	// afterwards; nil when the shim was gone before it could be reached.
	proc *procfs.Process
	log  *fifoReader // the shim's log FIFO, nil if not open

	mu      sync.Mutex
	address string              // guarded by mu: the shim's ttrpc address, "" until known
	client  *ttrpc.Client       // guarded by mu; nil when not connected
	tasks   taskapi.TaskService // guarded by mu
	lost    chan struct{}       // guarded by mu; closed when client's connection ends
	closed  bool                // guarded by mu: disconnect was called

	// dead is closed once the shim process is known to be gone.
	dead     chan struct{}
	deadOnce sync.Once
	// stopping is set when podbay shuts the shim down: its exit is
	// expected.
	stopping atomic.Bool

	// restore is the take-over of a pod recorded by an earlier Runtime
	// (see awaitRestore); nil for a pod this Runtime started. Set before
	// the pod is shared.
	restore *podRestore

	// releaseMu serialises releaseIfDone; released is set once every
	// task of the stopped pod is deleted and the shim is being shut down.
	releaseMu sync.Mutex
	released  bool // guarded by releaseMu
}

func (r *Runtime) newPod(id, bundle string) *pod {
	return &pod{
		id:     id,
		bundle: bundle,
		dir:    r.podDir(id),
		ctx:    log.With(r.ctx, "pod", id),
		dead:   make(chan struct{}),
	}
}

func (p *pod) isDead() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

func (p *pod) markDead() { p.deadOnce.Do(func() { close(p.dead) }) }

func (p *pod) record() podRecord {
	rec := podRecord{Version: recordVersion, ID: p.id, Bundle: p.bundle, Address: p.shimAddress()}
	if p.proc != nil {
		rec.Pid = p.proc.Pid()
	}
	return rec
}

// task returns the shim's task service, reconnecting if the connection
// broke while the shim lives on.
func (p *pod) task(ctx context.Context) (taskapi.TaskService, error) {
	if p.isDead() {
		return nil, errShimGone
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	if p.client != nil {
		select {
		case <-p.lost:
			p.client.Close()
			p.client, p.tasks = nil, nil
		default:
			tasks := p.tasks
			p.mu.Unlock()
			return tasks, nil
		}
	}
	address := p.address
	p.mu.Unlock()
	if address == "" {
		return nil, errShimGone
	}

	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := dialShim(dctx, address)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", errShimGone, err)
	}
	lost := make(chan struct{})
	client := ttrpc.NewClient(conn, ttrpc.WithOnClose(func() { close(lost) }))

	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		client.Close()
		return nil, errClosed
	case p.client != nil:
		// Another caller reconnected meanwhile.
		client.Close()
		return p.tasks, nil
	}
	p.client, p.tasks, p.lost = client, taskapi.NewTaskClient(client), lost
	return p.tasks, nil
}

// shimAddress returns the shim's ttrpc address, "" if unknown.
func (p *pod) shimAddress() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.address
}

// closeClient drops the connection; task reconnects.
func (p *pod) closeClient() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
		p.client, p.tasks = nil, nil
	}
}

// disconnect drops the connection, stops the shim's monitor and the copy
// of its log; the shim is not affected.
func (p *pod) disconnect() {
	p.mu.Lock()
	p.closed = true
	if p.client != nil {
		p.client.Close()
		p.client, p.tasks = nil, nil
	}
	p.mu.Unlock()
	if p.proc != nil {
		p.proc.Close()
	}
	if p.log != nil {
		p.log.Close()
	}
}

// shimPid returns the shim's pid, 0 when it is gone or unknown.
func (p *pod) shimPid() int {
	if p.proc == nil || p.isDead() {
		return 0
	}
	return p.proc.Pid()
}

// startShim runs the shim's start command in the sandbox bundle, connects
// to the shim it started and records it. On failure nothing is left: the
// shim, if one started, is shut down.
// opts says where the shim goes (CreateOptions.StartMonitor): born in
// the monitor cgroup, placed, or moved there once it runs.
func (r *Runtime) startShim(ctx context.Context, id, bundle string, opts runtime.CreateOptions) (_ *pod, retErr error) {
	p := r.newPod(id, bundle)
	if err := os.RemoveAll(p.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	// Registered first: whatever the start command got done is undone.
	defer undo.OnError(ctx, &retErr, "stop shim", func(ctx context.Context) error {
		return r.stopShim(ctx, p)
	})
	// Recorded before the shim starts, so that a restarted daemon finds
	// (through <bundle>/address) a shim whose start was under way.
	if err := writeRecord(filepath.Join(p.dir, podFile), p.record()); err != nil {
		return nil, err
	}

	// The shim's daemon opens "log" for writing as its stderr and exits
	// if it cannot; containerd makes the FIFO and copies it to its log.
	logPath := filepath.Join(bundle, shimLogFifo)
	if err := mkfifo(logPath); err != nil {
		return nil, fmt.Errorf("make shim log FIFO: %w", err)
	}
	lr, err := openFifoReader(logPath)
	if err != nil {
		return nil, fmt.Errorf("open shim log FIFO: %w", err)
	}
	p.log = lr
	copyShimLog(p.ctx, &r.wg, lr)

	// The start command's daemonised shim is born where the command is.
	spawned := false
	out, err := r.runShimStart(ctx, p, func(cmd *exec.Cmd) (err error) {
		spawned, err = opts.StartMonitor(cmd)
		return err
	})
	if err != nil {
		return nil, err
	}
	address, err := parseBootstrap(out)
	if err != nil {
		return nil, fmt.Errorf("start shim: %w", err)
	}
	p.mu.Lock()
	p.address = address
	p.mu.Unlock()
	if err := r.connect(ctx, p); err != nil {
		return nil, fmt.Errorf("connect to shim at %s: %w", address, err)
	}
	// Before any task: what the shim starts from now on is born there.
	if opts.PlaceMonitor != nil {
		if err := opts.PlaceMonitor(ctx, p.proc.Pid()); err != nil {
			return nil, fmt.Errorf("place shim %d: %w", p.proc.Pid(), err)
		}
	} else if opts.MonitorCgroup != "" && !spawned {
		if err := cgroups.MoveProcess(p.proc.Pid(), opts.MonitorCgroup); err != nil {
			return nil, fmt.Errorf("move shim %d to cgroup %s: %w", p.proc.Pid(), opts.MonitorCgroup, err)
		}
	}
	if err := writeRecord(filepath.Join(p.dir, podFile), p.record()); err != nil {
		return nil, err
	}
	log.G(ctx).Info("shim started", "pod", id, "address", address, "shim_pid", p.proc.Pid())
	return p, nil
}

// runShimStart runs `<shim> … start` for p and returns what it printed.
// start starts the command (exec.Cmd's Start when nil).
func (r *Runtime) runShimStart(ctx context.Context, p *pod, start func(*exec.Cmd) error) ([]byte, error) {
	var stdin []byte
	if r.cfg.Options != nil {
		// As containerd: the Any itself, marshalled.
		b, err := proto.Marshal(r.cfg.Options)
		if err != nil {
			return nil, fmt.Errorf("encode shim options: %w", err)
		}
		stdin = b
	}
	args := r.shimArgs(ctx, p.id)
	args = append(args, "start")
	cmd := r.shimCommand(p.bundle, args)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	log.G(ctx).Debug("starting shim", "pod", p.id, "path", r.cfg.ShimPath, "args", args)
	if err := runBounded(ctx, cmd, start); err != nil {
		return nil, fmt.Errorf("start shim: %w%s", err, outputSuffix(stderr.Bytes(), stdout.Bytes()))
	}
	return stdout.Bytes(), nil
}

// shimArgs are the flags of every shim command for the task id.
func (r *Runtime) shimArgs(ctx context.Context, id string) []string {
	args := []string{
		"-namespace", r.cfg.Namespace,
		"-address", r.eventsSocket(),
		"-publish-binary", r.exe,
		"-id", id,
	}
	if log.G(ctx).Enabled(ctx, slog.LevelDebug) {
		args = append(args, "-debug")
	}
	return args
}

// shimCommand prepares the shim binary with args, in dir, with the
// environment containerd gives it.
func (r *Runtime) shimCommand(dir string, args []string) *exec.Cmd {
	cmd := exec.Command(r.cfg.ShimPath, args...)
	cmd.Dir = dir
	cmd.Env = append(shimEnv(),
		"PWD="+dir,
		"TTRPC_ADDRESS="+r.eventsSocket(),
		"GRPC_ADDRESS="+r.eventsSocket(),
		"NAMESPACE="+r.cfg.Namespace,
		"MAX_SHIM_VERSION="+strconv.Itoa(maxShimVersion),
	)
	// Its own process group: a signal to the daemon's group must not
	// reach it (the daemonised shim gets a group of its own as well).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The daemonised shim does not inherit the output pipes, but a shim
	// that did must not hold the command up.
	cmd.WaitDelay = time.Second
	return cmd
}

// runBounded runs cmd until it exits or ctx ends; then its process group
// is killed. start, if set, starts it in place of cmd.Start.
func runBounded(ctx context.Context, cmd *exec.Cmd, start func(*exec.Cmd) error) error {
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
}

func outputSuffix(outputs ...[]byte) string {
	var parts []string
	for _, b := range outputs {
		if s := strings.TrimSpace(string(b)); s != "" {
			parts = append(parts, truncate(s, 2000))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

// connect connects to the shim at p's address, learns its pid and starts
// watching it.
func (r *Runtime) connect(ctx context.Context, p *pod) error {
	tasks, err := p.task(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	resp, err := tasks.Connect(cctx, &taskapi.ConnectRequest{ID: p.id})
	if err != nil {
		return fmt.Errorf("connect: %w", rpcError(err))
	}
	proc, err := procfs.OpenProcess(int(resp.ShimPid))
	if err != nil {
		return fmt.Errorf("shim process %d: %w", resp.ShimPid, err)
	}
	p.proc = proc
	r.monitorShim(p)
	return nil
}

// monitorShim marks p dead when its process exits: the pod's containers
// are then reported exited (exit watchers), and the socket the shim left
// is removed.
func (r *Runtime) monitorShim(p *pod) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := p.proc.Wait(); err != nil {
			return // closed: the Runtime or the pod stops watching
		}
		p.markDead()
		if p.stopping.Load() {
			log.G(p.ctx).Debug("shim exited", "shim_pid", p.proc.Pid())
		} else {
			log.G(p.ctx).Warn("shim died; its containers are reported exited", "shim_pid", p.proc.Pid())
		}
		p.closeClient()
		if err := removeShimSocket(p.shimAddress()); err != nil {
			log.G(p.ctx).Warn("remove dead shim's socket", "err", err)
		}
	}()
}

// removeShimSocket removes the socket file of a shim that is gone.
func removeShimSocket(address string) error {
	path, ok := socketPath(address)
	if !ok {
		return nil
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s is not a socket", path)
	}
	return removeIfExists(path)
}

// stopShim shuts p's shim down, whatever state it is in: asks it to exit,
// kills it by its pidfd if it does not within shimExitGrace, and removes
// its socket, its files in the bundle and the pod's state. The shim only
// exits once it serves no task: the pod's tasks must be deleted first.
func (r *Runtime) stopShim(ctx context.Context, p *pod) error {
	p.stopping.Store(true)
	address := p.shimAddress()
	if p.proc == nil && address == "" {
		// The start command may have got as far as the address file.
		if b, err := os.ReadFile(filepath.Join(p.bundle, shimAddressFile)); err == nil {
			address = strings.TrimSpace(string(b))
			p.mu.Lock()
			p.address = address
			p.mu.Unlock()
		}
	}
	if p.proc == nil && address != "" && !p.isDead() {
		if err := r.connect(ctx, p); err != nil {
			log.G(ctx).Debug("connect to shim to stop it", "pod", p.id, "err", err)
			// Never reached, and nothing listens on its socket: the
			// shim died between its start and the connect, or its
			// start was cut short after it made the socket. No monitor
			// watches it, so its socket is removed here.
			if !shimListening(ctx, address) {
				p.markDead()
			}
		}
	}
	if p.proc != nil && !p.isDead() {
		if tasks, err := p.task(ctx); err == nil {
			cctx, cancel := r.commandContext(ctx)
			// It answers, or closes the connection on its way out.
			_, err := tasks.Shutdown(cctx, &taskapi.ShutdownRequest{ID: p.id})
			cancel()
			if err != nil && !isConnectionError(err) {
				log.G(ctx).Debug("shim shutdown", "pod", p.id, "err", err)
			}
		}
		if !waitClosed(ctx, p.dead, shimExitGrace) {
			log.G(ctx).Warn("shim did not exit after shutdown, killing it", "pod", p.id, "shim_pid", p.proc.Pid())
			if err := p.proc.Signal(syscall.SIGKILL); err != nil {
				return fmt.Errorf("kill shim %d: %w", p.proc.Pid(), err)
			}
			if !waitClosed(ctx, p.dead, killWait) {
				return fmt.Errorf("shim %d still running %v after SIGKILL", p.proc.Pid(), killWait)
			}
		}
	}
	p.disconnect()
	var errs []error
	if p.proc != nil || p.isDead() {
		if err := removeShimSocket(address); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range []string{shimLogFifo, shimAddressFile} {
		if err := removeIfExists(filepath.Join(p.bundle, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// shimListening reports whether a process listens on the shim address:
// false only when the socket is refused or gone, not when the dial just
// takes long.
func shimListening(ctx context.Context, address string) bool {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := dialShim(dctx, address)
	if err == nil {
		conn.Close()
		return true
	}
	return !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, os.ErrNotExist)
}

// waitClosed waits up to d for ch to be closed, or until ctx ends.
func waitClosed(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// deleteDeadTask runs `<shim> … delete` for a task whose shim died, or
// which its shim does not know, as containerd's cleanupAfterDeadShim does:
// the shim binary deletes what is left of the task (runc-v2: `runc delete
// --force`, which kills what still runs and removes runc's state, that of
// a create cut short included). Then the container's cgroup is removed if
// still there (see runtime.RemoveSpecCgroup). It returns the exit status the
// command reports (128+SIGKILL).
//
// The runc-v2 shim finds the bundle as <working directory>/../<id>
// (containerd's layout); the command runs in a directory made for it next
// to a link by that name to the bundle. Newer shims read -bundle.
func (r *Runtime) deleteDeadTask(ctx context.Context, id, bundle string) (runtime.ExitStatus, error) {
	exit := runtime.ExitStatus{Code: 128 + int32(syscall.SIGKILL), ExitedAt: time.Now()}
	if _, err := os.Stat(filepath.Join(bundle, "config.json")); err != nil {
		// Nothing left that the shim could clean up from.
		log.G(ctx).Warn("bundle of a dead shim's task is gone; skipping its cleanup", "id", id, "bundle", bundle, "err", err)
		return exit, nil
	}
	exit, err := r.runShimDelete(ctx, id, bundle, exit)
	if cerr := runtime.RemoveSpecCgroup(ctx, bundle, r.cfg.Units); cerr != nil {
		err = errors.Join(err, cerr)
	}
	return exit, err
}

// runShimDelete runs the shim binary's delete for task id (see
// deleteDeadTask) and returns the exit status it reports, else exit.
func (r *Runtime) runShimDelete(ctx context.Context, id, bundle string, exit runtime.ExitStatus) (runtime.ExitStatus, error) {
	dir, err := os.MkdirTemp(r.cfg.StateDir, cleanupDirPrefix)
	if err != nil {
		return exit, err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(bundle, filepath.Join(dir, id)); err != nil {
		return exit, err
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return exit, err
	}
	args := append(r.shimArgs(ctx, id), "-bundle", bundle, "delete")
	cmd := r.shimCommand(work, args)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	if err := runBounded(cctx, cmd, nil); err != nil {
		return exit, fmt.Errorf("clean up after dead shim: %w%s", err, outputSuffix(stderr.Bytes()))
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		log.G(ctx).Debug("dead shim cleanup", "id", id, "output", truncate(s, 2000))
	}
	var resp taskapi.DeleteResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err == nil && resp.ExitStatus != 0 {
		exit.Code = int32(resp.ExitStatus)
		if t := resp.ExitedAt; t != nil && t.IsValid() && !t.AsTime().IsZero() {
			exit.ExitedAt = t.AsTime()
		}
	}
	return exit, nil
}

// shimEnv returns the daemon's environment for a shim, without what
// describes the daemon itself (socket activation, its working directory)
// or is set for the shim.
func shimEnv() []string {
	return runtime.MonitorEnv(os.Environ(), "PWD", "TTRPC_ADDRESS", "GRPC_ADDRESS", "NAMESPACE", "MAX_SHIM_VERSION")
}
