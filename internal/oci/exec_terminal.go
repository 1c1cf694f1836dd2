package oci

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/runtime"
)

// An interactive exec with a terminal has two pseudo-terminals in a row:
// the daemon's (the runtime's stdio, see terminalStdio) and the process's
// own, which the runtime allocates in the container and copies to and
// from. A newline written by the process must get one carriage return,
// so exactly one of the two may translate it (ONLCR).
//
// crun leaves the process's terminal as it is (ONLCR) and puts its own
// in raw mode (no ONLCR). runc does the opposite: console.SetRaw keeps
// output processing (OPOST, and the daemon's terminal has ONLCR), and it
// clears ONLCR on the process's terminal through the master it receives
// (recvtty). But runc's init does not wait for that: it sends the master
// and execs the process at once. Under load the process runs first:
//
//   - what it writes before the clear gets its CR from its terminal and
//     a second one from the runtime's (CR CR LF; a terminal shows it as
//     CR LF);
//   - worse, a shell that read its terminal's settings before the clear
//     writes them back (busybox's and bash's line editing save the
//     settings when a line starts and restore them when it ends), and
//     ONLCR is back on the process's terminal for the whole session:
//     every newline after the first command gets two CRs.
//
// So once the runtime has set up its terminals (runc and crun write the
// pid file only after that) and before the client's input is passed on,
// settleNewlines looks at which terminal translates: if the daemon's does,
// ONLCR is cleared on the process's terminal and locked (TIOCSLCKTRMIOS,
// root only), so that settings saved earlier cannot turn it back on. This
// is what runc meant to do; only its race is taken away. The lock covers
// the ONLCR bit alone: the process still sets everything else, as on any
// terminal.

// settleNewlines makes sure that only one terminal of the exec at pid
// translates newlines, as described above. master is the daemon's
// terminal.
func settleNewlines(master *os.File, pid, runtimePid int) error {
	var outer *unix.Termios
	if err := runtime.FdControl(master, func(fd int) error {
		var err error
		outer, err = unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	}); err != nil {
		return fmt.Errorf("runtime's terminal: %w", err)
	}
	if outer.Oflag&unix.OPOST == 0 || outer.Oflag&unix.ONLCR == 0 {
		return nil // the process's terminal translates (crun)
	}
	f, err := openProcessTerminal(pid, runtimePid)
	if err != nil {
		return err
	}
	defer f.Close()
	return runtime.FdControl(f, func(fd int) error { return lockONLCROff(fd) })
}

// lockONLCROff clears ONLCR on the terminal fd and locks it. The process
// may set its terminal between the two steps: the lock keeps whatever
// value is there, so that is checked, and done again if it lost.
func lockONLCROff(fd int) error {
	for range 5 {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		if t.Oflag&unix.ONLCR != 0 {
			t.Oflag &^= unix.ONLCR
			if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
				return err
			}
		}
		lock, err := unix.IoctlGetTermios(fd, unix.TIOCGLCKTRMIOS)
		if err != nil {
			return err
		}
		lock.Oflag |= unix.ONLCR
		if err := unix.IoctlSetTermios(fd, unix.TIOCSLCKTRMIOS, lock); err != nil {
			return fmt.Errorf("lock terminal settings: %w", err)
		}
		if t, err = unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			return err
		}
		if t.Oflag&unix.ONLCR == 0 {
			return nil
		}
		lock.Oflag &^= unix.ONLCR
		if err := unix.IoctlSetTermios(fd, unix.TIOCSLCKTRMIOS, lock); err != nil {
			return fmt.Errorf("unlock terminal settings: %w", err)
		}
	}
	return errors.New("the process kept setting ONLCR on its terminal")
}

// openProcessTerminal opens the terminal of the exec'd process at pid:
// its stdin, if that is still its controlling terminal (the one the
// runtime gave it; a process may have redirected its stdin since). The
// process must still be the runtime's child: a pid reused by then is
// not.
func openProcessTerminal(pid, runtimePid int) (*os.File, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil || !childOfRuntime(st, runtimePid) {
		return nil, fmt.Errorf("process %d is not the runtime's child", pid)
	}
	if st.TTY == 0 {
		return nil, fmt.Errorf("process %d has no controlling terminal", pid)
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/fd/0", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		f.Close()
		return nil, err
	}
	if fst.Mode&unix.S_IFMT != unix.S_IFCHR || !sameDevice(fst.Rdev, st.TTY) {
		f.Close()
		return nil, fmt.Errorf("stdin of process %d is not its terminal", pid)
	}
	return f, nil
}

// sameDevice reports whether rdev (from stat) is the device tty_nr (from
// /proc/<pid>/stat, the kernel's 32-bit encoding: minor bits 0-7 and
// 20-31, major bits 8-19).
func sameDevice(rdev uint64, ttyNr int) bool {
	n := uint32(ttyNr)
	major := (n >> 8) & 0xfff
	minor := (n & 0xff) | ((n >> 12) & 0xfff00)
	return unix.Major(rdev) == major && unix.Minor(rdev) == minor
}
