package image

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestReleaseAfterPulls: the memory release runs once pulls have been
// quiet for the delay, once per quiet spell; a pull that starts within the
// delay puts it off.
func TestReleaseAfterPulls(t *testing.T) {
	var n atomic.Int32
	r := &memRelease{release: func() { n.Add(1) }, delay: 50 * time.Millisecond}

	r.idle()
	time.Sleep(20 * time.Millisecond)
	r.hold() // a pull starts: nothing runs while it does
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got != 0 {
		t.Fatalf("released %d times while a pull ran, want 0", got)
	}
	r.idle()
	waitFor(t, "the release after the last pull", func() bool { return n.Load() == 1 })
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got != 1 {
		t.Fatalf("released %d times after one quiet spell, want 1", got)
	}
	r.idle()
	r.stop()
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got != 1 {
		t.Fatalf("released %d times after stop, want 1", got)
	}
}

// TestPullReturnsMemory: after a real pull (pgzip's buffers and all), the
// store's release runs and the heap the pull grew is handed back: what the
// runtime still holds idle and unreturned is small afterwards. (Fails with
// the release's work left out: 8–14 MB stay idle.)
func TestPullReturnsMemory(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	big := make(map[string]string)
	for i := range 64 {
		big[string(rune('a'+i%26))+string(rune('a'+i/26))] = string(make([]byte, 64<<10))
	}
	img := testImage(t, v1.Config{}, false, big)
	reg.push("test/release:1", img)

	var before, after runtime.MemStats
	released := make(chan struct{}, 1)
	e.store.memRelease.delay = 10 * time.Millisecond
	e.store.memRelease.release = func() {
		// The pull's own goroutines (the registry client's, pgzip's
		// read-ahead) end just after it; their garbage is then made idle
		// heap, so that before shows what the release has to return.
		time.Sleep(50 * time.Millisecond)
		runtime.GC()
		runtime.ReadMemStats(&before)
		releaseMemory()
		runtime.ReadMemStats(&after)
		released <- struct{}{}
	}
	if _, err := e.store.Pull(ctx, reg.ref("test/release:1"), nil); err != nil {
		t.Fatalf("Pull: %v", err)
	}
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("no memory release after the pull")
	}
	idleBefore := before.HeapIdle - before.HeapReleased
	idleAfter := after.HeapIdle - after.HeapReleased
	// What a release leaves idle and not returned: the runtime's per-P
	// page caches and spans it cannot return (2 MiB seen in CI, where the
	// background scavenger had returned the pull's garbage before the
	// release ran); the pull's garbage is megabytes more (pgzip's
	// read-ahead buffers alone are ~7 MB a layer).
	limit := uint64(4<<20) + uint64(runtime.GOMAXPROCS(0))<<20
	if idleAfter > limit {
		t.Errorf("heap idle not released: idle-unreleased %d -> %d bytes (at most %d may stay), released %d -> %d",
			idleBefore, idleAfter, limit, before.HeapReleased, after.HeapReleased)
	}
	t.Logf("idle heap kept %d -> %d KiB", idleBefore>>10, idleAfter>>10)
}
