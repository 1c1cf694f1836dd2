package runtime

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecCache keeps each bundle's parsed config.json until the file
// changes (its mtime or size), so a metrics scrape or a ContainerStatus
// does not decode a container's spec again. The zero value is ready; it is
// safe for concurrent use. The specs it returns are shared: read only.
type SpecCache struct {
	mu sync.Mutex
	m  map[string]cachedSpec // by bundle; guarded by mu
}

type cachedSpec struct {
	mtime time.Time
	size  int64
	spec  *specs.Spec
}

// Get returns the bundle's spec, nil if it cannot be read.
func (c *SpecCache) Get(bundle string) *specs.Spec {
	fi, err := os.Stat(filepath.Join(bundle, "config.json"))
	if err != nil {
		c.Forget(bundle)
		return nil
	}
	c.mu.Lock()
	e, ok := c.m[bundle]
	c.mu.Unlock()
	if ok && e.mtime.Equal(fi.ModTime()) && e.size == fi.Size() {
		return e.spec
	}
	spec, err := ReadSpec(bundle)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedSpec{}
	}
	c.m[bundle] = cachedSpec{mtime: fi.ModTime(), size: fi.Size(), spec: spec}
	return spec
}

// Forget drops bundle's spec.
func (c *SpecCache) Forget(bundle string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, bundle)
}

// Retain drops the bundles not in keep (containers removed since).
func (c *SpecCache) Retain(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range c.m {
		if !keep[b] {
			delete(c.m, b)
		}
	}
}
