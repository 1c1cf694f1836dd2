package oci

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

var (
	_ runtime.Checkpointer = (*Runtime)(nil)
	_ runtime.Restorer     = (*Runtime)(nil)
)

// DefaultCheckpointTimeout bounds a checkpoint whose caller gives no
// timeout.
const DefaultCheckpointTimeout = 5 * time.Minute

// Checkpoint dumps the running container id with CRIU: `<runtime>
// checkpoint --image-path --work-path [--leave-running] id`. A failure's
// error quotes the runtime and the errors of CRIU's dump.log.
func (r *Runtime) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	if !filepath.IsAbs(opts.ImagePath) || !filepath.IsAbs(opts.WorkPath) {
		return fmt.Errorf("checkpoint %s: image and work paths must be absolute: %w", id, errdefs.ErrInvalidArgument)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultCheckpointTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"--root", r.cfg.RuntimeRoot, "checkpoint", "--image-path", opts.ImagePath, "--work-path", opts.WorkPath}
	if opts.LeaveRunning {
		args = append(args, "--leave-running")
	}
	args = append(args, id)
	cmd := exec.CommandContext(ctx, r.cfg.RuntimePath, args...)
	stderr := runtime.NewCappedBuffer(64 << 10)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: not done within %s", err, timeout)
		}
		msg := runtimeMessage(stderr.Bytes())
		if log := criuLogErrors(filepath.Join(opts.WorkPath, "dump.log")); log != "" {
			msg += "; criu: " + log
		}
		return fmt.Errorf("checkpoint container %s: %s (%w)", id, msg, err)
	}
	return nil
}

// Restore creates container opts.ID from its bundle and the CRIU images in
// imagePath: conmon runs the runtime's restore, which leaves it running.
func (r *Runtime) Restore(ctx context.Context, opts runtime.CreateOptions, imagePath string) (int, error) {
	if !filepath.IsAbs(imagePath) {
		return 0, fmt.Errorf("restore container %s: image path %q is not absolute: %w", opts.ID, imagePath, errdefs.ErrInvalidArgument)
	}
	pid, err := r.create(ctx, opts, imagePath)
	if err != nil {
		if log := criuLogErrors(filepath.Join(opts.BundleDir, "restore.log")); log != "" {
			err = fmt.Errorf("%w; criu: %s", err, log)
		}
		return 0, err
	}
	return pid, nil
}

// criuLogErrors returns the "Error" lines of a CRIU log, joined, or "".
func criuLogErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "Error") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "; ")
}
