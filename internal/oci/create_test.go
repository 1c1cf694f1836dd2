package oci

import (
	"slices"
	"testing"

	"github.com/podbay/podbay/internal/runtime"
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
		"--runtime-arg", "--log=/b/c1/runtime-create.log",
		"--runtime-arg", "--log-format=json",
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
		opts   runtime.CreateOptions
		want   []string
	}{
		{name: "no log", opts: runtime.CreateOptions{}, want: withLog("none")},
		{name: "k8s log", opts: runtime.CreateOptions{LogPath: "/var/log/pods/x/c/0.log"}, want: withLog("k8s-file:/var/log/pods/x/c/0.log")},
		{name: "terminal", opts: runtime.CreateOptions{Terminal: true, Stdin: true}, want: withLog("none", "--terminal")},
		{name: "stdin kept open", opts: runtime.CreateOptions{Stdin: true}, want: withLog("none", "--stdin", "--leave-stdin-open")},
		{name: "stdin once", opts: runtime.CreateOptions{Stdin: true, StdinOnce: true}, want: withLog("none", "--stdin")},
		{name: "stdin once without stdin", opts: runtime.CreateOptions{StdinOnce: true}, want: withLog("none")},
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
