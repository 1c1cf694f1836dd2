// Package procfs reads what the kernel says about the host's processes
// under /proc: a process's stat line, the network interfaces of its
// namespace (net/dev), its mount table (mountinfo), and a handle on a
// process that is not the daemon's child (a pidfd). Every part of podbay
// that looks at /proc goes through here, so that the traps of each file
// (a command name holding spaces and ")", octal escapes in mount points)
// are handled once.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// PFExiting is the kernel's PF_EXITING task flag (Stat.Flags): set when
// the process entered its exit.
const PFExiting = 0x4

// userHZ is the unit of the kernel's CPU times in /proc (USER_HZ, 100 on
// every architecture Linux exports to user space).
const userHZ = 100

// Stat is the part of /proc/<pid>/stat that podbay reads.
type Stat struct {
	PID int
	// Comm is the command name, without its parentheses; it may hold
	// spaces and parentheses itself.
	Comm string
	// State is the one-letter state: R, S, D, Z (zombie), X or x (dead),
	// T, t, I...
	State string
	PPID  int
	PGRP  int
	// Session is the session id.
	Session int
	// TTY is the controlling terminal (tty_nr); 0 for none.
	TTY   int
	TPGID int
	// Flags are the kernel's task flags (PF_*).
	Flags uint64
	// UTime and STime are the CPU time spent in user and kernel mode, in
	// clock ticks.
	UTime, STime uint64
}

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses "pid (comm) state ppid pgrp session tty_nr tpgid flags
// minflt cminflt majflt cmajflt utime stime ...". comm may hold spaces and
// parentheses, so the fields start after the last ")". The fields up to
// session are required; later ones are read where present (a field the
// line lacks stays 0).
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	i := bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return Stat{}, fmt.Errorf("bad stat %q", b)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("bad stat %q: pid: %w", b, err)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return Stat{}, fmt.Errorf("bad stat %q", b)
	}
	st := Stat{PID: pid, Comm: string(b[open+1 : i]), State: f[0]}
	for j, dst := range []*int{&st.PPID, &st.PGRP, &st.Session} {
		n, err := strconv.Atoi(f[j+1])
		if err != nil {
			return Stat{}, fmt.Errorf("bad stat %q: %w", b, err)
		}
		*dst = n
	}
	// Optional fields, by their index in f (state is 0).
	for _, o := range []struct {
		at  int
		dst *int
	}{{4, &st.TTY}, {5, &st.TPGID}} {
		if o.at < len(f) {
			*o.dst, _ = strconv.Atoi(f[o.at])
		}
	}
	for _, o := range []struct {
		at  int
		dst *uint64
	}{{6, &st.Flags}, {11, &st.UTime}, {12, &st.STime}} {
		if o.at < len(f) {
			*o.dst, _ = strconv.ParseUint(f[o.at], 10, 64)
		}
	}
	return st, nil
}

// Dead reports whether the process has exited: a zombie not reaped yet,
// or dead.
func (s Stat) Dead() bool {
	return s.State == "Z" || s.State == "X" || s.State == "x"
}

// Zombie reports whether the process has exited and waits to be reaped.
func (s Stat) Zombie() bool { return s.State == "Z" }

// Exiting reports whether the process is inside the kernel's exit: not
// yet a zombie (or reaped), but with PF_EXITING set.
func (s Stat) Exiting() bool { return !s.Dead() && s.Flags&PFExiting != 0 }

// CPUTime is the process's user and system CPU time.
func (s Stat) CPUTime() time.Duration {
	return time.Duration(s.UTime+s.STime) * (time.Second / userHZ)
}
