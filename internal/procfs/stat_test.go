package procfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseStatFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Stat
	}{
		{"stat-sh", Stat{PID: 3297, Comm: "sh", State: "S", PPID: 3285, PGRP: 3297, Session: 3297, TTY: 0, TPGID: -1,
			Flags: 4194560, UTime: 1, STime: 2}},
		// The classic trap: a command name holding ") " and "(".
		{"stat-comm-parens", Stat{PID: 42, Comm: "a) b) (c", State: "Z", PPID: 7, PGRP: 8, Session: 9, TPGID: -1,
			Flags: 4194380, UTime: 250, STime: 150}},
		{"stat-conmon-exiting", Stat{PID: 1937, Comm: "conmon", State: "D", PPID: 1, PGRP: 1937, Session: 1937, TPGID: -1,
			Flags: 4194380, UTime: 0, STime: 1}},
		{"stat-tty", Stat{PID: 77, Comm: "my app ) x", State: "S", PPID: 70, PGRP: 77, Session: 77, TTY: 34817, TPGID: 77,
			Flags: 4194304, UTime: 12, STime: 3}},
	} {
		got, err := ParseStat(readFixture(t, tc.file))
		if err != nil || got != tc.want {
			t.Errorf("%s: ParseStat = (%+v, %v), want %+v", tc.file, got, err, tc.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want Stat
		ok   bool
	}{
		{stat: "3297 (sh) S 3285 3297 3297 0 -1 4194560", want: Stat{PID: 3297, Comm: "sh", State: "S", PPID: 3285, PGRP: 3297, Session: 3297, TPGID: -1, Flags: 4194560}, ok: true},
		{stat: "42 (x y) R 1 1 1", want: Stat{PID: 42, Comm: "x y", State: "R", PPID: 1, PGRP: 1, Session: 1}, ok: true},
		{stat: "42 () R 1 1 1\n", want: Stat{PID: 42, State: "R", PPID: 1, PGRP: 1, Session: 1}, ok: true},
		{stat: "42 (sh) S 3285 3297"},
		{stat: "42 (sh) S x y z"},
		{stat: "42 sh) S 1 1 1"},
		{stat: "x (sh) S 1 1 1"},
		{stat: "42 (sh"},
		{stat: "garbage"},
		{stat: ""},
	} {
		got, err := ParseStat([]byte(tc.stat))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseStat(%q) = (%+v, %v), want %+v (ok %v)", tc.stat, got, err, tc.want, tc.ok)
		}
	}
}

func TestStatStates(t *testing.T) {
	for _, tc := range []struct {
		stat                  string
		dead, zombie, exiting bool
	}{
		// Seen in the Debian 12 guest: conmon in do_exit, its command
		// line gone already (flags 0x40004C).
		{"1937 (conmon) D 1 1937 1937 0 -1 4194380 118", false, false, true},
		{"1937 (conmon) S 1 1937 1937 0 -1 4194368 118", false, false, false},
		{"1937 (conmon) Z 1 1937 1937 0 -1 4194380 118", true, true, false},
		{"1937 (conmon) X 1 1937 1937 0 -1 4194380 118", true, false, false},
		{"1937 (conmon) x 1 1937 1937 0 -1 4194380 118", true, false, false},
		{"42 (a) b) c) R 1 42 42 0 -1 4 0", false, false, true},
	} {
		st, err := ParseStat([]byte(tc.stat))
		if err != nil {
			t.Fatalf("ParseStat(%q): %v", tc.stat, err)
		}
		if st.Dead() != tc.dead || st.Zombie() != tc.zombie || st.Exiting() != tc.exiting {
			t.Errorf("%q: dead %v zombie %v exiting %v, want %v %v %v", tc.stat,
				st.Dead(), st.Zombie(), st.Exiting(), tc.dead, tc.zombie, tc.exiting)
		}
	}
}

func TestCPUTime(t *testing.T) {
	st, err := ParseStat(readFixture(t, "stat-comm-parens"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CPUTime(), 4*time.Second; got != want {
		t.Errorf("CPUTime = %v, want %v", got, want)
	}
}

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.PPID != os.Getppid() || st.Dead() {
		t.Errorf("ReadStat(self) = %+v, want pid %d ppid %d", st, os.Getpid(), os.Getppid())
	}
	if _, err := ReadStat(-1); err == nil {
		t.Error("ReadStat(-1) succeeded")
	}
}
