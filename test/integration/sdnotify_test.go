package integration

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// TestSystemdNotify runs podbayd as systemd's Type=notify does, with
// NOTIFY_SOCKET naming a unixgram socket the test listens on: READY=1
// comes once the CRI socket serves (a single Version call right after it
// succeeds), STOPPING=1 on SIGTERM, and neither conmon (or the shim) nor
// the container inherits NOTIFY_SOCKET (runc would make `runc start` wait
// for the container's own READY=1).
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type message struct {
		state string
		// versionErr is a single Version call's result, made as soon as
		// READY=1 arrived.
		versionErr error
	}
	messages := make(chan message, 4)
	var crisock string // set before the daemon starts
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(messages)
				return
			}
			m := message{state: string(buf[:n])}
			if m.state == "READY=1" {
				m.versionErr = versionOnce(crisock)
			}
			messages <- m
		}
	}()
	next := func(want string) message {
		t.Helper()
		select {
		case m, ok := <-messages:
			if !ok || m.state != want {
				t.Fatalf("notification %q (open %v), want %q", m.state, ok, want)
			}
			return m
		case <-time.After(startTimeout):
			t.Fatalf("no %s within %v", want, startTimeout)
		}
		return message{}
	}

	t.Setenv("NOTIFY_SOCKET", sock)
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	push(t, r, defaultSpec(t, "test", "busybox"))
	crisock = e.sock
	e.start("")
	if m := next("READY=1"); m.versionErr != nil {
		t.Fatalf("READY=1 came before the CRI socket served: Version: %v", m.versionErr)
	}

	ti := testImages{reg: r, ids: map[string]string{}}
	e.pullImage(t, ti.ref("busybox"), nil)
	pod := e.runTestPod(t, "notify")
	id, pid := e.runContainer(t, pod, containerConfig("notify", ti.ref("busybox"), ctrCommand("sleep", "1000")))
	ppid := parentPid(t, pid)
	for _, p := range []int{pid, ppid} {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(env, []byte("NOTIFY_SOCKET=")) {
			t.Errorf("process %d (%s) inherited NOTIFY_SOCKET", p, procComm(p))
		}
	}
	e.removeContainer(t, id)
	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)

	e.stop()
	next("STOPPING=1")
}

// versionOnce makes one Version call on the CRI socket, with no retry.
func versionOnce(sock string) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

func parentPid(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid ...; comm may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

func procComm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
