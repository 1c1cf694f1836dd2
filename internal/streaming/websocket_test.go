package streaming

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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kportforward "k8s.io/cri-streaming/pkg/streaming/portforward"
)

// wsStream runs a session over WebSocket, which client-go speaks as
// v5.channel.k8s.io only (crictl --transport websocket).
func wsStream(ctx context.Context, cfg *rest.Config, rawURL string, opts remotecommand.StreamOptions) error {
	exec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", rawURL)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

func TestWebSocketV5(t *testing.T) {
	s := startServer(t, newFakeRuntime())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// stdin, closed by the client (v5's CLOSE signal), ends the echo.
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"echo", "x"}, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := wsStream(ctx, &rest.Config{}, resp.Url, remotecommand.StreamOptions{Stdin: strings.NewReader("input\n"), Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec over websocket v5: %v", err)
	}
	if stdout.String() != "echo x in c1\ninput\n" || stderr.String() != "to stderr\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}

	// The exit code comes back.
	resp, err = s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"fail"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	err = wsStream(ctx, &rest.Config{}, resp.Url, remotecommand.StreamOptions{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	var ce utilexec.CodeExitError
	if !errors.As(err, &ce) || ce.Code != 3 {
		t.Errorf("failing exec over websocket v5: %v, want exit code 3", err)
	}

	// A token is used once.
	aresp, err := s.GetAttach(&runtimeapi.AttachRequest{ContainerId: "c2", Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := wsStream(ctx, &rest.Config{}, aresp.Url, remotecommand.StreamOptions{Stdout: &stdout}); err != nil || stdout.String() != "attached to c2\n" {
		t.Errorf("attach over websocket v5: %q %v", stdout.String(), err)
	}
	if err := wsStream(ctx, &rest.Config{}, aresp.Url, remotecommand.StreamOptions{Stdout: &stdout}); err == nil {
		t.Errorf("a used token was accepted again")
	}

	// A client that goes away ends the session's context.
	f := newFakeRuntime()
	s2 := startServer(t, f)
	resp, err = s2.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"block"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- wsStream(cctx, &rest.Config{}, resp.Url, remotecommand.StreamOptions{Stdout: &bytes.Buffer{}})
	}()
	<-f.started
	ccancel()
	select {
	case <-f.endedCh:
	case <-time.After(10 * time.Second):
		t.Fatal("the session went on after its websocket client left")
	}
	<-done
}

// writeCert writes a self-signed certificate for 127.0.0.1 (also a CA and
// good for client auth) and its key, returning their paths.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string) {
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

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey := writeCert(t, dir, "server")
	cliCert, cliKey := writeCert(t, dir, "client")
	otherCert, otherKey := writeCert(t, dir, "other")
	tlsCfg, err := TLSConfig(srvCert, srvKey, cliCert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TLSConfig(srvCert, srvKey, srvKey); err == nil {
		t.Errorf("a CA file without a certificate was accepted")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(l, newFakeRuntime(), Config{TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	good := rest.TLSClientConfig{CAFile: srvCert, CertFile: cliCert, KeyFile: cliKey}
	for _, transport := range []string{"spdy", "websocket"} {
		resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"echo"}, Stdout: true, Stderr: true})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.Url, "https://") {
			t.Fatalf("URL %s, want https", resp.Url)
		}
		var out bytes.Buffer
		opts := remotecommand.StreamOptions{Stdout: &out, Stderr: &bytes.Buffer{}}
		if transport == "spdy" {
			u := mustParse(t, resp.Url)
			ex, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: u.Host, TLSClientConfig: good}, "POST", u)
			if err != nil {
				t.Fatal(err)
			}
			err = ex.StreamWithContext(ctx, opts)
			if err != nil {
				t.Errorf("spdy over TLS: %v", err)
			}
		} else if err := wsStream(ctx, &rest.Config{TLSClientConfig: good}, resp.Url, opts); err != nil {
			t.Errorf("websocket v5 over TLS: %v", err)
		}
		if out.String() != "echo in c1\n" {
			t.Errorf("%s over TLS: stdout %q", transport, out.String())
		}
	}
	// A client certificate the CA did not sign, or none, is refused.
	for name, cfg := range map[string]rest.TLSClientConfig{
		"no client certificate":      {CAFile: srvCert},
		"unknown client certificate": {CAFile: srvCert, CertFile: otherCert, KeyFile: otherKey},
	} {
		resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"echo"}, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := wsStream(ctx, &rest.Config{TLSClientConfig: cfg}, resp.Url, remotecommand.StreamOptions{Stdout: &bytes.Buffer{}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestPortForwardWebSocket: client-go's SPDY-over-WebSocket dialer
// (crictl --transport websocket port-forward) through the tunnel.
func TestPortForwardWebSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				data, _ := io.ReadAll(c)
				_, _ = c.Write(bytes.ToUpper(data))
			}()
		}
	}()
	rt := newFakeRuntime()
	rt.forwardTo = l.Addr().String()
	s := startServer(t, rt)
	resp, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "pod", Port: []int32{8080}})
	if err != nil {
		t.Fatal(err)
	}
	u := mustParse(t, resp.Url)
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, &rest.Config{Host: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fwDone := make(chan error, 1)
	go func() { fwDone <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := <-fwDone; err != nil {
			t.Errorf("ForwardPorts: %v", err)
		}
	}()
	waitFor(t, ready, "the port forward")
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("tunnel %d", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != strings.ToUpper(msg) {
			t.Fatalf("connection %d: got %q, %v; want %q", i, got, err, strings.ToUpper(msg))
		}
	}

	// A used or unknown token: refused before the WebSocket upgrade.
	bad, err := portforward.NewSPDYOverWebsocketDialer(u, &rest.Config{Host: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := bad.Dial(kportforward.PortForwardV1Name); err == nil {
		t.Errorf("a used port-forward token was accepted again")
	}
}
