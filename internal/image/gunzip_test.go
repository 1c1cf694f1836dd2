package image

import (
	"archive/tar"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

// execDir is a directory the user nobody can reach and run programs from
// (t.TempDir's are root's alone).
func execDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podbay-gunzip-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeProgram(t *testing.T, dir, name, script string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGunzipperSettings(t *testing.T) {
	requireRoot(t)
	dir := execDir(t)
	liar := writeProgram(t, dir, "liar", "cat >/dev/null; echo not-it\n")
	failing := writeProgram(t, dir, "failing", "exit 3\n")
	gzipPath, err := exec.LookPath("gzip")
	if err != nil {
		t.Skip("no gzip")
	}
	for _, tc := range []struct {
		setting, wantPath, wantErr string
	}{
		{setting: "builtin"},
		{setting: gzipPath, wantPath: gzipPath},
		{setting: "gzip", wantErr: "want auto, builtin or an absolute path"},
		{setting: filepath.Join(dir, "missing"), wantErr: "no such file"},
		{setting: liar, wantErr: `it made "not-it\n" of a known stream`},
		{setting: failing, wantErr: "exit status 3"},
	} {
		t.Run(filepath.Base(tc.setting), func(t *testing.T) {
			g, err := newGunzipper(tc.setting)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("newGunzipper(%q) = %v, %v; want an error containing %q", tc.setting, g, err, tc.wantErr)
				}
				return
			}
			if err != nil || g.path != tc.wantPath {
				t.Fatalf("newGunzipper(%q) = %q, %v; want %q", tc.setting, g.path, err, tc.wantPath)
			}
		})
	}
	// auto: igzip from PATH, or in process without it.
	t.Run("auto", func(t *testing.T) {
		t.Setenv("PATH", dir)
		if g, err := newGunzipper("auto"); err != nil || g.path != "" {
			t.Errorf("auto without igzip = %q, %v; want in process", g.path, err)
		}
		igzip := writeProgram(t, dir, "igzip", "exec "+gzipPath+" \"$@\"\n")
		if g, err := newGunzipper("auto"); err != nil || g.path != igzip {
			t.Errorf("auto with igzip = %q, %v; want %s", g.path, err, igzip)
		}
		writeProgram(t, dir, "igzip", "exit 1\n")
		if g, err := newGunzipper("auto"); err == nil || g.path != "" {
			t.Errorf("auto with a broken igzip = %q, %v; want in process and an error to log", g.path, err)
		}
	})
	// A configured program that does not work stops the store.
	t.Run("New", func(t *testing.T) {
		e := &testEnv{t: t, root: t.TempDir()}
		_, err := New(testCtx(t), Config{StorageRoot: filepath.Join(e.root, "graph"), RunRoot: filepath.Join(e.root, "run"),
			GzipDecompressor: failing})
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("New with a failing decompressor = %v", err)
		}
	})
}

// externalDecompressors are the programs the one-pass pull is tested with:
// gzip (always there) and igzip (package isal) when installed.
func externalDecompressors(t *testing.T) []string {
	var out []string
	for _, name := range []string{"gzip", "igzip"} {
		if p, err := exec.LookPath(name); err == nil {
			out = append(out, p)
		} else if name == "igzip" && os.Getenv("CI") == "true" {
			t.Errorf("igzip not installed: hack/install-deps.sh installs isal")
		}
	}
	return out
}

// A pull with an external decompressor stores exactly what the in-process
// one stores.
func TestOnePassExternalGunzip(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	reg.pushRaw("test/gz:1", gzipLayer(t, tars[0]), gzipLayer(t, tars[1]), gzipLayer(t, tars[2]))
	pull := func(setting string) []layerView {
		e := newEnv(t, func(c *Config) { c.GzipDecompressor = setting })
		if want := map[bool]string{true: "", false: setting}[setting == "builtin"]; e.store.gunzip.path != want {
			t.Fatalf("decompressor %q, want %q", e.store.gunzip.path, want)
		}
		e.insecure(reg.host)
		img, err := e.store.Pull(testCtx(t), reg.ref("test/gz:1"), nil)
		if err != nil {
			t.Fatalf("Pull (%s): %v", setting, err)
		}
		rec, err := e.store.store.Image(img.ID)
		if err != nil {
			t.Fatal(err)
		}
		return e.layerChain(rec.TopLayer)
	}
	want := pull("builtin")
	for _, p := range externalDecompressors(t) {
		if got := pull(p); !reflect.DeepEqual(got, want) {
			t.Errorf("%s stored\n%+v\nin process\n%+v", p, got, want)
		}
	}
}

// A corrupt gzip stream, and a layer whose unpacking fails before its
// stream ends, fail the pull with an external decompressor as in process;
// the program is ended and nothing is left.
func TestOnePassExternalGunzipFailures(t *testing.T) {
	reg := newRegistry(t)
	tars := multiLayerTars(t)
	good := gzipLayer(t, tars[0])
	truncated := gzipLayer(t, tars[1])
	truncated.blob = truncated.blob[:len(truncated.blob)/2]
	reg.pushRaw("test/truncated:1", good, truncated)
	notGzip := gzipLayer(t, tars[2])
	notGzip.blob = append([]byte{0x1f, 0x8b, 0x08}, []byte(strings.Repeat("not deflate ", 100))...)
	reg.pushRaw("test/notdeflate:1", good, notGzip)
	// A tar entry that cannot be unpacked (a hard link to a file the
	// layer does not have) ends the unpacking mid-stream.
	badTar := testTar(t, fileEntry("a", strings.Repeat("x", 1<<20), 0),
		tarEntry{hdr: tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "missing"}}, fileEntry("c", strings.Repeat("y", 4<<20), 0))
	reg.pushRaw("test/badtar:1", good, gzipLayer(t, badTar))

	for _, setting := range append([]string{"builtin"}, externalDecompressors(t)...) {
		for _, ref := range []string{"test/truncated:1", "test/notdeflate:1", "test/badtar:1"} {
			t.Run(filepath.Base(setting)+"/"+ref, func(t *testing.T) {
				e := newEnv(t, func(c *Config) { c.GzipDecompressor = setting })
				e.insecure(reg.host)
				_, err := e.store.Pull(testCtx(t), reg.ref(ref), nil)
				if err == nil {
					t.Fatal("Pull succeeded")
				}
				t.Logf("Pull = %v (invalid argument: %v)", err, errors.Is(err, errdefs.ErrInvalidArgument))
				var mismatch *LayerDigestError
				if errors.As(err, &mismatch) && mismatch.What == "compressed digest" {
					t.Errorf("Pull = %v: the blob's digest is the manifest's", err)
				}
				e.store.pullsDone.Wait()
				if images, layers := e.counts(); images != 0 || layers > 1 {
					t.Errorf("after the failed pull: %d images, %d layers", images, layers)
				}
				if staged := e.stagingDirs(); len(staged) != 0 {
					t.Errorf("staging directories left: %v", staged)
				}
				if kids := childProcesses(t); len(kids) != 0 {
					t.Errorf("processes left: %v", kids)
				}
			})
		}
	}
}

// childProcesses lists the test process's live children.
func childProcesses(t *testing.T) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "children"))
		if err != nil {
			continue
		}
		for _, pid := range strings.Fields(string(data)) {
			if _, err := strconv.Atoi(pid); err != nil {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
			stat, _ := os.ReadFile(filepath.Join("/proc", pid, "stat"))
			if fields := strings.Fields(string(stat)); len(fields) > 2 && fields[2] == "Z" {
				continue
			}
			out = append(out, pid+" "+strings.TrimSpace(string(comm)))
		}
	}
	return out
}
