package network

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMatchOrphan(t *testing.T) {
	const dir = "/run/podbay/netns"
	id := strings.Repeat("ab", 32)
	ns := dir + "/podbay-" + strings.Repeat("0f", 32)
	env := func(kv ...string) []byte { return []byte(strings.Join(kv, "\x00") + "\x00") }
	for _, tc := range []struct {
		name    string
		environ []byte
		want    bool
	}{
		{"plugin ADD", env("PATH=/bin", "CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS="+ns, "CNI_IFNAME=eth0"), true},
		{"plugin DEL", env("CNI_NETNS="+ns, "CNI_CONTAINERID="+id, "CNI_COMMAND=DEL"), true},
		{"no CNI_COMMAND", env("CNI_CONTAINERID="+id, "CNI_NETNS="+ns), false},
		{"empty CNI_COMMAND", env("CNI_COMMAND=", "CNI_CONTAINERID="+id, "CNI_NETNS="+ns), false},
		{"short container id", env("CNI_COMMAND=ADD", "CNI_CONTAINERID=abc", "CNI_NETNS="+ns), false},
		{"upper-case container id", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+strings.ToUpper(id), "CNI_NETNS="+ns), false},
		{"netns of another runtime", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS=/var/run/netns/cni-1234"), false},
		{"netns in another dir", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS=/run/other/podbay-"+strings.Repeat("0f", 32)), false},
		{"netns below the dir", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS="+dir+"/x/podbay-"+strings.Repeat("0f", 32)), false},
		{"netns not a podbay name", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS="+dir+"/cni-"+strings.Repeat("0f", 32)), false},
		{"netns with a short id", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS="+dir+"/podbay-0f"), false},
		{"no netns", env("CNI_COMMAND=ADD", "CNI_CONTAINERID="+id), false},
		{"key only as a value", env("X=CNI_COMMAND=ADD", "CNI_CONTAINERID="+id, "CNI_NETNS="+ns), false},
		{"empty environ", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, got := matchOrphan(tc.environ, dir)
			if got != tc.want {
				t.Fatalf("matchOrphan = %v, want %v", got, tc.want)
			}
			if got && (o.containerID != id || o.command == "") {
				t.Errorf("matchOrphan gave %+v", o)
			}
		})
	}
}

func TestKillOrphanedPluginsLeavesOthers(t *testing.T) {
	// No process on a test host runs a plugin for a pod in this directory.
	killed, err := KillOrphanedPlugins(t.Context(), t.TempDir())
	if err != nil || killed != 0 {
		t.Fatalf("KillOrphanedPlugins = %d, %v; want 0, nil", killed, err)
	}
}

func TestKillOrphanedPluginsKillsGroup(t *testing.T) {
	dir := t.TempDir()
	id := strings.Repeat("cd", 32)
	// A "plugin" leading its own group, with a child in that group that
	// does not carry the plugin's environment.
	cmd := exec.Command("/bin/sh", "-c", "env -i /bin/sleep 60 & wait")
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + filepath.Join(dir, "podbay-"+id)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("start a shell: %v", err)
	}
	waitEmptyEnvChild(t, cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	killed, err := KillOrphanedPlugins(t.Context(), dir)
	if err != nil || killed != 1 {
		t.Fatalf("KillOrphanedPlugins = %d, %v; want 1, nil", killed, err)
	}
	if err := <-exited; err == nil {
		t.Fatal("the plugin exited normally, not killed")
	}
	// The group went with its leader: no member is left but zombies,
	// which whoever inherited them reaps when it gets to it.
	for range 100 {
		if live := liveGroupMembers(cmd.Process.Pid); len(live) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("processes of the plugin's group still alive: %v", liveGroupMembers(cmd.Process.Pid))
}

// liveGroupMembers returns the processes in process group pgid that have
// not exited.
func liveGroupMembers(pgid int) []int {
	var live []int
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && processLive(pid) {
			live = append(live, pid)
		}
	}
	return live
}

// waitEmptyEnvChild waits until the group pgid has a member other than its
// leader whose environment is empty.
func waitEmptyEnvChild(t *testing.T, pgid int) {
	t.Helper()
	for range 500 {
		for _, pid := range liveGroupMembers(pgid) {
			environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
			if pid != pgid && err == nil && len(environ) == 0 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the plugin's child did not start")
}

// An orphaned DEL is left to finish by itself: killed between deleting the
// pod's interface and its masquerade rules, it would leave rules no later
// DEL finds.
func TestKillOrphanedPluginsLetsDelFinish(t *testing.T) {
	dir := t.TempDir()
	id := strings.Repeat("ef", 32)
	done := filepath.Join(t.TempDir(), "done")
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.3; echo > "+done)
	cmd.Env = []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + filepath.Join(dir, "podbay-"+id), "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("start a shell: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	killed, err := KillOrphanedPlugins(t.Context(), dir)
	if err != nil || killed != 0 {
		t.Fatalf("KillOrphanedPlugins = %d, %v; want 0, nil", killed, err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("the DEL did not finish by itself: %v", err)
	}
	if _, err := os.Stat(done); err != nil {
		t.Errorf("the DEL's work is not done: %v", err)
	}
}
