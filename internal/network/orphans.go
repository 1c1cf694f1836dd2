package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/netns"
)

// orphanWait bounds how long KillOrphanedPlugins waits for the plugins it
// killed to exit.
const orphanWait = 5 * time.Second

// orphanPoll is how often KillOrphanedPlugins looks again at a killed
// plugin it holds no pidfd for.
const orphanPoll = 20 * time.Millisecond

// orphan is a CNI plugin process that a previous podbayd started.
type orphan struct {
	pid         int
	command     string // CNI_COMMAND
	containerID string // CNI_CONTAINERID
}

// KillOrphanedPlugins kills the CNI plugin processes a previous podbayd
// left running, and waits (orphanWait at most) until they have exited.
// It must run before this daemon invokes any plugin, so before recovery
// runs a DEL: each plugin runs in its own process group so that a signal
// to the daemon's group does not stop it half way, and so a plugin
// survives a SIGKILLed daemon. An ADD that finished after the restarted
// daemon's DEL had undone its pod would leave what it made (iptables rules,
// an IP) for ever.
//
// A process is killed only if its environment names a CNI_COMMAND, a
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
	var waits []func(deadline time.Time) bool
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		wait, o, ok := killIfOrphan(pid, dir)
		if !ok {
			continue
		}
		killed++
		waits = append(waits, wait)
		log.G(ctx).Warn("killed a CNI plugin a previous podbayd left running",
			"pid", o.pid, "command", o.command, "id", o.containerID)
	}
	deadline := time.Now().Add(orphanWait)
	var stuck int
	for _, wait := range waits {
		if !wait(deadline) {
			stuck++
		}
	}
	if stuck > 0 {
		return killed, fmt.Errorf("%d of %d orphaned cni plugins killed did not exit within %s", stuck, killed, orphanWait)
	}
	return killed, nil
}

// killIfOrphan kills pid if it is an orphaned plugin (see
// KillOrphanedPlugins), and returns a function that waits for it to exit
// until a deadline. The pidfd taken before the process's environment is
// read makes sure that the process signalled is the one that matched.
func killIfOrphan(pid int, netnsDir string) (wait func(time.Time) bool, o orphan, ok bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fd = -1
		if !errors.Is(err, unix.ENOSYS) {
			return nil, o, false // gone, or not ours to see
		}
	}
	closeFd := func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		closeFd()
		return nil, o, false
	}
	o, ok = matchOrphan(environ, netnsDir)
	if !ok {
		closeFd()
		return nil, o, false
	}
	o.pid = pid
	signal := func(sig unix.Signal) error {
		if fd >= 0 {
			return unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		return unix.Kill(pid, sig)
	}
	// Still the process that matched: its group (whose id stays reserved
	// while it lives) goes first, then the process itself.
	if pgid, err := unix.Getpgid(pid); err == nil && pgid == pid && signal(0) == nil {
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
	if err := signal(unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		closeFd()
		return nil, o, false
	}
	wait = func(deadline time.Time) bool {
		defer closeFd()
		for {
			if fd >= 0 {
				// A pidfd becomes readable when its process exits.
				ms := int(time.Until(deadline).Milliseconds())
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				n, err := unix.Poll(fds, max(ms, 0))
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return err == nil && n > 0
			}
			if !processLive(pid) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(orphanPoll)
		}
	}
	return wait, o, true
}

// processLive reports whether pid is a process that has not exited (a
// zombie has).
func processLive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
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
	if o.command == "" || !isPodID(o.containerID) {
		return o, false
	}
	if filepath.Dir(nsPath) != netnsDir {
		return o, false
	}
	id, ok := strings.CutPrefix(filepath.Base(nsPath), netns.Prefix)
	return o, ok && isPodID(id)
}

// isPodID reports whether s is a podbay ID: 64 lower-case hex digits.
func isPodID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
