package oci

import (
	"path/filepath"

	"github.com/podbay/podbay/internal/procfs"
)

// openInit finds container id's init process from the files conmon and
// the runtime leave in the bundle, without a runtime command (two `state`
// calls, a fork and exec each, are most of a Stop otherwise). ok is false
// when the files do not tell for sure; the caller then asks the runtime.
//
// exited is set when the exit file is there: the init has exited and
// conmon reported it. Otherwise proc is a pidfd handle on the init, which
// the caller closes. The handle is known to be the init's, not a process
// that reused its pid, because its parent is the container's conmon: the
// runtime's create leaves the init to conmon (a child subreaper), conmon
// starts no other process once the create is done, and a pidfd pins its
// pid.
func (r *Runtime) openInit(id string) (proc *procfs.Process, monitor int, exited, ok bool) {
	bundle := r.bundleOf(id)
	if bundle == "" {
		return nil, 0, false, false
	}
	if _, done, err := r.Exited(id); err == nil && done {
		return nil, monitorPID(bundle, id), true, true
	}
	monitor = monitorPID(bundle, id)
	if monitor <= 0 {
		return nil, 0, false, false
	}
	pid, err := readPidFile(filepath.Join(bundle, containerPidFile))
	if err != nil {
		return nil, 0, false, false
	}
	proc, err = procfs.OpenProcess(pid)
	if err != nil {
		return nil, 0, false, false
	}
	if !proc.HasPidfd() || parentPID(pid) != monitor {
		proc.Close()
		return nil, 0, false, false
	}
	return proc, monitor, false, true
}

// parentPID returns the parent pid of pid from /proc, or 0.
func parentPID(pid int) int {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.PPID
}
