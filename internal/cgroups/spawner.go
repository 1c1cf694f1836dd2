package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrSpawnerClosed is returned by Start after Close.
var ErrSpawnerClosed = errors.New("cgroup spawner is closed")

// Spawner starts processes that are in one cgroup, in every mounted
// hierarchy, from birth, so that nothing has to be moved there afterwards.
//
// Moving a process (a write to cgroup.procs) takes the kernel's
// cgroup_threadgroup_rwsem for writing, and the first such write after a
// quiet spell waits for an RCU grace period: 5–16 ms on the 2-CPU VMs
// podbay is measured on. MoveProcess of each container's monitor, before
// the monitor may run the runtime's create, put that wait on every
// CreateContainer and RunPodSandbox. A child is born in its parent
// thread's cgroups instead, so:
//
//   - in v1 hierarchies, which place single threads (the tasks file), the
//     Spawner keeps one OS thread of the daemon in the cgroup, placed once,
//     and every child is forked by that thread;
//   - in the v2 hierarchy (a pure v2 host, or a hybrid host's cgroup2
//     mount), which places whole processes only, every child is cloned
//     straight into the cgroup (clone3 with CLONE_INTO_CGROUP, Linux 5.7).
//
// Neither is a migration. NewSpawner fails where either is not possible
// (the caller then moves its processes with MoveProcess).
//
// The runtime that a monitor runs migrates the container's first process
// into the container's cgroup all the same, and pays that grace period
// then, midway through its create. So, where it has a placed thread, Start
// also starts the grace period at once, in parallel with the monitor's
// and the runtime's start-up: it writes the thread's id into the tasks
// file of a cgroup the thread is in already, which changes nothing but
// takes the same lock. The runtime's migration, a few milliseconds later,
// then finds the grace period over or under way. On a kernel whose
// migrations do not wait (cgroup2's favordynmods), that write costs tens
// of microseconds.
type Spawner struct {
	mu     sync.RWMutex
	v2fd   int  // the cgroup's v2 directory (O_PATH) for CLONE_INTO_CGROUP, or -1; guarded by mu
	closed bool // guarded by mu

	work chan func() // run by the placed thread; nil without v1 hierarchies
	tid  int         // the placed thread's; set by serve before it reports
	// prime is a tasks file of a v1 cgroup the placed thread is in; a
	// write of its id there starts a grace period (see Spawner).
	prime   string
	priming atomic.Bool    // a priming write is under way
	primes  sync.WaitGroup // the priming writes, which Close waits for
	quit    chan struct{}  // closed by Close
	done    chan struct{}  // closed when the placed thread has ended (with work)
}

// NewSpawner creates the cgroup at path (relative to each hierarchy's
// root) where missing, as MoveProcess does, and readies the ways to start
// processes in it. Call Close to release the thread and the descriptor.
func NewSpawner(path string) (*Spawner, error) {
	rel, mounts, err := hierarchies(path)
	if err != nil {
		return nil, err
	}
	if len(mounts) == 0 {
		return nil, errors.New("no cgroup hierarchy mounted")
	}
	s := &Spawner{v2fd: -1, quit: make(chan struct{}), done: make(chan struct{})}
	var v1Dirs []string
	for _, m := range mounts {
		dir, err := makeCgroup(m, rel)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if !m.V2 {
			v1Dirs = append(v1Dirs, dir)
			continue
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
		}
		s.v2fd = fd
		if err := probeCloneIntoCgroup(); err != nil {
			s.Close()
			return nil, err
		}
	}
	if len(v1Dirs) == 0 {
		return s, nil
	}
	s.work = make(chan func())
	placed := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			s.serve(v1Dirs, placed)
			return
		}
		// The main thread must not be placed: it is the thread-group
		// leader, whose cgroups /proc/<pid>/cgroup shows as the whole
		// process's. Held here, it cannot run serve's goroutine, which
		// gets a thread of its own.
		started := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(started)
			s.serve(v1Dirs, placed)
		}()
		<-started
		runtime.UnlockOSThread()
	}()
	if err := <-placed; err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// serve places its OS thread, which the caller has locked (and which is
// not the main thread), in the v1 cgroup directories dirs, reports that
// on placed, and then runs the work sent to it until Close. The thread is
// never unlocked: when serve's goroutine ends, the Go runtime ends the
// thread instead of giving its cgroups to other goroutines.
func (s *Spawner) serve(dirs []string, placed chan<- error) {
	defer close(s.done)
	s.tid = unix.Gettid()
	s.prime = filepath.Join(dirs[0], "tasks")
	tid := []byte(strconv.Itoa(s.tid))
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0o644); err != nil {
			placed <- fmt.Errorf("place spawner thread in %s: %w", dir, err)
			return
		}
	}
	placed <- nil
	for {
		select {
		case fn := <-s.work:
			fn()
		case <-s.quit:
			return
		}
	}
}

// Start starts cmd, as cmd.Start does, born in the spawner's cgroup. It
// sets cmd.SysProcAttr's cgroup fields on a v2 hierarchy.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrSpawnerClosed
	}
	if s.v2fd >= 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = s.v2fd
	}
	if s.work == nil {
		return cmd.Start()
	}
	s.primeMigration()
	errc := make(chan error, 1)
	select {
	case s.work <- func() { errc <- cmd.Start() }:
		return <-errc
	case <-s.done:
		return ErrSpawnerClosed
	}
}

// primeMigration starts the next migration's grace period in the
// background (see Spawner), unless a priming write is under way already.
// Its result does not matter: a failed write only leaves the wait to the
// runtime.
func (s *Spawner) primeMigration() {
	if !s.priming.CompareAndSwap(false, true) {
		return
	}
	s.primes.Add(1)
	go func() {
		defer s.primes.Done()
		defer s.priming.Store(false)
		_ = os.WriteFile(s.prime, []byte(strconv.Itoa(s.tid)), 0o644)
	}()
}

// Close ends the placed thread and closes the cgroup's descriptor, once
// no Start is under way. Processes it started are not affected.
func (s *Spawner) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.work != nil {
		s.primes.Wait() // none names the thread's id once it is gone
		close(s.quit)
		<-s.done
		waitThreadGone(s.tid)
	}
	if s.v2fd >= 0 {
		unix.Close(s.v2fd)
		s.v2fd = -1
	}
	return nil
}

// waitThreadGone waits, for a second at most, until the daemon's thread
// tid has ended: the Go runtime ends a locked thread whose goroutine
// returned, but after the goroutine's last word. Until then the thread
// is in the cgroup, and the cgroup's cgroup.procs lists the daemon.
func waitThreadGone(tid int) {
	task := "/proc/self/task/" + strconv.Itoa(tid)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// probeCloneIntoCgroup tells whether the kernel clones into a cgroup: it
// asks clone3 for CLONE_INTO_CGROUP with a descriptor that is not a
// cgroup's (/dev/null), which a kernel that knows the flag refuses with
// EBADF before any process exists. Older kernels refuse the flag
// (EINVAL), and a kernel without clone3, or a seccomp filter that hides
// it, says ENOSYS.
func probeCloneIntoCgroup() error {
	null, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(null)
	args := cloneArgs{flags: unix.CLONE_INTO_CGROUP, exitSignal: uint64(unix.SIGCHLD), cgroup: uint64(null)}
	pid, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	switch {
	case errno == unix.EBADF:
		return nil
	case errno == 0 && pid == 0:
		// Not reachable with a descriptor that is not a cgroup's; if it
		// were, the child must not run the daemon's code.
		unix.Exit(127)
	case errno == 0:
		var ws unix.WaitStatus
		_, _ = unix.Wait4(int(pid), &ws, 0, nil)
		return nil
	}
	return fmt.Errorf("clone into a cgroup (clone3 CLONE_INTO_CGROUP, Linux 5.7): %w", errno)
}

// cloneArgs is struct clone_args of clone3(2), as far as cgroup.
type cloneArgs struct {
	flags      uint64
	pidfd      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}
