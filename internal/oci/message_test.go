package oci

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReadSyncMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		pid     int
		wantErr string // substring; "" means success
		noMsg   bool   // expect errNoSyncMessage
	}{
		{name: "legacy pid", in: `{"pid": 4171}` + "\n", pid: 4171},
		{name: "api v1 data", in: `{"data": 13228}` + "\n", pid: 13228},
		{name: "followed by more", in: `{"data": 7}` + "\n" + `{"data": 0}` + "\n", pid: 7},
		{
			name: "runc failure relayed",
			in: `{"pid": -1, "message": "time=\"2026-11-22T08:33:58Z\" level=fatal msg=\"nsexec[12736]: failed to update /proc/self/oom_score_adj: Permission denied\"\n` +
				`time=\"2026-11-22T08:33:58Z\" level=error msg=\"runc create failed: unable to start container process: can't get final child's PID from pipe: EOF\"\n"}` + "\n",
			wantErr: "nsexec[12736]: failed to update /proc/self/oom_score_adj: Permission denied; runc create failed: unable to start container process",
		},
		{name: "failure with data key", in: `{"data": -1, "message": "crun: bad config"}`, wantErr: "crun: bad config"},
		{name: "failure without message", in: `{"pid": -1}`, wantErr: "conmon reported pid -1"},
		{name: "message only", in: `{"message": "boom"}`, wantErr: "boom"},
		{name: "no pid", in: `{}`, wantErr: "has no pid"},
		{name: "eof", in: "", noMsg: true},
		{name: "garbage", in: "not json", wantErr: "read conmon sync message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, err := readSyncMessage(strings.NewReader(tc.in))
			switch {
			case tc.noMsg:
				if !errors.Is(err, errNoSyncMessage) {
					t.Fatalf("err = %v, want errNoSyncMessage", err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
			default:
				if err != nil || pid != tc.pid {
					t.Fatalf("got (%d, %v), want (%d, nil)", pid, err, tc.pid)
				}
			}
		})
	}
}

func TestRuntimeMessage(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "empty", in: "", want: ""},
		{name: "plain", in: "crun: cannot open config.json\n", want: "crun: cannot open config.json"},
		{name: "logrus quoted", in: `time="2026-11-22T08:35:25Z" level=error msg="container does not exist"` + "\n", want: "container does not exist"},
		{name: "logrus unquoted", in: `time="t" level=error msg=oops extra=1`, want: "oops"},
		{name: "escaped quote", in: `time="t" level=error msg="bad \"x\" value"`, want: `bad "x" value`},
		{name: "duplicates collapse", in: "a\na\nb\n", want: "a; b"},
		{name: "mixed", in: "warning: x\n" + `time="t" level=fatal msg="y"` + "\n\n", want: "warning: x; y"},
		{name: "broken quote kept", in: `time="t" level=error msg="unterminated`, want: `time="t" level=error msg="unterminated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runtimeMessage([]byte(tc.in)); got != tc.want {
				t.Errorf("runtimeMessage(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestTruncateMiddle(t *testing.T) {
	long := strings.Repeat("a", 100) + strings.Repeat("é", 100) + strings.Repeat("z", 100)
	got := truncateMiddle(long, 101)
	if len(got) > 101 {
		t.Errorf("len = %d, want <= 101", len(got))
	}
	if !utf8.ValidString(got) || !strings.HasPrefix(got, "aaaa") || !strings.HasSuffix(got, "zzzz") || !strings.Contains(got, " … ") {
		t.Errorf("truncateMiddle = %q", got)
	}
	if s := "short"; truncateMiddle(s, 10) != s {
		t.Errorf("short string changed")
	}
	msg := runtimeMessage([]byte(strings.Repeat("x", 10000)))
	if len(msg) > maxMessageLen {
		t.Errorf("runtimeMessage returned %d bytes, max %d", len(msg), maxMessageLen)
	}
}
