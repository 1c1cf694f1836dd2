package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/systemd"
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
	args := append(r.cfg.globalArgs(), "checkpoint", "--image-path", opts.ImagePath, "--work-path", opts.WorkPath)
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
	if err := fixRestoredCgroup(opts.BundleDir, pid); err != nil {
		// The processes run, outside the cgroup podbay stops and
		// measures: kill them rather than leave them so.
		for _, p := range processTree(pid) {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		derr := r.Delete(context.WithoutCancel(ctx), opts.ID)
		return 0, errors.Join(fmt.Errorf("restore container %s: %w", opts.ID, err), derr)
	}
	return pid, nil
}

// cgroupV2Root is where the unified cgroup hierarchy is mounted.
var cgroupV2Root = "/sys/fs/cgroup"

// fixRestoredCgroup moves the restored processes (init pid and its
// descendants) into the container's cgroup (the bundle's
// linux.cgroupsPath) on a pure cgroup v2 host. There CRIU, as runc 1.1
// drives it, puts them back into the cgroup of the checkpointed container,
// which runc kill --all and the stats then do not see. A process forked
// while they move is caught by the next pass. Elsewhere (v1: runc maps
// each controller's cgroup), and for systemd cgroups, nothing is done.
func fixRestoredCgroup(bundle string, pid int) error {
	if _, err := os.Stat(filepath.Join(cgroupV2Root, "cgroup.controllers")); err != nil {
		return nil
	}
	spec, err := runtime.ReadSpec(bundle)
	if err != nil || spec.Linux == nil {
		return err
	}
	want := spec.Linux.CgroupsPath
	if slice, unit, ok := systemd.ParseSpecPath(want); ok {
		dir, err := systemd.ExpandSlice(slice)
		if err != nil {
			return nil
		}
		want = path.Join(dir, unit)
	}
	if want == "" || strings.Contains(want, ":") {
		return nil
	}
	want = filepath.Clean("/" + want)
	procs := filepath.Join(cgroupV2Root, want, "cgroup.procs")
	for pass := 0; pass < 5; pass++ {
		moved := 0
		for _, p := range processTree(pid) {
			if cg, err := unifiedCgroup(p); err != nil || cg == want {
				continue // gone, or already there
			}
			if err := os.WriteFile(procs, []byte(strconv.Itoa(p)), 0o644); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return fmt.Errorf("move restored process %d into cgroup %s: %w", p, want, err)
			}
			moved++
		}
		if moved == 0 {
			return nil
		}
	}
	return fmt.Errorf("restored processes keep leaving cgroup %s", want)
}

// processTree lists pid and its descendants, from /proc's children files.
func processTree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], task.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// unifiedCgroup is pid's cgroup v2 path ("0::" line of /proc/<pid>/cgroup).
func unifiedCgroup(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("pid %d has no cgroup v2 path", pid)
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
