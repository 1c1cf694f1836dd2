package network

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/procfs"
)

// orphanWait bounds how long KillOrphanedPlugins waits for the plugins it
// killed to exit.
const orphanWait = 5 * time.Second

// orphanDelWait bounds how long KillOrphanedPlugins lets an orphaned DEL
// finish by itself before it kills it.
const orphanDelWait = 10 * time.Second

// orphanPoll is how often KillOrphanedPlugins looks again at a plugin it
// holds no pidfd for.
const orphanPoll = 20 * time.Millisecond

// orphan is a CNI plugin process that a previous podbayd started.
type orphan struct {
	pid         int
	command     string // CNI_COMMAND
	containerID string // CNI_CONTAINERID
	// proc is a pidfd on the process, or its bare pid on kernels without
	// pidfd_open.
	proc *procfs.Process
}

// KillOrphanedPlugins ends the CNI plugin processes a previous podbayd
// left running, and waits until they have exited. It must run before this
// daemon invokes any plugin, so before recovery runs a DEL: each plugin
// runs in its own process group so that a signal to the daemon's group
// does not stop it half way, and so a plugin survives a SIGKILLed daemon.
//
// An orphaned ADD is killed at once: finishing after the restarted
// daemon's DEL had undone its pod, it would leave what it made (iptables
// rules, an IP) for ever; killed, what it made so far is found by that
// DEL. An orphaned DEL (or any other command) is left to finish, up to
// orphanDelWait, and only then killed: a DEL killed between deleting the
// pod's interface and its masquerade rules leaves rules no later DEL can
// find, since the bridge plugin finds them through the interface's
// addresses.
//
// A process is matched only if its environment names a CNI_COMMAND, a
// CNI_CONTAINERID that is a podbay ID (64 hex) and a CNI_NETNS that is one
// of podbay's namespaces in netnsDir; with it goes its process group when
// it leads one (the plugin does; what it started, such as iptables, is in
// that group). Each kill is logged at warning level.
func KillOrphanedPlugins(ctx context.Context, netnsDir string) (killed int, err error) {
	dir, err := filepath.Abs(netnsDir)
	if err != nil {
		return 0, fmt.Errorf("netns dir %s: %w", netnsDir, err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	var found []*orphan
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if o, ok := findOrphan(pid, dir); ok {
			found = append(found, o)
		}
	}
	defer func() {
		for _, o := range found {
			o.close()
		}
	}()
	kill := func(o *orphan) {
		if o.kill() {
			killed++
			log.G(ctx).Warn("killed a CNI plugin a previous podbayd left running",
				"pid", o.pid, "command", o.command, "id", o.containerID)
		}
	}
	for _, o := range found {
		if o.command == "ADD" {
			kill(o)
		}
	}
	delDeadline := time.Now().Add(orphanDelWait)
	for _, o := range found {
		if o.command != "ADD" && !o.wait(delDeadline) {
			kill(o)
		}
	}
	deadline := time.Now().Add(orphanWait)
	var stuck int
	for _, o := range found {
		if !o.wait(deadline) {
			stuck++
		}
	}
	if stuck > 0 {
		return killed, fmt.Errorf("%d orphaned cni plugins did not exit within %s of their kill", stuck, orphanWait)
	}
	return killed, nil
}

// findOrphan returns pid if it is an orphaned plugin (see
// KillOrphanedPlugins), holding a pidfd taken before the process's
// environment was read, so that the process later signalled is the one
// that matched. The caller closes it.
func findOrphan(pid int, netnsDir string) (*orphan, bool) {
	proc, err := procfs.OpenProcess(pid)
	if err != nil {
		return nil, false // gone, or not ours to see
	}
	o := &orphan{pid: pid, proc: proc}
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		o.close()
		return nil, false
	}
	m, ok := matchOrphan(environ, netnsDir)
	if !ok {
		o.close()
		return nil, false
	}
	o.command, o.containerID = m.command, m.containerID
	return o, true
}

func (o *orphan) close() { o.proc.Close() }

// kill kills the process and, first, the group it leads, and reports
// whether it was still there to kill.
func (o *orphan) kill() bool {
	pgid, err := unix.Getpgid(o.pid)
	// Still the process that matched (the pidfd says so), so the group id
	// read above was its own: it stays reserved while the process lives.
	// A zombie leader counts: its group may still hold live processes.
	if !o.proc.Present() {
		return false
	}
	// The group first, the leader with it; then the process itself in
	// case it leads none. It was there to kill: the group kill may end it
	// and its parent reap it before the second signal, which then fails.
	if err == nil && pgid == o.pid {
		_ = unix.Kill(-o.pid, unix.SIGKILL)
	}
	_ = o.proc.Signal(unix.SIGKILL)
	return true
}

// wait waits until the process has exited or the deadline passed, and
// reports whether it exited.
func (o *orphan) wait(deadline time.Time) bool {
	if o.proc.HasPidfd() {
		// A pidfd becomes readable when its process exits.
		return o.proc.WaitDeadline(deadline)
	}
	for {
		if !processLive(o.pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(orphanPoll)
	}
}

// processLive reports whether pid is a process that has not exited (a
// zombie has).
func processLive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && !st.Dead()
}

// matchOrphan reports whether environ (a /proc/<pid>/environ: NUL
// separated) is the environment of a CNI plugin podbay invoked for one of
// its pods in netnsDir, an absolute, clean path.
func matchOrphan(environ []byte, netnsDir string) (orphan, bool) {
	var o orphan
	var nsPath string
	for _, kv := range bytes.Split(environ, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "CNI_COMMAND":
			o.command = v
		case "CNI_CONTAINERID":
			o.containerID = v
		case "CNI_NETNS":
			nsPath = v
		}
	}
	if o.command == "" || !objectid.Is(o.containerID) {
		return o, false
	}
	if filepath.Dir(nsPath) != netnsDir {
		return o, false
	}
	id, ok := strings.CutPrefix(filepath.Base(nsPath), netns.Prefix)
	return o, ok && objectid.Is(id)
}
