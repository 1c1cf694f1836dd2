package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/podbay/podbay/internal/config"
)

// fakeProbe is a host made of maps: a path absent from them does not
// exist.
type fakeProbe struct {
	paths    map[string]string // LookPath: name → path
	outputs  map[string]string // Output: path → --version output (absent: the command fails)
	files    map[string]string // ReadFile
	modes    map[string]fs.FileMode
	statfs   map[string]fakeFS
	readOnly map[string]bool // Writable fails
	pidfdErr error
	listen   []Listener
}

type fakeFS struct {
	typ  int64
	free uint64
}

func newFakeProbe() *fakeProbe {
	return &fakeProbe{paths: map[string]string{}, outputs: map[string]string{}, files: map[string]string{},
		modes: map[string]fs.FileMode{}, statfs: map[string]fakeFS{}, readOnly: map[string]bool{}}
}

// exe adds an executable at path, found by name, printing version.
func (f *fakeProbe) exe(name, path, version string) {
	f.paths[name] = path
	f.paths[path] = path
	f.modes[path] = 0o755
	if version != "" {
		f.outputs[path] = version
	}
}

func (f *fakeProbe) dir(path string) { f.modes[path] = fs.ModeDir | 0o755 }

func (f *fakeProbe) LookPath(name string) (string, error) {
	if p, ok := f.paths[name]; ok {
		return p, nil
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func (f *fakeProbe) Output(name string, args ...string) (string, error) {
	if out, ok := f.outputs[name]; ok {
		return out, nil
	}
	return "", fmt.Errorf("%s: exit status 1", name)
}

func (f *fakeProbe) ReadFile(path string) ([]byte, error) {
	if s, ok := f.files[path]; ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
}

func (f *fakeProbe) Stat(path string) (fs.FileInfo, error) {
	if m, ok := f.modes[path]; ok {
		return fakeInfo{path, m}, nil
	}
	if _, ok := f.files[path]; ok {
		return fakeInfo{path, 0o644}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
}

func (f *fakeProbe) Statfs(path string) (int64, uint64, error) {
	if s, ok := f.statfs[path]; ok {
		return s.typ, s.free, nil
	}
	return 0, 0, fmt.Errorf("statfs %s: %w", path, fs.ErrNotExist)
}

func (f *fakeProbe) Writable(dir string) error {
	if f.readOnly[dir] {
		return errors.New("permission denied")
	}
	return nil
}

func (f *fakeProbe) PidfdOpen() error { return f.pidfdErr }

func (f *fakeProbe) TCPListeners() ([]Listener, error) { return f.listen, nil }

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (i fakeInfo) Name() string       { return i.name }
func (i fakeInfo) Size() int64        { return 0 }
func (i fakeInfo) Mode() fs.FileMode  { return i.mode }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fakeInfo) Sys() any           { return nil }

// validConfig is the default config, validated.
func validConfig() *config.Config {
	cfg := config.Default()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return cfg
}
