package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/podbay/podbay/internal/netns"
)

// TestHarnessDetectsLeaks proves that the leak checker can fail: it makes
// one of every kind of leak by hand, without a daemon, and checks that each
// is reported, that keep exempts a live sandbox's resources, and that
// nothing is reported once they are cleaned up.
func TestHarnessDetectsLeaks(t *testing.T) {
	e := newEnv(t, envOptions{})

	id := e.orphanCNIAttachment(t) // netns, veth, ifb, IP, iptables, CNI cache
	sleeper := exec.Command("sleep", "600")
	sleeper.Dir = e.dir
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleeper.Process.Kill() //nolint:errcheck
		sleeper.Wait()         //nolint:errcheck
	}()
	cgroup := filepath.Join("/sys/fs/cgroup/pids", e.cgroupRoot, "podbay-"+randHex(32))
	if err := os.MkdirAll(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(e.dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}

	kinds := map[string]int{}
	for _, l := range e.findLeaks(nil) {
		t.Logf("found %s", l)
		kinds[l.kind]++
	}
	for _, k := range []string{"netns", "mount", "veth", "ifb", "ipam", "cni-cache", "iptables", "process", "cgroup"} {
		if kinds[k] == 0 {
			t.Errorf("the leak checker missed a %s leak", k)
		}
	}
	for _, l := range e.findLeaks(keepSet([]string{id})) {
		switch l.kind {
		case "netns", "veth", "ifb", "ipam", "cni-cache", "iptables":
			t.Errorf("reported although its sandbox is kept: %s", l)
		}
	}

	// Clean up by hand; then nothing may be reported.
	syscall.Unmount(mnt, 0) //nolint:errcheck
	os.Remove(cgroup)
	sleeper.Process.Kill() //nolint:errcheck
	sleeper.Wait()         //nolint:errcheck
	e.delCNIAttachment(t, id)
	if err := netns.Remove(e.netnsPath(id)); err != nil {
		t.Fatal(err)
	}
	e.assertNoLeaks(t)
}

// delCNIAttachment undoes orphanCNIAttachment's CNI ADD.
func (e *env) delCNIAttachment(t *testing.T, id string) {
	t.Helper()
	list, err := libcni.ConfListFromBytes(e.cniConfig())
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{"/usr/lib/cni", binDir}, e.cacheDir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cni.DelNetworkList(ctx, list, &libcni.RuntimeConf{ContainerID: id, NetNS: e.netnsPath(id), IfName: "eth0"}); err != nil {
		t.Fatalf("CNI DEL: %v", err)
	}
}
