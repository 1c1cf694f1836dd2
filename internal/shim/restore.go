package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/undo"
)

const (
	// restoreTimeout bounds each call to a shim while a restarted
	// Runtime takes a pod over.
	restoreTimeout = 10 * time.Second
	// restoreWorkers is how many pods a restarted Runtime takes over at
	// a time in the background; a pod a call waits for is taken over at
	// once.
	restoreWorkers = 8
	// restoreSweepDelay is how long after New the background take-over
	// starts at the latest; the first call that waits for a pod starts it
	// earlier. Until then the daemon's own start has the CPU.
	restoreSweepDelay = time.Second
	quarantineDir     = "quarantine"
	// cleanupDirPrefix names the working directories of the shim
	// binary's delete (see runShimDelete).
	cleanupDirPrefix = "cleanup-"
)

// restore takes over the pods and containers recorded in StateDir, after
// the daemon restarted. It reads the records and returns: reconnecting to
// the shims and taking the containers over (see takeOver) goes on in the
// background, a few pods at a time, once the first call waits for a pod or
// restoreSweepDelay has passed; a call on a container waits for its pod's,
// which then runs at once (see awaitRestore). Bad records are logged and
// moved to the quarantine directory; they do not keep the Runtime from
// starting. A directory without its record is what a daemon killed while
// making or removing it left (records are written first, with atomicfile,
// and removed with their directory): nothing was started from it, or all
// was stopped, so it is removed.
func (r *Runtime) restore() {
	ctx := r.ctx
	r.removeCleanupDirs(ctx)
	var jobs []*podRestore
	// recordless holds the pods made for containers whose pod's record is
	// gone, by ID.
	recordless := make(map[string]*pod)
	for _, id := range r.recordIDs(podsDir) {
		var rec podRecord
		dir := r.podDir(id)
		err := readRecord(filepath.Join(dir, podFile), &rec)
		if errors.Is(err, os.ErrNotExist) {
			r.removeIncomplete(ctx, dir, "pod")
			continue
		}
		if err != nil || rec.ID != id {
			r.quarantine(ctx, dir, "pod", err)
			continue
		}
		p := r.newRestoredPod(rec.ID, rec.Bundle)
		p.restore.rec = &rec
		jobs = append(jobs, p.restore)
		r.mu.Lock()
		r.pods[id] = p
		r.mu.Unlock()
	}
	for _, id := range r.recordIDs(containersDir) {
		var rec containerRecord
		dir := r.containerDir(id)
		err := readRecord(filepath.Join(dir, containerFile), &rec)
		if errors.Is(err, os.ErrNotExist) {
			r.removeIncomplete(ctx, dir, "container")
			continue
		}
		if err != nil || rec.ID != id {
			r.quarantine(ctx, dir, "container", err)
			continue
		}
		r.mu.Lock()
		p := r.pods[rec.Pod]
		r.mu.Unlock()
		if p == nil {
			p = recordless[rec.Pod]
		}
		if p == nil {
			// Its shim's record is gone, and with it the shim.
			p = r.newRestoredPod(rec.Pod, rec.Bundle)
			p.markDead()
			recordless[rec.Pod] = p
			jobs = append(jobs, p.restore)
		}
		c := newContainer(rec, dir, p, nil)
		p.restore.containers = append(p.restore.containers, c)
		r.mu.Lock()
		if rec.ID == rec.Pod && r.pods[rec.Pod] == nil {
			r.pods[rec.Pod] = p
		}
		r.containers[id] = c
		r.mu.Unlock()
	}
	// A shim whose sandbox container is not recorded serves nothing
	// podbay knows about: it is stopped once reached.
	r.mu.Lock()
	for id, p := range r.pods {
		if _, ok := r.containers[id]; !ok {
			p.restore.orphan = true
			delete(r.pods, id)
		}
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	r.restoring.Add(len(jobs) + 1)
	for _, j := range jobs {
		go r.runRestore(j)
	}
	go func() {
		defer r.restoring.Done()
		t := time.NewTimer(restoreSweepDelay)
		defer t.Stop()
		select {
		case <-t.C:
			r.startSweep()
		case <-r.sweep:
		case <-r.ctx.Done():
		}
	}()
}

// startSweep starts the background take-over of the recorded pods.
func (r *Runtime) startSweep() { r.sweepOnce.Do(func() { close(r.sweep) }) }

// podRestore is the take-over of one recorded pod by a restarted Runtime.
type podRestore struct {
	pod *pod
	// rec is the pod's record; nil when it is gone, and the shim with it.
	rec *podRecord
	// containers are the pod's recorded containers, registered but not
	// taken over yet.
	containers []*container
	// orphan is set when the pod's sandbox container is not recorded: its
	// shim is stopped.
	orphan bool
	// wanted is closed by the first call that waits for the take-over:
	// it runs then, without waiting for a free slot.
	wanted     chan struct{}
	wantedOnce sync.Once
	// done is closed once the take-over has finished, or was given up
	// because the Runtime was closed.
	done chan struct{}
}

// newRestoredPod makes a pod whose shim and containers are still to be
// taken over.
func (r *Runtime) newRestoredPod(id, bundle string) *pod {
	p := r.newPod(id, bundle)
	p.restore = &podRestore{pod: p, wanted: make(chan struct{}), done: make(chan struct{})}
	return p
}

// runRestore takes over j's pod once the sweep has started and a slot is
// free, or at once when a call waits for it.
func (r *Runtime) runRestore(j *podRestore) {
	defer r.restoring.Done()
	defer close(j.done)
	select {
	case <-r.sweep:
	case <-j.wanted:
	case <-r.ctx.Done():
		return
	}
	select {
	case r.restoreSlots <- struct{}{}:
		defer func() { <-r.restoreSlots }()
	case <-j.wanted:
	case <-r.ctx.Done():
		return
	}
	r.takeOver(j)
}

// takeOver reconnects to the shim of a recorded pod and takes its
// containers over. The Runtime being closed cuts it short, with nothing
// marked dead or recorded exited: the next Runtime takes over instead.
func (r *Runtime) takeOver(j *podRestore) {
	ctx := r.ctx
	p := j.pod
	if j.rec != nil && !r.reconnect(ctx, p, *j.rec) {
		return
	}
	for _, c := range j.containers {
		if ctx.Err() != nil {
			return
		}
		r.restoreContainer(ctx, c)
	}
	if j.orphan && ctx.Err() == nil {
		log.G(ctx).Warn("stopping shim of a pod without a sandbox container", "pod", p.id)
		sctx, cancel := context.WithTimeout(ctx, undo.Timeout)
		if err := r.stopShim(sctx, p); err != nil {
			log.G(ctx).Error("stop orphaned shim", "pod", p.id, "err", err)
		}
		cancel()
	}
}

// awaitRestore waits until p has been taken over by a restarted Runtime,
// or ctx ends. A pod this Runtime started needs no waiting.
func (r *Runtime) awaitRestore(ctx context.Context, p *pod) error {
	j := p.restore
	if j == nil {
		return nil
	}
	select {
	case <-j.done:
	default:
		j.wantedOnce.Do(func() { close(j.wanted) })
		r.startSweep()
		select {
		case <-j.done:
		case <-ctx.Done():
			return fmt.Errorf("wait for the shim of pod %s to be reconnected: %w", p.id, ctx.Err())
		}
	}
	if r.ctx.Err() != nil {
		return errClosed
	}
	return nil
}

// recordIDs lists the entries of a record directory.
func (r *Runtime) recordIDs(kind string) []string {
	entries, err := os.ReadDir(filepath.Join(r.cfg.StateDir, kind))
	if err != nil {
		log.G(r.ctx).Error("read state", "dir", kind, "err", err)
		return nil
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && runtime.ValidateID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// removeIncomplete removes a record directory that holds no record.
func (r *Runtime) removeIncomplete(ctx context.Context, dir, kind string) {
	err := os.RemoveAll(dir)
	log.G(ctx).Info("removed state without a record (daemon stopped while making or removing it)", "kind", kind, "dir", dir, "err", err)
}

// removeCleanupDirs removes the working directories of shim deletes that
// a stopped daemon left.
func (r *Runtime) removeCleanupDirs(ctx context.Context) {
	matches, _ := filepath.Glob(filepath.Join(r.cfg.StateDir, cleanupDirPrefix+"*"))
	for _, dir := range matches {
		// Only the symlink to the bundle and an empty directory: the
		// bundle itself is not followed.
		if err := os.RemoveAll(dir); err != nil {
			log.G(ctx).Warn("remove leftover shim delete directory", "dir", dir, "err", err)
		}
	}
}

// quarantine moves a bad record's directory out of the way.
func (r *Runtime) quarantine(ctx context.Context, dir, kind string, why error) {
	if why == nil {
		why = errors.New("record names another ID")
	}
	q := filepath.Join(r.cfg.StateDir, quarantineDir)
	dst := filepath.Join(q, fmt.Sprintf("%s-%s-%d", kind, filepath.Base(dir), time.Now().UnixNano()))
	err := os.MkdirAll(q, 0o700)
	if err == nil {
		err = os.Rename(dir, dst)
	}
	log.G(ctx).Error("bad record quarantined", "kind", kind, "dir", dir, "to", dst, "reason", why, "err", err)
}

// reconnect reconnects to the shim of pod p, recorded as rec. A shim
// that cannot be reached is taken for dead: its containers are reported
// exited. It returns false, with p disconnected and nothing else done, when
// the Runtime is closed meanwhile.
func (r *Runtime) reconnect(ctx context.Context, p *pod, rec podRecord) bool {
	address := rec.Address
	if address == "" {
		// Recorded while the start command ran.
		if b, err := os.ReadFile(filepath.Join(rec.Bundle, shimAddressFile)); err == nil {
			address = strings.TrimSpace(string(b))
		}
	}
	p.mu.Lock()
	p.address = address
	p.mu.Unlock()
	// The shim still writes its log to the FIFO in the bundle.
	if lr, err := openFifoReader(filepath.Join(rec.Bundle, shimLogFifo)); err == nil {
		p.log = lr
		copyShimLog(p.ctx, &r.wg, lr)
	}
	cctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	if address != "" {
		err := r.connect(cctx, p)
		if err == nil {
			log.G(ctx).Debug("reconnected to shim", "pod", p.id, "shim_pid", p.proc.Pid())
			return true
		}
		if ctx.Err() != nil {
			p.disconnect()
			return false
		}
		log.G(ctx).Warn("shim of pod is unreachable; its containers are reported exited", "pod", p.id, "address", address, "err", err)
	}
	p.markDead()
	p.disconnect()
	// A shim that lives on but cannot be reached cannot be managed.
	if rec.Pid > 0 && r.isShimOf(rec.Pid, rec.ID) {
		if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil {
			log.G(ctx).Warn("kill unreachable shim", "pod", p.id, "pid", rec.Pid, "err", err)
		}
	}
	if err := removeShimSocket(address); err != nil {
		log.G(ctx).Warn("remove dead shim's socket", "pod", p.id, "err", err)
	}
	return true
}

// isShimOf reports whether pid runs this handler's shim binary for pod id
// (its command line has -id <id>).
func (r *Runtime) isShimOf(pid int, id string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(args) == 0 {
		return false
	}
	// The shim runs under its resolved path (it re-executes itself).
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	shim, _ := filepath.EvalSymlinks(r.cfg.ShimPath)
	if string(args[0]) != r.cfg.ShimPath && (exe == "" || exe != shim) {
		return false
	}
	for i := 1; i+1 < len(args); i++ {
		if string(args[i]) == "-id" && string(args[i+1]) == id {
			return true
		}
	}
	return false
}

// restoreContainer takes over c, a recorded container, once its pod's
// shim has been reconnected to (or found dead). It leaves c as it is, for
// the next Runtime to take over, when the Runtime is closed meanwhile.
func (r *Runtime) restoreContainer(ctx context.Context, c *container) {
	rec, dir, p := c.rec, c.dir, c.pod
	ctx = log.With(ctx, "id", rec.ID)
	if st, ok, err := readExit(dir); err != nil || ok {
		if err != nil {
			log.G(ctx).Error("read recorded exit", "err", err)
			st = runtime.ExitStatus{Code: 255, ExitedAt: time.Now()}
		}
		c.setExit(st)
		close(c.watching)
		return
	}
	if p.isDead() {
		// Its shim died while no Runtime ran: the task is deleted with
		// the shim binary and reported exited now, so that Exited
		// answers as soon as the pod is taken over.
		cctx, cancel := context.WithTimeout(ctx, restoreTimeout)
		st := r.deleteDeadShimTask(cctx, c)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err := writeExit(dir, st); err != nil {
			log.G(ctx).Error("record container exit", "err", err)
		}
		c.setExit(st)
		close(c.watching)
		return
	}

	state, stateErr := r.taskState(ctx, c)
	if ctx.Err() != nil {
		return
	}
	if errdefs.IsNotFound(stateErr) {
		// Never created in the shim (the daemon stopped during Create;
		// the shim cancels a create whose connection is lost, which may
		// leave the runtime's state: Delete cleans that up, see
		// removeTask).
		st := runtime.ExitStatus{Code: 255, ExitedAt: time.Now()}
		if err := writeExit(dir, st); err != nil {
			log.G(ctx).Error("record container exit", "err", err)
		}
		c.setExit(st)
		close(c.watching)
		return
	}

	// Resume the copies: output the container wrote while the daemon was
	// down waits in the FIFOs (or in the shim, blocked on a full one).
	if fifos, err := openStdio(dir, rec.Stdin, rec.Terminal, false); err != nil {
		log.G(ctx).Error("reopen container stdio; its output is not copied", "err", err)
	} else {
		lf, err := openLogFile(rec.LogPath)
		if err != nil {
			// The output still goes to attached clients, and to the
			// log once ReopenLog succeeds.
			log.G(ctx).Error("reopen container log; its output is not logged", "err", err)
			lf = unopenedLogFile(rec.LogPath)
		}
		c.io = newContainerIO(ctx, fifos, lf)
		c.io.start(ctx, &r.wg)
	}

	if stateErr == nil && taskStatus(state.GetStatus()) == runtime.StatusStopped {
		// Exited while the daemon was down: reported at once, so that
		// Exited answers as soon as the pod is taken over; the rest of the output is
		// copied meanwhile.
		st := runtime.ExitStatus{Code: int32(state.GetExitStatus()), ExitedAt: exitTime(state.GetExitedAt().AsTime())}
		if err := writeExit(dir, st); err != nil {
			log.G(ctx).Error("record container exit", "err", err)
		}
		c.setExit(st)
		close(c.watching)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			c.io.finish(drainTimeout)
		}()
		return
	}
	if stateErr != nil {
		log.G(ctx).Warn("container state after restart", "err", stateErr)
	}
	r.watchExit(c)
}

// taskState asks c's shim about its task during restore.
func (r *Runtime) taskState(ctx context.Context, c *container) (*taskapi.StateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	tasks, err := c.pod.task(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := tasks.State(ctx, &taskapi.StateRequest{ID: c.id})
	return resp, rpcError(err)
}
