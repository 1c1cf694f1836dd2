// Package standin holds the programs that podbay's critest stand-in images
// run where the upstream test images have a real program: one multi-call
// binary (cmd/podbay-testimages/standin, built static with CGO_ENABLED=0),
// hard-linked under each name, that picks what to do by the name it was run
// as, like busybox:
//
//   - pgrep and ipcs, which the exec-timeout and HostIpc specs run inside
//     the busybox image, and which Debian's busybox builds lack;
//   - nginx, a web server that answers 200 on port 80 (or the port a
//     "listen N;" line in /etc/nginx/conf.d/*.conf names), writes
//     /var/run/nginx.pid and shows "nginx: master process ..." as its
//     command line, which the namespace specs look for;
//   - httpd, the same server as Apache's httpd image, logging a line that
//     names httpd;
//   - nnp, which prints "Effective uid: N" as the nonewprivs image's setuid
//     program does;
//   - curl, one HTTP GET, which Kubernetes' e2e specs run inside agnhost
//     (its upstream image has Alpine's curl).
//
// Each is only as complete as the specs need; see the applet's doc.
package standin

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// Env is what an applet sees of its process: arguments, streams, and the
// root of the filesystem it reads /proc and /etc from ("/" outside tests).
type Env struct {
	Args           []string // Args[0] is the applet name as invoked
	Stdout, Stderr io.Writer
	Root           string
	// Exec replaces the process with this binary run with argv (it returns
	// only on failure). nil: the applets that re-execute themselves
	// (nginx) go on without.
	Exec func(argv []string) error
}

// path returns p, absolute in the applet's filesystem, as a host path.
func (e Env) path(p string) string {
	if e.Root == "" {
		return p
	}
	return path.Join(e.Root, p)
}

// applet runs one program and returns its exit status.
type applet func(Env) int

// applets are the names the binary answers to. nginx also answers to its
// own process title ("nginx: master process ...").
var applets = map[string]applet{
	"pgrep": pgrep,
	"ipcs":  ipcs,
	"nginx": nginx,
	"httpd": httpd,
	"nnp":   nnp,
	"curl":  curl,
}

// Names returns the applet names, sorted: the links an image makes to the
// binary.
func Names() []string {
	out := make([]string, 0, len(applets))
	for n := range applets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Main runs the applet that env.Args[0] names (its base name), or, when run
// under another name, the applet named by the first argument
// ("podbay-standin pgrep sleep"). It returns the exit status.
func Main(env Env) int {
	if len(env.Args) == 0 {
		fmt.Fprintln(env.Stderr, "podbay-standin: no arguments")
		return 2
	}
	name := path.Base(env.Args[0])
	if strings.HasPrefix(env.Args[0], nginxTitle) {
		name = "nginx"
	}
	if a, ok := applets[name]; ok {
		return a(env)
	}
	if len(env.Args) > 1 {
		if a, ok := applets[env.Args[1]]; ok {
			env.Args = env.Args[1:]
			return a(env)
		}
	}
	fmt.Fprintf(env.Stderr, "podbay-standin: unknown applet %q; run as one of: %s\n", name, strings.Join(Names(), ", "))
	return 127
}
