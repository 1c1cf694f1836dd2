package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbay/podbay/test/testimage"
)

func needBusybox(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(testimage.DefaultBusybox); err != nil {
		t.Skipf("no %s (install busybox-static): %v", testimage.DefaultBusybox, err)
	}
}

// lockedBuffer is a bytes.Buffer that run and the test can share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// wantRefs is how many references the default set serves.
func wantRefs() int {
	n := 0
	for _, s := range testimage.DefaultImages(testimage.DefaultOptions{}) {
		n += len(s.Tags)
	}
	return n
}

func TestList(t *testing.T) {
	needBusybox(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--list", "--listen", "127.0.0.1:5000", "--prefix", "ci"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != wantRefs() {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), wantRefs(), out.String())
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 || !strings.HasPrefix(f[0], "127.0.0.1:5000/ci/") || !strings.HasPrefix(f[1], "sha256:") {
			t.Errorf("line %q", l)
		}
	}
	if !strings.Contains(out.String(), "127.0.0.1:5000/ci/busybox:latest sha256:") {
		t.Errorf("no busybox:latest in\n%s", out.String())
	}
}

func TestServe(t *testing.T) {
	needBusybox(t)
	var listed bytes.Buffer
	if err := run(context.Background(), []string{"--list", "--listen", "ADDR"}, &listed, io.Discard); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--username", "u", "--password", "p"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "serving") {
		select {
		case err := <-done:
			t.Fatalf("run returned before serving: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 30s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != wantRefs() {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), wantRefs(), stdout.String())
	}
	// The digests served are those --list predicts.
	addr := strings.SplitN(lines[0], "/", 2)[0]
	if got, want := strings.ReplaceAll(stdout.String(), addr, "ADDR"), listed.String(); got != want {
		t.Errorf("served\n%s\nlisted\n%s", got, want)
	}

	ref, digest, _ := strings.Cut(lines[0], " ")
	repo, tag, _ := strings.Cut(strings.TrimPrefix(ref, addr+"/"), ":")
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v2/"+repo+"/manifests/"+tag, nil)
	req.SetBasicAuth("u", "p")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != digest {
		t.Errorf("GET %s: %s, digest %s, want %s", ref, resp.Status, resp.Header.Get("Docker-Content-Digest"), digest)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":            {"--nope"},
		"argument":                {"extra"},
		"password without user":   {"--password", "x"},
		"critest without standin": {"--critest"},
		"standin without critest": {"--standin", "/bin/true"},
		"conf without critest":    {"--registries-conf", "/tmp/x"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
				t.Fatal("run accepted the flags")
			}
		})
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if err := run(context.Background(), []string{"--busybox", "/nonexistent", "--listen", "127.0.0.1:0"}, io.Discard, io.Discard); err == nil {
		t.Error("missing busybox: no error")
	}
}

// --critest serves critest's stand-ins under their upstream names and
// writes a registries.conf mirroring those registries to it.
func TestCritestServe(t *testing.T) {
	needBusybox(t)
	conf := filepath.Join(t.TempDir(), "registries.conf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--critest", "--listen", "127.0.0.1:0", "--standin", testimage.DefaultBusybox,
			"--registries-conf", conf}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "serving") {
		select {
		case err := <-done:
			t.Fatalf("run returned before serving: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 60s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr := strings.SplitN(stdout.String(), "/", 2)[0]
	for _, want := range []string{
		addr + "/k8s/e2e-test-images/busybox:1.29-2 sha256:",
		addr + "/gcr/k8s-staging-cri-tools/test-image-tags:3 sha256:",
		addr + "/ecr/docker/library/busybox:1.35.0-glibc sha256:",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("no %q in\n%s", want, stdout.String())
		}
	}
	// Debian's busybox-static runs its own applets first: warned.
	if prefers, _ := testimage.ShellPrefersApplets(ctx, ""); prefers && !strings.Contains(stderr.String(), "MaskedPaths") {
		t.Errorf("no warning about the busybox shell:\n%s", stderr.String())
	}
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), testimage.MirrorsConf(addr, testimage.CritestMirrors()); got != want {
		t.Errorf("registries.conf\n%s\nwant\n%s", got, want)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestParseFlagsImage(t *testing.T) {
	o, err := parseFlags([]string{"--image", "bench/python:3.11=/a.tar.gz,/b.tar.gz", "--image", "x/y:1=/c.tar.gz"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.extra) != 2 || o.extra[0].repository != "bench/python" || o.extra[0].tag != "3.11" ||
		len(o.extra[0].layers) != 2 || o.extra[0].layers[1] != "/b.tar.gz" || o.extra[1].repository != "x/y" {
		t.Errorf("extra images: %+v", o.extra)
	}
	for _, bad := range [][]string{
		{"--image", "bench/python=/a.tar.gz"},
		{"--image", "bench/python:3.11"},
		{"--image", "bench/python:3.11="},
		{"--image", "bench/python:3.11=/a.tar.gz", "--critest", "--standin", "/s"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}
