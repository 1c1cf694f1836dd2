package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/test/testimage"
)

// streamURLTTL is how long an unused Exec, Attach or PortForward URL is
// valid: the kubelet streaming library's token cache TTL.
const streamURLTTL = time.Minute

// listenAddrs are the local addresses of the TCP sockets pid listens on,
// from /proc/<pid>/net/tcp{,6} matched to its file descriptors.
func listenAddrs(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, file := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: TCP_LISTEN
				continue
			}
			out = append(out, procNetAddr(t, f[1]))
		}
	}
	return out
}

// procNetAddr decodes "0100007F:1F90" (host-order 32-bit words) into
// "127.0.0.1:8080".
func procNetAddr(t *testing.T, s string) string {
	hexIP, hexPort, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(hexIP)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	port, _ := strconv.ParseUint(hexPort, 16, 16)
	return net.JoinHostPort(net.IP(b).String(), strconv.FormatUint(port, 10))
}

// sessionRefused reports whether a streaming URL is refused as unknown:
// the server answers 404 before any upgrade.
func sessionRefused(t *testing.T, rawURL string) (bool, string) {
	t.Helper()
	resp, err := http.Post(rawURL, "text/plain", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode == http.StatusNotFound, fmt.Sprintf("%s %s", resp.Status, bytes.TrimSpace(body))
}

// TestSecurityStreamingURLs: an Exec, Attach or PortForward URL is a
// bearer credential for a shell in a container. Each works once (a second
// use, or a use of a token one byte off, is refused), an unused one
// expires (the kubelet's one minute), and the streaming server listens on
// loopback by default, as the config default says: no socket of the
// daemon listens on 0.0.0.0 or ::.
func TestSecurityStreamingURLs(t *testing.T) {
	if def := config.Default().StreamAddress; net.ParseIP(def) == nil || !net.ParseIP(def).IsLoopback() {
		t.Errorf("the default stream_address is %q, want a loopback address", def)
	}
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "urls")
	id, _ := e.runContainer(t, pod, containerConfig("urls", images.ref("busybox"), ctrCommand("sleep", "1000")))
	expiring := e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"echo", "late"}, Stdout: true})
	issued := time.Now()

	u := mustParseURL(t, expiring)
	host, _, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("the streaming URL %s is not on loopback", expiring)
	}
	for _, a := range listenAddrs(t, e.daemonPid()) {
		h, _, _ := net.SplitHostPort(a)
		if ip := net.ParseIP(h); ip == nil || ip.IsUnspecified() {
			t.Errorf("the daemon listens on %s, want only specific (loopback) addresses", a)
		}
	}

	t.Run("exec once", func(t *testing.T) {
		raw := e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo run >> /tmp/runs; echo ok"}, Stdout: true})
		var out bytes.Buffer
		if err := e.stream(t, raw, remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "ok\n" {
			t.Fatalf("first use: %v, %q", err, out.String())
		}
		if refused, got := sessionRefused(t, raw); !refused {
			t.Errorf("second use of an exec URL: %s, want 404", got)
		}
		if err := e.stream(t, raw, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
			t.Errorf("second exec session on the same URL succeeded")
		}
		if got := e.execOutput(t, id, "cat", "/tmp/runs"); got != "run\n" {
			t.Errorf("the command ran %d times, want once: %q", strings.Count(got, "run"), got)
		}
		// A token one byte off names no session.
		fresh := mustParseURL(t, e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true}))
		b := []byte(fresh.Path)
		b[len(b)-1] ^= 1
		fresh.Path = string(b)
		if refused, got := sessionRefused(t, fresh.String()); !refused {
			t.Errorf("a token one byte off: %s, want 404", got)
		}
	})
	t.Run("attach once", func(t *testing.T) {
		raw := e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true})
		// First use: connected (the container prints nothing: end it
		// from our side).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = streamURL(ctx, raw, remotecommand.StreamOptions{Stdout: io.Discard})
		cancel()
		if refused, got := sessionRefused(t, raw); !refused {
			t.Errorf("second use of an attach URL: %s, want 404", got)
		}
	})
	t.Run("port-forward once", func(t *testing.T) {
		resp, err := e.rt.PortForward(rpcCtx(t), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id, Port: []int32{80}})
		if err != nil {
			t.Fatal(err)
		}
		if refused, got := sessionRefused(t, resp.Url); refused {
			t.Fatalf("first use of a port-forward URL refused: %s", got)
		}
		if refused, got := sessionRefused(t, resp.Url); !refused {
			t.Errorf("second use of a port-forward URL: %s, want 404", got)
		}
	})
	t.Run("expires", func(t *testing.T) {
		if wait := streamURLTTL + 5*time.Second - time.Since(issued); wait > 0 {
			t.Logf("waiting %v for the URL to expire", wait.Round(time.Second))
			time.Sleep(wait)
		}
		if refused, got := sessionRefused(t, expiring); !refused {
			t.Errorf("an exec URL unused for %v: %s, want 404", time.Since(issued).Round(time.Second), got)
		}
	})
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestSecuritySocketPermissions: whoever can connect to the CRI socket is
// root on the node, so it is the daemon's user's and group's only
// (0660 or stricter, owned by root); and nothing the daemon makes in its
// root, state and netns directories, or in a pod's log directory, is
// writable by others — a world-writable state file or exec FIFO would let
// any local user feed the daemon or a container. The root and state
// directories are removed before the daemon starts, so that it makes
// them itself. Container root filesystems (the image's own modes, /tmp
// 1777) are not the daemon's and are left out.
func TestSecuritySocketPermissions(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	push(t, r, defaultSpec(t, "test", "busybox"))
	for _, d := range []string{e.rootDir, e.stateDir} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	e.start("")
	images := testImages{reg: r, ids: map[string]string{}}
	e.pullImage(t, images.ref("busybox"), nil)
	pod := e.runTestPod(t, "perms")
	stdin := func(c *runtimeapi.ContainerConfig) { c.Stdin = true }
	id, _ := e.runContainer(t, pod, containerConfig("perms", images.ref("busybox"), stdin, ctrCommand("sleep", "1000")))
	e.execOutput(t, id, "true")

	fi, err := os.Lstat(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm()&^0o660 != 0 || st.Uid != 0 {
		t.Errorf("CRI socket %s: mode %v, owner %d; want a socket, 0660 or stricter, owned by root", e.sock, fi.Mode(), st.Uid)
	}

	skip := map[string]bool{e.storageRoot: true, e.runRoot: true}
	var checked int
	for _, top := range []string{e.rootDir, e.stateDir, e.netnsDir, e.podLogDir} {
		if fi, err := os.Stat(top); err == nil && fi.Mode().Perm()&0o022 != 0 && top != e.podLogDir && top != e.netnsDir {
			t.Errorf("%s: mode %v, want no group or other write", top, fi.Mode())
		}
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil // went while walking
				}
				return err
			}
			if skip[p] || strings.HasSuffix(p, "/rootfs") || strings.HasSuffix(p, "/merged") {
				return fs.SkipDir
			}
			// A pod's /dev/shm is its containers', mode 1777 as the
			// node's /dev/shm is; the root it is in keeps the node's
			// other users out.
			if filepath.Dir(p) == filepath.Join(e.stateDir, "shm") {
				return fs.SkipDir
			}
			if p == filepath.Join(e.stateDir, "shm") {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s: mode %v, %v; want no access for group or others", p, fi.Mode(), err)
				}
			}
			if d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			checked++
			if info.Mode().Perm()&0o002 != 0 {
				t.Errorf("%s: mode %v, writable by others", p, info.Mode())
			}
			if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 && !info.IsDir() {
				t.Errorf("%s: mode %v, set-id", p, info.Mode())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d entries checked", checked)
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestSecurityStreamLeaks: every Exec, Attach and PortForward session
// holds file descriptors and goroutines in the daemon (the HTTP
// connection, SPDY streams, the exec's pipes or conmon's attach socket);
// a pod author with kubectl exec can open as many as they like. After
// PODBAY_STREAM_LEAK_N (200) sessions of each kind the daemon holds no
// more than a little slack over what it held before.
func TestSecurityStreamLeaks(t *testing.T) {
	n := envInt(t, "PODBAY_STREAM_LEAK_N", 200)
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "leaks")
	id, pid := e.runContainer(t, pod, containerConfig("leaks", images.ref("busybox"),
		ctrCommand("nc", "-ll", "-p", "8080", "-e", "/bin/cat")))
	requireListening(t, pid, 8080)
	ch := &chaos{e: e}
	// Warm up: the first session of each kind makes what stays (the
	// SPDY machinery, conmon's attach socket, pools).
	sessions := func(n int) {
		for i := range n {
			var out bytes.Buffer
			if err := e.stream(t, e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"echo", "x"}, Stdout: true}),
				remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "x\n" {
				t.Fatalf("exec session %d: %v, %q", i, err, out.String())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			_ = streamURL(ctx, e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true}), remotecommand.StreamOptions{Stdout: io.Discard})
			cancel()
			e.requireForwardEcho(t, pod.id, 8080)
		}
	}
	sessions(3)
	before := ch.daemonUsage(t)
	start := time.Now()
	sessions(n)
	t.Logf("%d sessions of each kind in %v", n, time.Since(start).Round(time.Millisecond))
	var after usage
	// Sessions end asynchronously: poll for the daemon to let go.
	err := eventually(30*time.Second, func() error {
		after = ch.daemonUsage(t)
		if after.fds > before.fds+10 || after.goroutines > before.goroutines+20 {
			return fmt.Errorf("before %v, after %v", before, after)
		}
		return nil
	})
	t.Logf("daemon before %v, after %d sessions of each kind %v", before, n, after)
	if err != nil {
		t.Errorf("the daemon grew with streaming sessions (at most 10 fds and 20 goroutines of slack): %v", err)
	}
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
