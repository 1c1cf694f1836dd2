// Package apparmor loads podbay's default AppArmor profile, the one a
// container asking for the runtime default (or for nothing, as the
// kubelet's pods do) runs under where the host has AppArmor, as
// containerd's cri-containerd.apparmor.d and CRI-O's crio-default.
package apparmor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
)

// DefaultProfile is the name of podbay's default profile.
const DefaultProfile = "podbay-default"

const (
	profilesFile = "/sys/kernel/security/apparmor/profiles"
	enabledFile  = "/sys/module/apparmor/parameters/enabled"
	includeDir   = "/etc/apparmor.d"
)

// HostSupports reports whether containers can be confined here: the
// kernel has AppArmor enabled and apparmor_parser is installed (without
// it no profile can be loaded; containerd decides the same way). It is
// false inside a container (the "container" environment variable).
func HostSupports() bool {
	if os.Getenv("container") != "" {
		return false
	}
	b, err := os.ReadFile(enabledFile)
	if err != nil || !strings.HasPrefix(string(b), "Y") {
		return false
	}
	if _, err := os.Stat(filepath.Dir(profilesFile)); err != nil {
		return false
	}
	_, err = parserPath()
	return err == nil
}

func parserPath() (string, error) {
	if p, err := exec.LookPath("apparmor_parser"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("apparmor_parser not found (Debian: apt-get install apparmor)")
}

// Loaded reports whether the kernel has a profile called name.
func Loaded(name string) (bool, error) {
	f, err := os.Open(profilesFile)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return hasProfile(f, name)
}

// hasProfile reads the kernel's profile list ("name (mode)" lines).
func hasProfile(r io.Reader, name string) (bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if n, _, _ := strings.Cut(sc.Text(), " "); n == name {
			return true, nil
		}
	}
	return false, sc.Err()
}

// Loader loads the default profile once it is needed, and again when the
// kernel no longer has it (an AppArmor reload drops profiles that are not
// in /etc/apparmor.d).
type Loader struct {
	// Dir is where the generated profile is written before it is loaded.
	Dir string

	mu sync.Mutex
}

// EnsureDefault loads DefaultProfile unless the kernel has it already.
func (l *Loader) EnsureDefault(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok, err := Loaded(DefaultProfile); err == nil && ok {
		return nil
	}
	parser, err := parserPath()
	if err != nil {
		return err
	}
	text, err := Generate(DefaultProfile, includeDir, daemonProfile())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(l.Dir, DefaultProfile)
	if err := os.WriteFile(path, text, 0o600); err != nil {
		return err
	}
	// -K: no cache (the profile is written anew); -r: replace.
	out, err := exec.CommandContext(ctx, parser, "-Kr", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("load apparmor profile %s: %w: %s", DefaultProfile, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// daemonProfile is the profile podbayd runs under ("unconfined" as a
// rule): container processes accept signals from it.
func daemonProfile() string {
	b, err := os.ReadFile("/proc/self/attr/current")
	if err != nil {
		return "unconfined"
	}
	name, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	if name == "" {
		return "unconfined"
	}
	return name
}

// Generate returns the text of the default profile called name, with the
// includes that exist under dir (an AppArmor installation's
// /etc/apparmor.d) and signals allowed from daemon.
func Generate(name, dir, daemon string) ([]byte, error) {
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(dir, p)); return err == nil }
	data := struct {
		Name, Daemon            string
		ABI, Tunables, Abstract bool
	}{name, daemon, exists("abi/3.0"), exists("tunables/global"), exists("abstractions/base")}
	var b bytes.Buffer
	if err := profileTemplate.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// The profile: everything a container normally does (files, network,
// capabilities its spec grants), but no mounts, no writes to the kernel's
// knobs under /proc and /sys outside the container's own processes,
// kernel.shm* and the cgroup tree, and nothing of the host's firmware,
// security and power-capping interfaces. Signals and ptrace only within
// the profile, and from the daemon.
var profileTemplate = template.Must(template.New("profile").Parse(`{{if .ABI}}abi <abi/3.0>,
{{end}}{{if .Tunables}}#include <tunables/global>
{{else}}@{PROC}=/proc/
{{end}}
profile {{.Name}} flags=(attach_disconnected,mediate_deleted) {
{{if .Abstract}}  #include <abstractions/base>
{{end}}
  network,
  capability,
  file,
  umount,

  signal (receive) peer={{.Daemon}},
  signal (send,receive) peer={{.Name}},
  ptrace (trace,read,tracedby,readby) peer={{.Name}},

  deny mount,

  # /proc: no writes to its top-level files, nor below anything but a
  # process's own directory and sys; in sys only kernel/shm*.
  deny @{PROC}/* w,
  deny @{PROC}/{[^1-9],[^1-9][^0-9],[^1-9s][^0-9y][^0-9s],[^1-9][^0-9][^0-9][^0-9/]*}/** w,
  deny @{PROC}/sys/[^k]** w,
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  # /sys: read-only but for the cgroup tree; firmware, security and
  # power capping not even readable.
  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,
}
`))
