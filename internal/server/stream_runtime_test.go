package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/podbay/podbay/internal/image"
)

// runFakeContainer runs a pod and a container in it on the fakes and
// returns their IDs.
func (e *testEnv) runFakeContainer(t *testing.T, mod func(*runtimeapi.ContainerConfig)) (podID, id string) {
	t.Helper()
	ctx := context.Background()
	podCfg := podConfig("stream")
	podID, err := e.run(t, podCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.img.ImportFromFiles(ctx, "busybox", nil, image.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sleep", "1000"},
	}
	if mod != nil {
		mod(cfg)
	}
	created, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	return podID, created.ContainerId
}

func (e *testEnv) startFakeContainer(t *testing.T, id string) {
	t.Helper()
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
}

// streamSession runs a session against rawURL with client-go, as crictl
// does.
func streamSession(t *testing.T, rawURL string, opts remotecommand.StreamOptions) error {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: u.Host}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return exec.StreamWithContext(ctx, opts)
}

func TestStreamingRPCs(t *testing.T) {
	e := newTestEnv(t, "")
	podID, id := e.runFakeContainer(t, func(c *runtimeapi.ContainerConfig) { c.Tty, c.Stdin, c.StdinOnce = true, true, true })
	defer func() {
		if _, err := call(e.srv, "RemoveContainer", e.srv.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("RemoveContainer: %v", err)
		}
	}()

	// Not running yet: no session.
	if _, err := call(e.srv, "Exec", e.srv.Exec, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Exec in a created container: %v, want FailedPrecondition", err)
	}
	if _, err := call(e.srv, "Attach", e.srv.Attach, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Attach to a created container: %v, want FailedPrecondition", err)
	}
	e.startFakeContainer(t, id)

	for _, tc := range []struct {
		name string
		req  *runtimeapi.ExecRequest
		want codes.Code
	}{
		{"no command", &runtimeapi.ExecRequest{ContainerId: id, Stdout: true}, codes.InvalidArgument},
		{"no stream", &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}}, codes.InvalidArgument},
		{"tty and stderr", &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Tty: true, Stdout: true, Stderr: true}, codes.InvalidArgument},
		{"unknown container", &runtimeapi.ExecRequest{ContainerId: "0123456789abcdef", Cmd: []string{"true"}, Stdout: true}, codes.NotFound},
	} {
		if _, err := call(e.srv, "Exec", e.srv.Exec, tc.req); status.Code(err) != tc.want {
			t.Errorf("Exec with %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		req  *runtimeapi.PortForwardRequest
		want codes.Code
	}{
		{"unknown pod", &runtimeapi.PortForwardRequest{PodSandboxId: "0123456789abcdef", Port: []int32{80}}, codes.NotFound},
		{"port 0", &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{0}}, codes.InvalidArgument},
		{"port 65536", &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{65536}}, codes.InvalidArgument},
	} {
		if _, err := call(e.srv, "PortForward", e.srv.PortForward, tc.req); status.Code(err) != tc.want {
			t.Errorf("PortForward with %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if resp, err := call(e.srv, "PortForward", e.srv.PortForward, &runtimeapi.PortForwardRequest{PodSandboxId: podID[:12], Port: []int32{80}}); err != nil || resp.Url == "" {
		t.Errorf("PortForward by ID prefix: %v, %v", resp, err)
	}

	// A session by ID prefix, with its exit code.
	resp, err := call(e.srv, "Exec", e.srv.Exec, &runtimeapi.ExecRequest{ContainerId: id[:12], Cmd: []string{"fail", "now"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = streamSession(t, resp.Url, remotecommand.StreamOptions{Stdout: &out})
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 || out.String() != "fail now tty=false\n" {
		t.Errorf("exec session: %v, output %q; want exit code 3 and the command line", err, out.String())
	}

	// Attach takes the terminal and StdinOnce from the container.
	attach, err := call(e.srv, "Attach", e.srv.Attach, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := streamSession(t, attach.Url, remotecommand.StreamOptions{Stdin: bytes.NewReader(nil), Stdout: &out}); err != nil {
		t.Errorf("attach session: %v", err)
	}
	if want := "attached tty=true stdinOnce=true stdin=true\n"; out.String() != want {
		t.Errorf("attach session output %q, want %q", out.String(), want)
	}

	if _, err := call(e.srv, "StopContainer", e.srv.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	// The URL was handed out while the container ran; it stopped since.
	resp, err = call(e.srv, "Exec", e.srv.Exec, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Exec in a stopped container: %v, %v; want FailedPrecondition", resp, err)
	}
}
