package oci

import (
	"slices"
	"strings"
	"testing"
)

func TestConmonArgs(t *testing.T) {
	cfg := Config{
		Name:           "runc",
		RuntimePath:    "/usr/sbin/runc",
		RuntimeRoot:    "/run/podbay/runc",
		ConmonPath:     "/usr/bin/conmon",
		ExitDir:        "/run/podbay/exits",
		SocketDir:      "/run/podbay/sockets",
		ConmonLogLevel: "warning",
	}
	base := []string{
		"--api-version", "1",
		"--cid", "c1", "--cuuid", "c1", "--name", "c1",
		"--runtime", "/usr/sbin/runc",
		"--runtime-arg", "--root=/run/podbay/runc",
		"--bundle", "/b/c1",
		"--container-pidfile", "/b/c1/pidfile",
		"--conmon-pidfile", "/b/c1/conmon.pid",
		"--persist-dir", "/b/c1",
		"--exit-dir", "/run/podbay/exits",
		"--socket-dir-path", "/run/podbay/sockets",
	}
	withLog := func(logPath string, extra ...string) []string {
		args := slices.Clone(base)
		args = append(args, "--log-path", logPath, "--log-level", "warning")
		return append(args, extra...)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		opts   CreateOptions
		want   []string
	}{
		{name: "no log", opts: CreateOptions{}, want: withLog("none")},
		{name: "k8s log", opts: CreateOptions{LogPath: "/var/log/pods/x/c/0.log"}, want: withLog("k8s-file:/var/log/pods/x/c/0.log")},
		{name: "terminal", opts: CreateOptions{Terminal: true, Stdin: true}, want: withLog("none", "--terminal")},
		{name: "stdin kept open", opts: CreateOptions{Stdin: true}, want: withLog("none", "--stdin", "--leave-stdin-open")},
		{name: "stdin once", opts: CreateOptions{Stdin: true, StdinOnce: true}, want: withLog("none", "--stdin")},
		{name: "stdin once without stdin", opts: CreateOptions{StdinOnce: true}, want: withLog("none")},
		{
			name:   "size cap and no pivot",
			mutate: func(c *Config) { c.LogSizeMax = 1 << 20; c.NoPivot = true },
			want:   withLog("none", "--log-size-max", "1048576", "--no-pivot"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfg
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			opts := tc.opts
			opts.ID, opts.BundleDir = "c1", "/b/c1"
			if got := conmonArgs(cfg, opts); !slices.Equal(got, tc.want) {
				t.Errorf("conmonArgs =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestConmonEnv(t *testing.T) {
	in := []string{
		"PATH=/usr/sbin:/usr/bin", "HOME=/root", "_OCI_SYNCPIPE=9", "_OCI_STARTPIPE=10",
		"LISTEN_PID=1", "LISTEN_FDS=2", "LISTEN_FDNAMES=a:b", "NOTIFY_SOCKET=/run/n", "XDG_RUNTIME_DIR=/run/user/0",
	}
	want := []string{"PATH=/usr/sbin:/usr/bin", "HOME=/root", "XDG_RUNTIME_DIR=/run/user/0"}
	if got := conmonEnv(in); !slices.Equal(got, want) {
		t.Errorf("conmonEnv = %q, want %q", got, want)
	}
}

func TestValidateID(t *testing.T) {
	for id, ok := range map[string]bool{
		"abc":                       true,
		"0123456789abcdef":          true,
		"k8s_POD_a-b.c+d":           true,
		"":                          false,
		".":                         false,
		"..":                        false,
		"a/b":                       false,
		"../x":                      false,
		"a b":                       false,
		strings.Repeat("f", 64):     true,
		"tab\t":                     false,
		"new\nline":                 false,
		"unicodé":                   false,
		"semi;colon":                false,
		"dots...are.fine.inside...": true,
	} {
		if err := validateID(id); (err == nil) != ok {
			t.Errorf("validateID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}
