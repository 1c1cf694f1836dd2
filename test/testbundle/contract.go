package testbundle

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// StopTimeout is the timeout CheckStopAfterTimeout gives Stop.
const StopTimeout = 700 * time.Millisecond

// CheckStart starts the created container id, whose init has pid, and
// checks what every runtime.Runtime promises: it runs with that pid and
// has not exited.
func CheckStart(ctx context.Context, t *testing.T, r runtime.Runtime, id string, pid int) {
	t.Helper()
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != runtime.StatusRunning || st.Pid != pid {
		t.Fatalf("State after Start = %+v, %v", st, err)
	}
	if _, ok, err := r.Exited(id); ok || err != nil {
		t.Fatalf("Exited while running = %v, %v", ok, err)
	}
}

// CheckStopAfterTimeout stops the running container id, whose process
// ignores SIGTERM, and checks what every runtime.Runtime promises: Stop
// waits out the timeout, then kills; Exited reports 128+SIGKILL at a time
// within the call; Wait agrees; State is stopped; a second Stop succeeds.
func CheckStopAfterTimeout(ctx context.Context, t *testing.T, r runtime.Runtime, id string) {
	t.Helper()
	start := time.Now()
	if err := r.Stop(ctx, id, StopTimeout, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d < StopTimeout || d > StopTimeout+5*time.Second {
		t.Errorf("Stop took %v with a %v timeout", d, StopTimeout)
	}
	exit, ok, err := r.Exited(id)
	if err != nil || !ok || exit.Code != 137 {
		t.Fatalf("Exited after Stop = (%+v, %v, %v), want code 137", exit, ok, err)
	}
	if exit.ExitedAt.Before(start) || exit.ExitedAt.After(time.Now()) {
		t.Errorf("ExitedAt %v not within the Stop call (started %v)", exit.ExitedAt, start)
	}
	if w, err := r.Wait(ctx, id); err != nil || w.Code != exit.Code || !w.ExitedAt.Equal(exit.ExitedAt) || w.OOMKilled != exit.OOMKilled {
		t.Errorf("Wait after exit = (%+v, %v), want %+v", w, err, exit)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != runtime.StatusStopped {
		t.Errorf("State after Stop = %+v, %v", st, err)
	}
	if err := r.Stop(ctx, id, StopTimeout, 0); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// CheckDelete deletes the stopped container id and checks what every
// runtime.Runtime promises: the runtime no longer knows it, its exit
// status is gone, and deleting it again succeeds.
func CheckDelete(ctx context.Context, t *testing.T, r runtime.Runtime, id string) {
	t.Helper()
	if err := r.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := r.State(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("State after Delete = %v, want ErrNotFound", err)
	}
	if _, ok, _ := r.Exited(id); ok {
		t.Error("exit status survived Delete")
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

// Buffer is a bytes.Buffer safe for a writer and a reader in different
// goroutines: the output of an exec or attach under way.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
