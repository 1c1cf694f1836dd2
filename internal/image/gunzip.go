package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/pgzip"

	"github.com/podbay/podbay/internal/runtime"
)

// A one-pass pull spends most of its CPU time inflating gzip layers
// (about 40% of it, profiled on the realistic bench image), and a layer's
// inflating is one stream that cannot be split. ISA-L's igzip inflates
// about three times as fast as Go's inflate and runs beside the daemon,
// on another CPU, while the daemon hashes and unpacks what it already
// inflated. containerd uses it too when it is installed (package isal).
//
// The gunzipper setting ([image] gzip_decompressor):
//
//	"auto"     igzip from PATH if it is there and works, else in process
//	"builtin"  in process (klauspost/pgzip)
//	/abs/path  that program, as `PROGRAM -d -c` (igzip, unpigz, gzip)
//
// The program reads the layer's compressed bytes on its standard input and
// writes the tar on its standard output, nothing else: it is run as the
// unprivileged user nobody, with an empty environment, in /, and is killed
// when the layer's pull ends early. It never decides what is stored: both
// digests are computed by podbayd, the compressed one over what the
// program was fed, the diffID over what it wrote, so a program that
// inflated wrongly fails the layer's diffID (InvalidArgument) as a corrupt
// layer would. (igzip ignores bytes after the last gzip member where Go's
// reader refuses them; the compressed digest covers those bytes either
// way.)

// Gzip decompressor settings.
const (
	GzipDecompressorAuto    = "auto"
	GzipDecompressorBuiltin = "builtin"
)

// nobody is the user the external decompressor runs as.
const nobody = 65534

// gunzipper makes the uncompressed reader of a gzip layer.
type gunzipper struct {
	path string // the external program; "" decompresses in process
}

// newGunzipper resolves the setting; "auto" probes igzip once.
func newGunzipper(setting string) (gunzipper, error) {
	switch setting {
	case "", GzipDecompressorAuto:
		p, err := exec.LookPath("igzip")
		if err != nil {
			return gunzipper{}, nil
		}
		g := gunzipper{path: p}
		if err := g.probe(); err != nil {
			return gunzipper{}, fmt.Errorf("%s does not work as a gzip decompressor (%w); layers are decompressed in process", p, err)
		}
		return g, nil
	case GzipDecompressorBuiltin:
		return gunzipper{}, nil
	}
	if !filepath.IsAbs(setting) {
		return gunzipper{}, fmt.Errorf("gzip decompressor %q: want auto, builtin or an absolute path", setting)
	}
	g := gunzipper{path: setting}
	if err := g.probe(); err != nil {
		return gunzipper{}, fmt.Errorf("gzip decompressor %s: %w", setting, err)
	}
	return g, nil
}

// probeGzip is "podbay\n", gzip-compressed.
var probeGzip = func() []byte {
	var b bytes.Buffer
	zw := pgzip.NewWriter(&b)
	_, _ = zw.Write([]byte("podbay\n"))
	_ = zw.Close()
	return b.Bytes()
}()

// probe decompresses a known stream with the program, as a layer would be.
func (g gunzipper) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := g.open(ctx, bytes.NewReader(probeGzip))
	if err != nil {
		return err
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, 64))
	if err != nil {
		return err
	}
	if string(out) != "podbay\n" {
		return fmt.Errorf("it made %q of a known stream", out)
	}
	return nil
}

// String names the decompressor, for the log.
func (g gunzipper) String() string {
	if g.path == "" {
		return "in process"
	}
	return g.path
}

// open returns the uncompressed stream of the gzip stream r. The caller
// must Close it; reading it to its end reports the program's failure.
func (g gunzipper) open(ctx context.Context, r io.Reader) (io.ReadCloser, error) {
	if g.path == "" {
		return pgzip.NewReader(r)
	}
	return startGunzip(ctx, g.path, r)
}

// externalGunzip is the output of a decompressor process.
type externalGunzip struct {
	cmd    *exec.Cmd
	out    *os.File
	stderr *runtime.CappedBuffer // read once the program is waited for

	mu     sync.Mutex
	waited bool
	err    error // the process's failure, once waited
}

func startGunzip(ctx context.Context, path string, in io.Reader) (*externalGunzip, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, "-d", "-c")
	cmd.Stdin = in // copied by a goroutine of exec's until in ends or the program exits
	cmd.Stdout = pw
	stderr := runtime.NewCappedBuffer(1 << 10)
	cmd.Stderr = stderr
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody, NoSetGroups: true},
	}
	// The stdin copier may be blocked reading the registry; Wait does not
	// hang on it once the program is gone.
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, &streamError{err: fmt.Errorf("start %s: %w", path, err)}
	}
	return &externalGunzip{cmd: cmd, out: pr, stderr: stderr}, nil
}

// Read reads the program's output; at its end, the program's exit.
func (g *externalGunzip) Read(p []byte) (int, error) {
	n, err := g.out.Read(p)
	if errors.Is(err, io.EOF) {
		if werr := g.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// wait reaps the program and returns its failure, once.
func (g *externalGunzip) wait() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.waited {
		g.waited = true
		if err := g.cmd.Wait(); err != nil {
			g.err = &streamError{err: fmt.Errorf("%s: %w: %s", filepath.Base(g.cmd.Path), err, bytes.TrimSpace(g.stderr.Bytes()))}
		}
	}
	return g.err
}

// Close ends the program if it still runs and reaps it.
func (g *externalGunzip) Close() error {
	g.mu.Lock()
	waited := g.waited
	g.mu.Unlock()
	if !waited {
		_ = g.cmd.Process.Kill()
	}
	_ = g.wait()
	return g.out.Close()
}
