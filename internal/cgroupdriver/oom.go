package cgroupdriver

import (
	"context"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/systemd"
)

// sigkilled is the exit code of a process killed by SIGKILL, which an OOM
// kill is.
const sigkilled = 128 + int32(syscall.SIGKILL)

// ParentOOMKills is, under the systemd driver, the OOM kill count of the
// parent cgroup of the container whose cgroup is cgroupPath (its pod's
// cgroup), read before the container starts for ParentOOMKilled; nil
// under cgroupfs or when it cannot be read.
func (d *Driver) ParentOOMKills(cgroupPath string) *uint64 {
	if !d.cfg.Systemd || d.cfg.OOM == nil || cgroupPath == "" {
		return nil
	}
	n, err := d.cfg.OOM.OOMKills(parentCgroup(cgroupPath))
	if err != nil {
		return nil
	}
	return &n
}

// ParentOOMKilled tells an OOM kill under the systemd driver that the
// container's own cgroup can no longer show: systemd removes a scope's
// cgroup as soon as its last process exits, often before conmon (or
// podbay) reads memory.events there (runc#5071, cri-o#7035; containerd
// skips critest's OOM spec under systemd for it). The parent cgroup, the
// pod's slice, counts its descendants' kills and outlives the scope: a
// container that died by SIGKILL (code) without a stop from podbay
// (stopping), after that count grew past before (ParentOOMKills when the
// container started), was OOM-killed. It is wrong only when another
// process under the same parent was OOM-killed meanwhile and this one was
// SIGKILLed by someone else.
func (d *Driver) ParentOOMKilled(before *uint64, cgroupPath string, code int32, stopping bool) bool {
	if before == nil || d.cfg.OOM == nil || code != sigkilled || stopping {
		return false
	}
	n, err := d.cfg.OOM.OOMKills(parentCgroup(cgroupPath))
	return err == nil && n > *before
}

// ScopeOOMKilled asks systemd, under the systemd driver, whether container
// id's scope ended in an OOM kill: systemd removes the scope's cgroup as
// soon as it empties, so memory.events may be gone before a shim or podbay
// reads it. Only an exit by SIGKILL is asked about; while the scope is
// still active (systemd has not handled the exit yet) it is asked again,
// for up to a second.
func (d *Driver) ScopeOOMKilled(ctx context.Context, id string, code int32) bool {
	if !d.cfg.Systemd || d.cfg.Manager == nil || code != sigkilled {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	unit := systemd.ScopeName(id)
	for i := 0; ; i++ {
		killed, settled, err := d.cfg.Manager.ScopeOOMKilled(ctx, unit)
		if err != nil {
			log.G(ctx).Debug("ask systemd about an OOM kill", "unit", unit, "err", err)
			return false
		}
		if killed || settled || i == 4 {
			return killed
		}
		time.Sleep(200 * time.Millisecond)
	}
}
