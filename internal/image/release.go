package image

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// releaseDelay is how long pulls must have been quiet before their
// garbage is returned to the OS.
const releaseDelay = time.Second

// memRelease returns the memory a burst of pulls leaves behind to the OS
// once no pull has run for releaseDelay. A pull allocates far more than
// anything else podbayd does: containers/storage decompresses each gzip
// layer with pgzip (about 7 MB of read-ahead buffers per layer) and
// compresses its tar-split, and containers/image keeps encoders in
// sync.Pools. All of it is garbage once the pull is done, but the Go
// runtime keeps the heap it grew to (its scavenger gives back only what
// lies above the next GC goal, slowly), so an idle daemon kept the resident
// size of its last pull. Here two GCs (the first moves the sync.Pools'
// contents to their victim caches, the second frees them) and
// debug.FreeOSMemory, which hands the freed pages back (MADV_DONTNEED: the
// RSS and the cgroup's charge go down at once). With a live heap of a few
// MB that costs a few ms of CPU, once per quiet spell after pulls, never
// on a pull's path.
type memRelease struct {
	mu    sync.Mutex
	timer *time.Timer // guarded by mu; nil until the first pull ends
	// release and delay are the work and the wait; tests replace them.
	release func()
	delay   time.Duration
}

func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// hold is called when a pull starts: a release waiting is put off.
func (r *memRelease) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
}

// idle is called when the last pull in flight has ended: the release runs
// after the delay unless another pull starts first.
func (r *memRelease) idle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Reset(r.delay)
		return
	}
	if r.release == nil {
		r.release = releaseMemory
	}
	if r.delay == 0 {
		r.delay = releaseDelay
	}
	r.timer = time.AfterFunc(r.delay, r.release)
}

// stop cancels a release waiting (the store closes).
func (r *memRelease) stop() {
	r.hold()
}
