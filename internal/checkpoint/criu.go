package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// criuChecks caches CheckCRIU's answer per binary: the kernel and the
// binary do not change while the daemon runs.
var criuChecks sync.Map // path -> *criuCheck

type criuCheck struct {
	once sync.Once
	err  error
}

// CheckCRIU tells whether CRIU (the binary at path, or "criu" in PATH as
// runc looks it up) can checkpoint on this host: `criu check` must pass.
// The answer is computed once. A missing binary or a kernel CRIU cannot
// work with gives an error wrapping errdefs.ErrFailedPrecondition that
// quotes what criu says.
func CheckCRIU(ctx context.Context, path string) error {
	if path == "" {
		path = "criu"
	}
	v, _ := criuChecks.LoadOrStore(path, &criuCheck{})
	c := v.(*criuCheck)
	c.once.Do(func() { c.err = runCRIUCheck(ctx, path) })
	return c.err
}

func runCRIUCheck(ctx context.Context, path string) error {
	bin, err := exec.LookPath(path)
	if err != nil {
		return fmt.Errorf("checkpoint needs CRIU: %s not found (install Debian's criu package): %w", path, errdefs.ErrFailedPrecondition)
	}
	// Not bound by the caller: the answer is cached for every later call.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "check")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fmt.Errorf("run %s check: %w", bin, err)
		}
		return fmt.Errorf("CRIU cannot checkpoint on this host (`%s check`: %s): %w", bin, criuMessage(out.String()), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// criuMessage is criu's output as one line: its error lines, joined.
func criuMessage(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	msg := strings.Join(lines, "; ")
	if len(msg) > 1000 {
		msg = msg[:1000] + "..."
	}
	if msg == "" {
		msg = "failed without a message"
	}
	return msg
}
