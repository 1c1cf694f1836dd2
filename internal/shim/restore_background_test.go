package shim

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/ttrpc"
)

// slowShim is a shim that answers Connect only once answer is closed, and
// reports its task stopped with exit code 7. Other calls are not expected.
type slowShim struct {
	taskapi.TaskService
	answer chan struct{}
}

func (s *slowShim) Connect(ctx context.Context, _ *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	select {
	case <-s.answer:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &taskapi.ConnectResponse{ShimPid: uint32(os.Getpid())}, nil
}

func (s *slowShim) State(_ context.Context, req *taskapi.StateRequest) (*taskapi.StateResponse, error) {
	return &taskapi.StateResponse{ID: req.ID, Status: tasktypes.Status_STOPPED, ExitStatus: 7}, nil
}

// newSlowShimState serves a slowShim and records, in a new state
// directory, a pod "sb" whose shim it is, with its sandbox container.
func newSlowShimState(t *testing.T) (state string, shim *slowShim) {
	t.Helper()
	dir := t.TempDir()
	state = filepath.Join(dir, "state")
	bundle := filepath.Join(dir, "bundle")
	sock := filepath.Join(dir, "shim.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	shim = &slowShim{answer: make(chan struct{})}
	taskapi.RegisterTaskService(srv, shim)
	go func() { _ = srv.Serve(context.Background(), l) }()
	t.Cleanup(func() { srv.Close() })

	for _, d := range []string{bundle, filepath.Join(state, podsDir, "sb"), filepath.Join(state, containersDir, "sb")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	pod := podRecord{Version: recordVersion, ID: "sb", Bundle: bundle, Address: "unix://" + sock}
	if err := writeRecord(filepath.Join(state, podsDir, "sb", podFile), pod); err != nil {
		t.Fatal(err)
	}
	sb := containerRecord{Version: recordVersion, ID: "sb", Pod: "sb", Bundle: bundle, Created: time.Now()}
	if err := writeRecord(filepath.Join(state, containersDir, "sb", containerFile), sb); err != nil {
		t.Fatal(err)
	}
	return state, shim
}

// TestRestoreInBackground: New returns while a recorded pod's shim has not
// answered yet; calls on its containers wait for it (bounded by their
// context), and then see what the shim reported.
func TestRestoreInBackground(t *testing.T) {
	state, shim := newSlowShimState(t)

	start := time.Now()
	r, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("New took %v with a shim that does not answer", d)
	}
	if list, err := r.ListContainers(context.Background()); err != nil || len(list) != 1 {
		t.Errorf("ListContainers before the take-over = %v, %v; want the recorded container", list, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = r.State(ctx, "sb")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("State while the shim does not answer = %v; want it to wait until its context ends", err)
	}

	exited := make(chan error, 1)
	go func() {
		st, ok, err := r.Exited("sb")
		if err == nil && (!ok || st.Code != 7) {
			err = errors.New("not the exit the shim reported")
		}
		exited <- err
	}()
	select {
	case err := <-exited:
		t.Fatalf("Exited answered before the shim did: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(shim.answer)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("Exited after the take-over: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exited still waits after the shim answered")
	}
	if _, ok, err := readExit(filepath.Join(state, containersDir, "sb")); err != nil || !ok {
		t.Errorf("exit not recorded: %v, %v", ok, err)
	}
}

// TestRestoreCutShortByClose: Close during a take-over returns without
// waiting for the shim, and leaves the pod to the next Runtime: nothing is
// recorded exited.
func TestRestoreCutShortByClose(t *testing.T) {
	state, shim := newSlowShimState(t)
	r, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	// Wanted: the take-over runs now rather than in a free slot.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _ = r.State(ctx, "sb")
	cancel()
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v during a take-over", d)
	}
	if _, ok, err := readExit(filepath.Join(state, containersDir, "sb")); err != nil || ok {
		t.Errorf("exit recorded by a take-over cut short: %v, %v", ok, err)
	}
	if _, err := os.Stat(filepath.Join(state, podsDir, "sb", podFile)); err != nil {
		t.Errorf("pod record gone after a take-over cut short: %v", err)
	}

	// The next Runtime takes the pod over.
	close(shim.answer)
	r2, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if st, ok, err := r2.Exited("sb"); err != nil || !ok || st.Code != 7 {
		t.Errorf("Exited after the next take-over = %+v, %v, %v; want code 7", st, ok, err)
	}
}

// TestRestoreSweep: pods no call asks about are taken over in the
// background all the same.
func TestRestoreSweep(t *testing.T) {
	state, shim := newSlowShimState(t)
	close(shim.answer)
	r, err := New(Config{Name: "restore", ShimPath: "/bin/true", StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	deadline := time.Now().Add(restoreSweepDelay + 5*time.Second)
	for {
		if _, ok, err := readExit(filepath.Join(state, containersDir, "sb")); err != nil || ok {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the recorded pod was not taken over without a call")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
