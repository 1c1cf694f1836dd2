package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// errClosed is returned by Wait after Close.
var errClosed = fmt.Errorf("runtime closed: %w", errdefs.ErrUnavailable)

// Exited reads the exit file conmon writes when the container's init
// process exits. ok is false while there is none: the container has not
// exited, or its conmon is gone, or it was deleted. The file survives
// daemon restarts, so exits that happened while the daemon was down are
// found here. OOMKilled is set when conmon left its OOM marker in the
// bundle.
func (r *Runtime) Exited(id string) (status runtime.ExitStatus, ok bool, err error) {
	if err := runtime.ValidateID(id); err != nil {
		return runtime.ExitStatus{}, false, err
	}
	status, ok, err = readExitFile(filepath.Join(r.cfg.ExitDir, id))
	if ok {
		status.OOMKilled = runtime.OOMMarked(r.bundleOf(id))
	}
	return status, ok, err
}

// bundleOf returns the bundle directory of container id, read from
// conmon's attach symlink, or "" when there is none.
func (r *Runtime) bundleOf(id string) string {
	target, err := os.Readlink(filepath.Join(r.cfg.SocketDir, id))
	if err != nil || !filepath.IsAbs(target) {
		return ""
	}
	return target
}

// readExitFile reads one exit file. An empty file is treated as not yet
// written: conmon replaces the file atomically, but a writer that does not
// could be caught half way.
func readExitFile(path string) (runtime.ExitStatus, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return runtime.ExitStatus{}, false, nil
	}
	if err != nil {
		return runtime.ExitStatus{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return runtime.ExitStatus{}, false, err
	}
	b := make([]byte, 64)
	n, _ := f.Read(b)
	code, ok, err := parseExitCode(b[:n])
	if err != nil {
		return runtime.ExitStatus{}, false, fmt.Errorf("exit file %s: %w", path, err)
	}
	if !ok {
		return runtime.ExitStatus{}, false, nil
	}
	return runtime.ExitStatus{Code: code, ExitedAt: fi.ModTime()}, true, nil
}

// parseExitCode parses an exit file's content: a decimal integer, without
// a newline from conmon; surrounding white space is allowed.
func parseExitCode(b []byte) (code int32, ok bool, err error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("bad exit code %q", s)
	}
	return int32(n), true, nil
}

// Wait blocks until the container's exit file exists and returns it, or
// until ctx ends. It only learns of exits that conmon records: if the
// container's conmon is gone (runtime.State.MonitorPid is 0) while the container
// still runs, Wait returns only when ctx ends. Many concurrent Waits are
// cheap: one watcher serves them all.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	if err := runtime.ValidateID(id); err != nil {
		return runtime.ExitStatus{}, err
	}
	ch, cancel := r.exits.subscribe(id)
	defer cancel()
	// Checked after subscribing, so an exit between the check and the
	// subscription is not lost.
	for {
		status, ok, err := r.Exited(id)
		if err != nil || ok {
			return status, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return runtime.ExitStatus{}, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
		case <-r.exits.done:
			return runtime.ExitStatus{}, fmt.Errorf("wait for container %s: %w", id, errClosed)
		}
	}
}

// exitWatcher watches the exit directory with one inotify instance and
// wakes the subscribers of an ID when its file may have appeared. A slow
// poll covers lost events (queue overflow, the directory being replaced).
type exitWatcher struct {
	dir  string
	fsw  *fsnotify.Watcher
	poll time.Duration
	done chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // guarded by mu

	closeOnce sync.Once
	closeErr  error
}

func newExitWatcher(dir string, poll time.Duration) (*exitWatcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch exit directory: %w", err)
	}
	if err := fsw.Add(dir); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("watch exit directory: %w", err)
	}
	w := &exitWatcher{
		dir:  dir,
		fsw:  fsw,
		poll: poll,
		done: make(chan struct{}),
		subs: make(map[string]map[chan struct{}]struct{}),
	}
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// subscribe returns a channel that receives a value when the exit file of
// id may have changed, and a function to unsubscribe.
func (w *exitWatcher) subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	set := w.subs[id]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		w.subs[id] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.subs[id], ch)
		if len(w.subs[id]) == 0 {
			delete(w.subs, id)
		}
		w.mu.Unlock()
	}
}

func (w *exitWatcher) notify(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs[id] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// pollAll wakes the subscribers of every ID whose exit file exists.
func (w *exitWatcher) pollAll() {
	w.mu.Lock()
	ids := make([]string, 0, len(w.subs))
	for id := range w.subs {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(w.dir, id)); err == nil {
			w.notify(id)
		}
	}
}

func (w *exitWatcher) run() {
	defer w.wg.Done()
	ticker := time.NewTicker(w.poll)
	defer ticker.Stop()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			// conmon writes <id>.XXXXXX and renames it to <id>, which
			// arrives as a Create of <id>.
			if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) {
				w.notify(filepath.Base(ev.Name))
			}
		case _, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			// Overflow or a watch problem: events may be lost.
			w.pollAll()
		case <-ticker.C:
			w.pollAll()
		}
	}
}

func (w *exitWatcher) close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		w.closeErr = w.fsw.Close()
		w.wg.Wait()
	})
	return w.closeErr
}
