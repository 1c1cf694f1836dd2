package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// wsStreamURL runs a session over WebSocket as `crictl --transport
// websocket` does: client-go's WebSocket executor, which speaks
// v5.channel.k8s.io only.
func wsStreamURL(ctx context.Context, tlsCfg rest.TLSClientConfig, rawURL string, opts remotecommand.StreamOptions) error {
	exec, err := remotecommand.NewWebSocketExecutor(&rest.Config{TLSClientConfig: tlsCfg}, "GET", rawURL)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

// TestStreamingWebSocketV5: exec (streams, stdin's end, exit code, tty
// resize) and attach over WebSocket v5 against a real daemon.
func TestStreamingWebSocketV5(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	busybox := images.ref("busybox")
	pod := e.runTestPod(t, "wsv5")
	ctx, cancel := context.WithTimeout(context.Background(), 2*streamTimeout)
	defer cancel()
	id, _ := e.runContainer(t, pod, containerConfig("exec", busybox, ctrCommand("sleep", "1000")))

	var stdout, stderr bytes.Buffer
	err := wsStreamURL(ctx, rest.TLSClientConfig{}, e.execURL(t, &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: true, Stdout: true, Stderr: true,
	}), remotecommand.StreamOptions{Stdin: strings.NewReader("hello\n"), Stdout: &stdout, Stderr: &stderr})
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Errorf("websocket v5 exec: %v, want exit code 3", err)
	}
	if stdout.String() != "hello\n" || stderr.String() != "err\n" {
		t.Errorf("websocket v5 exec: stdout %q stderr %q, want hello, err", stdout.String(), stderr.String())
	}

	// tty with a resize.
	var out syncBuffer
	stdinR, stdinW := io.Pipe()
	sizes := &sizeQueue{ch: make(chan *remotecommand.TerminalSize, 2)}
	sizes.ch <- &remotecommand.TerminalSize{Width: 100, Height: 30}
	done := make(chan error, 1)
	url := e.execURL(t, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true})
	go func() {
		done <- wsStreamURL(ctx, rest.TLSClientConfig{}, url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
	}()
	send := func(line string) { _, _ = io.WriteString(stdinW, line+"\n") }
	out.wait(t, "30 100\r\n", func() { send("busybox stty size") })
	sizes.ch <- &remotecommand.TerminalSize{Width: 132, Height: 43}
	out.wait(t, "43 132\r\n", func() { send("busybox stty size") })
	send("exit 4")
	if err := waitErr(t, done); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 4 {
		t.Errorf("websocket v5 tty exec: %v, want exit code 4", err)
	}
	stdinW.Close()
	close(sizes.ch)
	e.removeContainer(t, id)

	// attach with stdin once: the end of the client's input (v5's CLOSE
	// signal) closes the container's stdin.
	stdinOnce := func(c *runtimeapi.ContainerConfig) { c.Stdin, c.StdinOnce = true, true }
	aid, _ := e.runContainer(t, pod, containerConfig("attach", busybox, ctrCommand("cat"), stdinOnce))
	var aout syncBuffer
	astdinR, astdinW := io.Pipe()
	adone := make(chan error, 1)
	aurl := e.attachURL(t, &runtimeapi.AttachRequest{ContainerId: aid, Stdin: true, Stdout: true, Stderr: true})
	go func() {
		adone <- wsStreamURL(ctx, rest.TLSClientConfig{}, aurl, remotecommand.StreamOptions{Stdin: astdinR, Stdout: &aout, Stderr: io.Discard})
	}()
	aout.wait(t, "ping\n", func() { _, _ = io.WriteString(astdinW, "ping\n") })
	astdinW.Close()
	if err := waitErr(t, adone); err != nil {
		t.Errorf("websocket v5 attach: %v", err)
	}
	if st := e.waitContainerState(t, aid, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout); st.ExitCode != 0 {
		t.Errorf("container exit code %d after its stdin closed, want 0", st.ExitCode)
	}
	e.removeContainer(t, aid)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// writeTestCert writes a self-signed certificate for 127.0.0.1 (its own
// CA, good for server and client auth) and its key.
func writeTestCert(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestStreamingTLS: with stream_tls_cert/key/ca the daemon hands out
// https URLs; SPDY and WebSocket v5 sessions work with a client
// certificate the CA signed and fail without one.
func TestStreamingTLS(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey := writeTestCert(t, dir, "server")
	cliCert, cliKey := writeTestCert(t, dir, "client")
	e, images := newContainerEnvWith(t, envOptions{topConfig: fmt.Sprintf("stream_tls_cert = %q\nstream_tls_key = %q\nstream_tls_ca = %q\n", srvCert, srvKey, cliCert)}, "busybox")
	pod := e.runTestPod(t, "tls")
	id, _ := e.runContainer(t, pod, containerConfig("exec", images.ref("busybox"), ctrCommand("sleep", "1000")))
	ctx, cancel := context.WithTimeout(context.Background(), streamTimeout)
	defer cancel()
	good := rest.TLSClientConfig{CAFile: srvCert, CertFile: cliCert, KeyFile: cliKey}
	req := &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"echo", "secure"}, Stdout: true}

	url := e.execURL(t, req)
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("Exec URL %s, want https", url)
	}
	u := mustParseURL(t, url)
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: u.Host, TLSClientConfig: good}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "secure\n" {
		t.Errorf("SPDY over TLS: %q %v", out.String(), err)
	}
	out.Reset()
	if err := wsStreamURL(ctx, good, e.execURL(t, req), remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "secure\n" {
		t.Errorf("websocket v5 over TLS: %q %v", out.String(), err)
	}
	if err := wsStreamURL(ctx, rest.TLSClientConfig{CAFile: srvCert}, e.execURL(t, req), remotecommand.StreamOptions{Stdout: &out}); err == nil {
		t.Errorf("a client without a certificate was served")
	}
	if err := streamURL(ctx, e.execURL(t, req), remotecommand.StreamOptions{Stdout: &out}); err == nil {
		t.Errorf("plain HTTP to the TLS server was served")
	}
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

func mustParseURL(t *testing.T, raw string) *neturl.URL {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
