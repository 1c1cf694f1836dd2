package hooks

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/dirwatch"
	"github.com/podbay/podbay/internal/log"
)

// Manager holds the hooks of a list of directories and keeps them current:
// the directories are watched (inotify), and the first Apply after a
// change re-reads them. When nothing changed, Apply reads no directory.
type Manager struct {
	dirs  []string
	watch *dirwatch.Watcher

	mu    sync.Mutex
	hooks []*Config // in injection order; guarded by mu
}

// New reads the hook files of dirs, in increasing precedence: a file in a
// later directory masks a same-named file of an earlier one. Missing
// directories are created, as CRI-O does, so that hooks dropped in later
// are seen; one that cannot be created is looked for again on each Apply.
// Invalid files are logged and skipped.
func New(ctx context.Context, dirs []string) (*Manager, error) {
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			log.G(ctx).Warn("cannot create OCI hooks directory", "dir", dir, "err", err)
		}
	}
	w, err := dirwatch.New(dirs)
	if err != nil {
		log.G(ctx).Warn("cannot watch the OCI hooks directories; they are re-read at every container create", "err", err)
	}
	m := &Manager{dirs: append([]string(nil), dirs...), watch: w}
	m.hooks = m.load(ctx)
	names := make([]string, len(m.hooks))
	for i, h := range m.hooks {
		names[i] = h.Path
	}
	log.G(ctx).Info("OCI hooks loaded", "dirs", dirs, "hooks", names)
	return m, nil
}

// Close stops watching the directories.
func (m *Manager) Close() error { return m.watch.Close() }

// Apply adds to spec the hooks whose conditions c meets (c.Spec is taken
// to be spec), in the order of their lower-cased file names, and returns
// the names of the files applied.
func (m *Manager) Apply(ctx context.Context, spec *specs.Spec, c Container) []string {
	c.Spec = spec
	var applied []string
	for _, h := range m.current(ctx) {
		if !h.Match(c) {
			continue
		}
		h.inject(spec)
		applied = append(applied, h.Name)
	}
	return applied
}

// current returns the hooks, re-read first if a directory changed.
func (m *Manager) current(ctx context.Context) []*Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watch.Changed() {
		m.hooks = m.load(ctx)
		names := make([]string, len(m.hooks))
		for i, h := range m.hooks {
			names[i] = h.Path
		}
		log.G(ctx).Info("OCI hooks reloaded", "hooks", names)
	}
	return m.hooks
}

// load reads every directory's *.json files.
func (m *Manager) load(ctx context.Context) []*Config {
	byName := map[string]*Config{}
	for _, dir := range m.dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				log.G(ctx).Warn("cannot read OCI hooks directory", "dir", dir, "err", err)
			}
			continue
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			h, err := ReadFile(path)
			if err != nil {
				if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Path == path && errors.Is(err, fs.ErrNotExist) {
					continue // removed since listed
				}
				log.G(ctx).Warn("invalid OCI hook file skipped", "path", path, "err", err)
				continue
			}
			byName[e.Name()] = h
		}
	}
	out := make([]*Config, 0, len(byName))
	for _, h := range byName {
		out = append(out, h)
	}
	// oci-hooks(5): by file name, lower-cased, in code point order.
	sort.Slice(out, func(i, j int) bool {
		li, lj := strings.ToLower(out[i].Name), strings.ToLower(out[j].Name)
		if li != lj {
			return li < lj
		}
		return out[i].Name < out[j].Name
	})
	return out
}
