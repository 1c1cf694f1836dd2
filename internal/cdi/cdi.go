// Package cdi resolves Container Device Interface devices
// (tags.cncf.io/container-device-interface) a container asks for, by the
// CRI's CDI_devices field or by cdi.k8s.io/ annotations, against the CDI
// spec files of a list of directories, and injects them into the
// container's OCI spec: device nodes (with their device cgroup rules),
// mounts, environment and hooks.
package cdi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/podbay/podbay/internal/dirwatch"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// DefaultSpecDirs are the CDI spec directories of the CDI specification:
// static specs in /etc/cdi, generated ones in /var/run/cdi, which takes
// precedence.
var DefaultSpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// AnnotationPrefix starts the keys of the annotations that request CDI
// devices (cdi.k8s.io/<plugin>_<id>: comma-separated qualified names).
const AnnotationPrefix = cdilib.AnnotationPrefix

// Registry holds the CDI specs of a list of directories, later ones taking
// precedence for a device defined in two. The directories are watched
// (inotify, no goroutine); the first Inject after a change re-reads them.
// When nothing changed, Inject reads no directory.
type Registry struct {
	dirs  []string
	cache *cdilib.Cache
	watch *dirwatch.Watcher

	mu sync.Mutex // serialises the check for changes and the refresh
}

// New reads the spec files of dirs (missing directories are not an
// error, and are looked for again when a device is requested). Invalid
// spec files are logged; the devices of the others stay usable.
func New(ctx context.Context, dirs []string) (*Registry, error) {
	// Watched before the first read, so no change falls between.
	w, err := dirwatch.New(dirs)
	if err != nil {
		log.G(ctx).Warn("cannot watch the CDI spec directories; they are re-read at every create that asks for a device", "err", err)
	}
	// The library's own auto-refresh runs a goroutine and does not see a
	// spec renamed in from another directory (it ignores IN_MOVED_TO):
	// podbay refreshes it by hand, when its watch says so.
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dirs...), cdilib.WithAutoRefresh(false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("read CDI specs: %w", err)
	}
	r := &Registry{dirs: append([]string(nil), dirs...), cache: cache, watch: w}
	r.logErrors(ctx)
	log.G(ctx).Info("CDI specs loaded", "dirs", dirs, "devices", len(cache.ListDevices()))
	return r, nil
}

// Close stops watching the directories.
func (r *Registry) Close() error { return r.watch.Close() }

// Requested returns the qualified names of the devices a container asks
// for: those of the CRI field first, in its order, then those of the
// cdi.k8s.io/ annotations, by key, skipping any already requested (the
// kubelet sends a device both ways for runtimes that know only one, as
// containerd and CRI-O expect). A name that is not a qualified CDI device
// name (vendor.com/class=name) is an InvalidArgument error.
func Requested(fromField []string, annotations map[string]string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(name, source string) error {
		if _, _, _, err := parser.ParseQualifiedName(name); err != nil {
			return fmt.Errorf("CDI device %q (%s): %v: %w", name, source, err, errdefs.ErrInvalidArgument)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
		return nil
	}
	for _, name := range fromField {
		if err := add(name, "CDI_devices"); err != nil {
			return nil, err
		}
	}
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, name := range strings.Split(annotations[k], ",") {
			if err := add(name, "annotation "+k); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Inject resolves devices (qualified names) and applies their specs'
// and their own container edits to spec. A device no spec defines is a
// NotFound error naming it, one that two specs of the same directory
// define a FailedPrecondition error naming both; spec is then unchanged.
// A device whose edits cannot be applied (its device node is missing on
// the host) is a FailedPrecondition error.
func (r *Registry) Inject(ctx context.Context, spec *specs.Spec, devices []string) error {
	if len(devices) == 0 {
		return nil
	}
	r.refreshIfChanged(ctx)
	unresolved, err := r.cache.InjectDevices(spec, devices...)
	if len(unresolved) > 0 {
		for _, name := range unresolved {
			if paths := r.conflicts(name); len(paths) > 0 {
				return fmt.Errorf("CDI device %q: defined at the same precedence by %s, so by neither: %w",
					name, strings.Join(paths, " and "), errdefs.ErrFailedPrecondition)
			}
		}
		return fmt.Errorf("CDI device %s: not defined by any CDI spec in %s: %w",
			quoteAll(unresolved), strings.Join(r.dirs, ", "), errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("inject CDI devices %s: %v: %w", quoteAll(devices), err, errdefs.ErrFailedPrecondition)
	}
	log.G(ctx).Debug("CDI devices injected", "devices", devices)
	return nil
}

// Devices lists the qualified names of the devices defined now.
func (r *Registry) Devices(ctx context.Context) []string {
	r.refreshIfChanged(ctx)
	return r.cache.ListDevices()
}

// refreshIfChanged re-reads the spec directories if the watch saw a
// change, and logs the invalid spec files.
func (r *Registry) refreshIfChanged(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.watch.Changed() {
		return
	}
	// Errors are those of single spec files (kept by the cache, logged
	// below): the other files' devices are usable.
	_ = r.cache.Refresh()
	r.logErrors(ctx)
	log.G(ctx).Info("CDI specs reloaded", "devices", len(r.cache.ListDevices()))
}

// logErrors logs the spec files the last refresh could not use, and
// devices defined twice at the same precedence (neither is usable).
func (r *Registry) logErrors(ctx context.Context) {
	byPath := r.cache.GetErrors()
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		log.G(ctx).Warn("CDI spec file not usable", "path", p, "err", errors.Join(byPath[p]...))
	}
}

// conflicts returns the spec files that define device name at the same
// precedence (the library then drops it, and records the conflict as an
// error of each file).
func (r *Registry) conflicts(name string) []string {
	marker := fmt.Sprintf("conflicting device %q", name)
	var paths []string
	for path, errs := range r.cache.GetErrors() {
		for _, err := range errs {
			if strings.Contains(err.Error(), marker) {
				paths = append(paths, path)
				break
			}
		}
	}
	sort.Strings(paths)
	return paths
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
