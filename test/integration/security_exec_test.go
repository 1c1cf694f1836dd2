package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubeletMaxMsgSize is the largest message the kubelet's CRI client
// accepts (maxMsgSize in k8s.io/cri-client's remote_runtime.go).
const kubeletMaxMsgSize = 16 << 20

// TestSecurityExecSyncMemory runs ExecSyncs that write far more than the
// daemon keeps (100 MB on stdout, some on stderr as well), one alone and
// ten at once, through a client with the kubelet's 16 MiB message limit.
// Every answer must reach that client (stdout and stderr together, with a
// timeout's note, fit one kubelet message) and hold exactly the documented
// cap, and the daemon's peak RSS may grow by at most 1.5 times the bytes
// it returned for one exec (the output read once into one buffer and
// handed to gRPC as it is: growing it by append and marshalling it cost
// 4-5 times) and twice for ten at once. Afterwards the daemon still
// answers at once.
func TestSecurityExecSyncMemory(t *testing.T) {
	if os.Getenv("PODBAY_ITEST_RACE") == "1" {
		t.Skip("the race detector's shadow memory is counted in RSS")
	}
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "execmem")
	defer e.removePod(t, pod.id)
	id, _ := e.runContainer(t, pod, containerConfig("execmem", images.ref("busybox"), ctrCommand("sleep", "1000")))
	defer e.removeContainer(t, id)

	conn, err := grpc.NewClient("unix://"+e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(kubeletMaxMsgSize)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kubelet := runtimeapi.NewRuntimeServiceClient(conn)

	// A small exec first: the first exec's one-time costs are not output.
	if out := e.execOutput(t, id, "echo", "warm"); out != "warm\n" {
		t.Fatalf("warm-up exec: %q", out)
	}
	pid := e.daemonPid()
	stdoutOnly := []string{"head", "-c", "100000000", "/dev/zero"}
	both := []string{"sh", "-c", "head -c 100000000 /dev/zero; head -c 100000000 /dev/zero >&2"}

	// One exec alone: its output is read once into one buffer and sent
	// as it is (growing it by append and marshalling it cost 4-5 times).
	returned, growth := execSyncPeak(t, kubelet, pid, id, stdoutOnly)
	if returned == 0 || float64(growth) > 1.5*float64(returned) {
		t.Errorf("one ExecSync: the daemon's peak RSS grew by %d bytes for %d bytes of output returned, want at most 1.5 times that", growth, returned)
	}

	// Ten at once, half of them writing to stdout and stderr.
	var cmds [][]string
	for i := range 10 {
		cmds = append(cmds, [][]string{stdoutOnly, both}[i%2])
	}
	returned, growth = execSyncPeak(t, kubelet, pid, id, cmds...)
	if returned == 0 || growth > 2*returned {
		t.Errorf("%d ExecSyncs at once: the daemon's peak RSS grew by %d bytes for %d bytes of output returned, want at most twice that", len(cmds), growth, returned)
	}

	// A large output that times out: the note fits too.
	resp, err := kubelet.ExecSync(rpcCtx(t), &runtimeapi.ExecSyncRequest{ContainerId: id,
		Cmd: []string{"sh", "-c", "head -c 100000000 /dev/zero >&2; sleep 100"}, Timeout: 2})
	if err != nil {
		t.Errorf("ExecSync that times out with a large output: %v", err)
	} else if note := "command timed out after 2s\n"; resp.ExitCode != -1 || len(resp.Stderr) != execOutputCap-execOutputReserve+len(note) || !strings.HasSuffix(string(resp.Stderr), note) {
		t.Errorf("ExecSync that times out with a large output: exit code %d, %d bytes of stderr ending in %q", resp.ExitCode, len(resp.Stderr), resp.Stderr[max(0, len(resp.Stderr)-40):])
	}

	// Still responsive: a small exec and a List answer promptly.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
		t.Errorf("ListContainers after the execs: %v", err)
	}
	resp, err = kubelet.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"echo", "ok"}, Timeout: 5})
	if err != nil || string(resp.Stdout) != "ok\n" {
		t.Errorf("small exec after the big ones: %v, %v", resp, err)
	}
}

// execSyncPeak runs cmds at once in container id through client, each of
// which must write more than execOutputCap bytes, and checks that each
// answer holds the process's first bytes of output, as many as ExecSync
// keeps (a `head` only writes to stdout, others to both streams). It
// returns the bytes returned and how much the daemon's peak RSS grew.
func execSyncPeak(t *testing.T, client runtimeapi.RuntimeServiceClient, pid int, id string, cmds ...[]string) (returned, growth int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the daemon's peak RSS: %v", err)
	}
	before := procStatusKiB(t, pid, "VmHWM")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
	)
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.ExecSync(rpcCtx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 60})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("exec %d %q: %v", i, cmd, err))
				return
			}
			got := len(resp.Stdout) + len(resp.Stderr)
			returned += got
			want := execOutputCap
			if len(cmd) > 0 && cmd[0] == "head" {
				want -= execOutputReserve // nothing on stderr
			}
			switch {
			case resp.ExitCode != 0:
				failures = append(failures, fmt.Sprintf("exec %d: exit code %d, stderr %.200q", i, resp.ExitCode, resp.Stderr))
			case got != want:
				// The process wrote more than the cap: exactly the cap is kept.
				failures = append(failures, fmt.Sprintf("exec %d: %d bytes of output (stdout %d, stderr %d), want %d",
					i, got, len(resp.Stdout), len(resp.Stderr), want))
			case strings.Trim(string(resp.Stdout), "\x00") != "" || strings.Trim(string(resp.Stderr), "\x00") != "":
				failures = append(failures, fmt.Sprintf("exec %d: output is not what the process wrote", i))
			}
		}()
	}
	wg.Wait()
	peak := procStatusKiB(t, pid, "VmHWM")
	growth = (peak - before) << 10
	t.Logf("%d ExecSyncs at once returned %d bytes (%.1f MiB); the daemon's peak RSS %d -> %d KiB, growth %.1f MiB (%.2f times the bytes returned)",
		len(cmds), returned, float64(returned)/(1<<20), before, peak, float64(growth)/(1<<20), float64(growth)/float64(max(returned, 1)))
	for _, f := range failures {
		t.Error(f)
	}
	return returned, growth
}

const (
	// execOutputCap is how much output, stdout and stderr together,
	// ExecSync keeps (runtime.MaxExecOutput).
	execOutputCap = 16<<20 - 1<<10
	// execOutputReserve is what each stream keeps however much the other
	// wrote (runtime.ExecOutputReserve): stdout alone keeps the cap less
	// stderr's reserve.
	execOutputReserve = 64 << 10
)

// procStatusKiB reads a "Name: <n> kB" field of /proc/<pid>/status.
func procStatusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("%s %q: %v", field, v, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
