package signal

import (
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
		ok   bool
	}{
		{"SIGTERM", syscall.SIGTERM, true},
		{"TERM", syscall.SIGTERM, true},
		{"sigusr1", syscall.SIGUSR1, true},
		{"9", syscall.SIGKILL, true},
		{"SIGRTMIN", 34, true},
		{"SIGRTMIN+3", 37, true},
		{"RTMAX-1", 63, true},
		{"SIGRTMIN-1", 0, false},
		{"0", 0, false},
		{"65", 0, false},
		{"SIGNOPE", 0, false},
		{"", 0, false},
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
