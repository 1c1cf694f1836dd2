package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// Security tests for what the author of an image, who controls nothing but
// what a registry serves, can do to the node. Each asserts the effect on
// the host, not just an error code.

// tarEntry is one entry of a hand-made layer.
type tarEntry struct {
	typ  byte   // tar.TypeReg, TypeDir, TypeSymlink, TypeLink
	name string // as written, unchecked
	link string // symlink or hard link target
	body string // a regular file's content
}

// rawTar writes entries, as given, into an uncompressed tar.
func rawTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		hdr := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		switch e.typ {
		case tar.TypeDir:
			hdr.Mode = 0o755
		case tar.TypeSymlink:
			hdr.Mode = 0o777
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar entry %q: %v", e.name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hostCanary is a directory on the host, outside everything the daemon
// owns, holding one file that hostile images aim at.
type hostCanary struct {
	dir, file string
	content   []byte
	ino       uint64
}

const canaryContent = "host canary: must never change\n"

func newHostCanary(t *testing.T) hostCanary {
	t.Helper()
	dir, err := os.MkdirTemp("", "podbay-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := hostCanary{dir: dir, file: filepath.Join(dir, "canary"), content: []byte(canaryContent)}
	if err := os.WriteFile(c.file, c.content, 0o600); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(c.file, &st); err != nil {
		t.Fatal(err)
	}
	c.ino = st.Ino
	return c
}

// check fails t unless the canary directory holds the canary file alone,
// unchanged, with one link and no extended attribute on either.
func (c hostCanary) check(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatalf("canary directory: %v", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"canary"}) {
		t.Errorf("canary directory %s holds %v, want [canary] alone: an image wrote into the host", c.dir, names)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(c.file, &st); err != nil {
		t.Fatalf("canary: %v", err)
	}
	if st.Ino != c.ino || st.Nlink != 1 || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Errorf("canary %s: inode %d (was %d), %d links, mode %o: want the same regular file with one link", c.file, st.Ino, c.ino, st.Nlink, st.Mode)
	}
	if got, err := os.ReadFile(c.file); err != nil || !bytes.Equal(got, c.content) {
		t.Errorf("canary content %q (%v), want %q", got, err, c.content)
	}
	for _, p := range []string{c.dir, c.file} {
		if n, err := unix.Llistxattr(p, make([]byte, 4096)); err != nil || n != 0 {
			t.Errorf("%s has extended attributes (%d bytes, %v): an image set them on the host", p, n, err)
		}
	}
}

// findNamed returns the paths under root whose name contains token,
// except those inside a layer's diff directory (where a neutralised entry
// belongs).
func findNamed(t *testing.T, root, token string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "diff" {
			return fs.SkipDir
		}
		if strings.Contains(d.Name(), token) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestSecurityLayerEscape: layers whose entries try to leave the layer
// (".." paths, absolute paths, a symlink pointing out and a file written
// through it, in one layer or across two, hard links to a host file,
// whiteouts of ".." and of host files, an opaque whiteout through a
// symlink) change nothing outside the layer: each pull fails cleanly or
// keeps the entry inside, the host canary stays as it was (same inode, one
// link, same bytes, no xattr), and no file of theirs exists outside a
// layer's diff directory, in the env's directory, / or /tmp. The unpacking
// is containers/storage's archive.Unpack, which podbay runs on a thread
// chrooted into the layer (internal/image/unpack.go).
func TestSecurityLayerEscape(t *testing.T) {
	canary := newHostCanary(t)
	tok := "pbesc" + randString(8)
	up := strings.Repeat("../", 16)
	outside := up + strings.TrimPrefix(canary.dir, "/") // relative, lands in canary.dir
	reg, dir, sym, link := byte(tar.TypeReg), byte(tar.TypeDir), byte(tar.TypeSymlink), byte(tar.TypeLink)

	cases := []struct {
		name   string
		base   testimage.Base
		layers [][]tarEntry
	}{
		{"dotdot", testimage.BaseScratch, [][]tarEntry{{
			{typ: reg, name: "../" + tok + "-dd1", body: "x"},
			{typ: reg, name: "../../" + tok + "-dd2", body: "x"},
			{typ: reg, name: "../../../../" + tok + "-dd4", body: "x"},
			{typ: reg, name: outside + "/" + tok + "-dotdot", body: "x"},
			{typ: reg, name: "a/../../" + tok + "-dd-nested", body: "x"},
		}}},
		{"absolute", testimage.BaseScratch, [][]tarEntry{{
			{typ: reg, name: canary.dir + "/" + tok + "-abs", body: "x"},
			{typ: reg, name: "/" + tok + "-root", body: "x"},
			{typ: reg, name: "/tmp/" + tok + "-tmp", body: "x"},
		}}},
		{"symlink-absolute", testimage.BaseScratch, [][]tarEntry{{
			{typ: sym, name: "esc", link: canary.dir},
			{typ: reg, name: "esc/" + tok + "-symlink", body: "x"},
		}}},
		{"symlink-relative", testimage.BaseScratch, [][]tarEntry{{
			{typ: sym, name: "esc", link: outside},
			{typ: reg, name: "esc/" + tok + "-relsymlink", body: "x"},
		}}},
		{"symlink-etc-to-root", testimage.BaseScratch, [][]tarEntry{{
			{typ: sym, name: "etc", link: "/"},
			{typ: reg, name: "etc/" + strings.TrimPrefix(canary.dir, "/") + "/" + tok + "-etcroot", body: "x"},
			{typ: reg, name: "etc/tmp/" + tok + "-etctmp", body: "x"},
		}}},
		{"symlink-to-file", testimage.BaseScratch, [][]tarEntry{{
			{typ: sym, name: "f", link: canary.file},
			{typ: link, name: "g", link: "f"},
		}}},
		{"hardlink-absolute", testimage.BaseScratch, [][]tarEntry{{
			{typ: link, name: "shadow", link: canary.file},
		}}},
		{"hardlink-relative", testimage.BaseScratch, [][]tarEntry{{
			{typ: link, name: "shadow", link: outside + "/canary"},
		}}},
		{"hardlink-through-symlink", testimage.BaseScratch, [][]tarEntry{{
			{typ: sym, name: "hs", link: canary.dir},
			{typ: link, name: "shadow", link: "hs/canary"},
		}}},
		{"whiteout-dotdot", testimage.BaseScratch, [][]tarEntry{{
			{typ: dir, name: "sub/"},
			{typ: reg, name: ".wh.."},
			{typ: reg, name: ".wh..."},
			{typ: reg, name: "sub/.wh.."},
			{typ: reg, name: "sub/.wh..."},
		}}},
		{"whiteout-host-file", testimage.BaseScratch, [][]tarEntry{{
			{typ: reg, name: outside + "/.wh.canary"},
			{typ: reg, name: canary.dir + "/.wh.canary"},
		}}},
		{"whiteout-through-symlink", testimage.BaseScratch, [][]tarEntry{{
			{typ: sym, name: "ws", link: canary.dir},
			{typ: reg, name: "ws/.wh.canary"},
			{typ: reg, name: "ws/.wh..wh..opq"},
		}}},
		{"opaque-over-base", testimage.BaseBusybox, [][]tarEntry{{
			{typ: dir, name: "etc/"},
			{typ: reg, name: "etc/.wh..wh..opq"},
			{typ: reg, name: ".wh.bin"},
		}}},
		{"cross-layer-symlink", testimage.BaseScratch, [][]tarEntry{
			{{typ: sym, name: "x", link: canary.dir}, {typ: sym, name: "y", link: outside}},
			{
				{typ: reg, name: "x/" + tok + "-crosslayer", body: "x"},
				{typ: reg, name: "y/" + tok + "-crosslayer-rel", body: "x"},
				{typ: link, name: "shadow", link: "x/canary"},
				{typ: reg, name: "x/.wh.canary"},
			},
		}},
	}

	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	for _, tc := range cases {
		spec := testimage.Spec{Repository: "test/escape", Tags: []string{tc.name}, Base: tc.base}
		for _, l := range tc.layers {
			spec.RawLayers = append(spec.RawLayers, rawTar(t, l...))
		}
		push(t, r, spec)
	}
	e.start("")

	for _, tc := range cases {
		ref := r.Reference("test/escape:" + tc.name)
		id, err := e.tryPull(rpcCtx(t), ref, nil)
		switch {
		case err == nil:
			t.Logf("%s: pulled (%s): the entries were kept inside the layer", tc.name, short(id))
		case code(err) != codes.InvalidArgument:
			t.Errorf("%s: PullImage: code %v (%v), want InvalidArgument: the image's layer is at fault", tc.name, code(err), err)
		default:
			t.Logf("%s: refused: %v", tc.name, err)
			e.requireNoImage(t, ref)
		}
		canary.check(t)
	}

	if found := findNamed(t, e.dir, tok); len(found) > 0 {
		t.Errorf("files of the hostile layers outside any layer, in the env's directory: %v", found)
	}
	// Where the absolute and climbing entries would land on the host.
	for _, d := range []string{"/", "/tmp"} {
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			if strings.Contains(ent.Name(), tok) {
				t.Errorf("%s exists on the host", filepath.Join(d, ent.Name()))
			}
		}
	}
	e.assertNoLeaks(t)
}

// daemonPeakRSS returns the daemon's peak resident set (VmHWM) in bytes
// and, with reset, starts a new peak from the current resident set
// (clear_refs 5).
func (e *env) daemonPeakRSS(t *testing.T, reset bool) int64 {
	t.Helper()
	pid := e.daemonPid()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var kb int64 = -1
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
		}
	}
	if kb < 0 {
		t.Fatalf("no VmHWM in /proc/%d/status", pid)
	}
	if reset {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			t.Fatalf("reset the daemon's peak RSS: %v", err)
		}
	}
	return kb << 10
}

// userImage is an image of the busybox base whose config User is user and
// whose /etc/passwd and /etc/group, when given, replace the base's.
func userImage(tag, user string, passwd, group []byte) testimage.Spec {
	spec := testimage.Spec{Repository: "test/user-trick", Tags: []string{tag},
		Config: testimage.Config{User: user, Env: []string{testimage.DefaultPath}, Cmd: []string{"sh", "-c", "id; sleep 1000"}}}
	if passwd != nil {
		spec.Files = append(spec.Files, testimage.File{Path: "/etc/passwd", Content: passwd})
	}
	if group != nil {
		spec.Files = append(spec.Files, testimage.File{Path: "/etc/group", Content: group})
	}
	return spec
}

// TestSecurityImageUser: an image's User cannot make a container run with
// an id it did not name, nor wrap around to root: ids past 2^31-1,
// negative ids, hex, a group past the range, names not in /etc/passwd
// (a NUL does not truncate a name) are refused (InvalidArgument, no container made); a
// passwd entry named "1000" with uid 0 does not make "1000" root (numbers
// are ids, as in runc); lines with NULs or of 60 KiB do not confuse the
// parser (a line of 4 MiB, runc 1.1 itself refuses). An /etc/passwd of
// 100 MiB is refused without being read whole (InvalidArgument), and one
// of 15 MiB, a million lines, with an /etc/group as large, is resolved
// with the daemon's peak RSS growing by less than 100 MiB. The groups
// /etc/group lists the user in are added, gid 0 included, as containerd and CRI-O do;
// SupplementalGroupsPolicy Strict leaves them out.
func TestSecurityImageUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\n" +
		"1000:x:0:0:numeric-looking name of root:/:/bin/sh\n" +
		"alice:x:1000:1000::/:/bin/sh\n" +
		"evil\x00:x:0:0::/:/bin/sh\n" +
		"nul:x:0\x00:0::/:/bin/sh\n" +
		"long:x:2000:2000:" + strings.Repeat("L", 60<<10) + ":/:/bin/sh\n" +
		"after:x:3000:3000::/:/bin/sh\n")
	group := []byte("root:x:0:\nwheel:x:0:alice\nstaff:x:50:bob,alice\nalice:x:1000:\n")
	var many bytes.Buffer
	many.WriteString("root:x:0:0:root:/root:/bin/sh\n")
	for i := 0; many.Len() < 15<<20; i++ {
		fmt.Fprintf(&many, "u%d:x:%d:%d::/:\n", i, 10000+i%50000, 10000+i%50000)
	}
	many.WriteString("last:x:4242:4242::/:/bin/sh\n")
	var manyGroups bytes.Buffer
	manyGroups.WriteString("root:x:0:\n")
	for i := 0; manyGroups.Len() < 15<<20; i++ {
		fmt.Fprintf(&manyGroups, "g%d:x:%d:last\n", i, 20000+i%3)
	}
	longLine := []byte("root:x:0:0::/:/bin/sh\nlong:x:2000:2000:" + strings.Repeat("L", 4<<20) + ":/:/bin/sh\nafter:x:3000:3000::/:/bin/sh\n")
	huge := bytes.Repeat([]byte("x:x:1:1::/:\n"), (100<<20)/12)

	type userCase struct {
		tag, user     string
		passwd, group []byte
		want          codes.Code // OK: created; its id is wantID
		wantID        string     // "uid gid groups" as /proc/self/status shows them
		strict        bool
	}
	cases := []userCase{
		{tag: "uid-2e32", user: "4294967296", want: codes.InvalidArgument},
		{tag: "uid-2e32-minus1", user: "4294967295", want: codes.InvalidArgument},
		{tag: "uid-2e31", user: "2147483648", want: codes.InvalidArgument},
		{tag: "uid-neg", user: "-1", want: codes.InvalidArgument},
		{tag: "uid-hex", user: "0x0", want: codes.InvalidArgument},
		{tag: "gid-2e32", user: "1000:4294967296", want: codes.InvalidArgument},
		{tag: "gid-neg", user: "1000:-1", want: codes.InvalidArgument},
		{tag: "three-parts", user: "1000:1000:0", want: codes.InvalidArgument},
		{tag: "unknown-name", user: "nosuchuser", want: codes.InvalidArgument},
		{tag: "unknown-group", user: "1000:nosuchgroup", want: codes.InvalidArgument},
		// Names match byte for byte: the entry named "evil\x00" (which
		// the image could as well have called root), not "evil".
		{tag: "nul-name", user: "evil\x00", passwd: passwd, group: group, want: codes.OK, wantID: "0 0 0"},
		{tag: "nul-truncated", user: "evil", passwd: passwd, want: codes.InvalidArgument},
		{tag: "nul-in-uid", user: "nul", passwd: passwd, want: codes.InvalidArgument},
		// "1000" is uid 1000 (alice), not the entry named "1000" (uid 0).
		{tag: "numeric-name", user: "1000", passwd: passwd, group: group, want: codes.OK, wantID: "1000 1000 0 50 1000"},
		{tag: "after-long-line", user: "after", passwd: passwd, group: group, want: codes.OK, wantID: "3000 3000 3000"},
		{tag: "groups-merge", user: "alice", passwd: passwd, group: group, want: codes.OK, wantID: "1000 1000 0 50 1000"},
		{tag: "groups-strict", user: "alice", passwd: passwd, group: group, want: codes.OK, wantID: "1000 1000 1000", strict: true},
		{tag: "huge-passwd", user: "x", passwd: huge, want: codes.InvalidArgument},
		// podbay resolves past a 4 MiB line; runc 1.1 reads /etc/passwd
		// with a 64 KiB line limit and refuses the container itself.
		{tag: "runc-long-line", user: "after", passwd: longLine, want: codes.Unknown},
		{tag: "many-lines", user: "last", passwd: many.Bytes(), group: manyGroups.Bytes(), want: codes.OK, wantID: "4242 4242 4242 20000 20001 20002"},
	}

	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	for _, tc := range cases {
		push(t, r, userImage(tc.tag, tc.user, tc.passwd, tc.group))
	}
	e.start("")
	pod := e.runTestPod(t, "usertrick")

	for _, tc := range cases {
		ref := r.Reference("test/user-trick:" + tc.tag)
		e.pullImage(t, ref, nil)
		cfg := containerConfig(tc.tag, ref)
		if tc.strict {
			cfg.Linux.SecurityContext.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		}
		before := e.daemonPeakRSS(t, true)
		id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
		peak := e.daemonPeakRSS(t, false)
		if tc.tag == "many-lines" || tc.tag == "huge-passwd" {
			t.Logf("%s: daemon peak RSS %d MiB during CreateContainer (%d MiB before)", tc.tag, peak>>20, before>>20)
			if peak-before > 100<<20 {
				t.Errorf("%s: the daemon's peak RSS grew by %d MiB resolving the user, want < 100 MiB", tc.tag, (peak-before)>>20)
			}
		}
		if code(err) != tc.want {
			t.Errorf("%s: User %q: CreateContainer = %s, %v; want %v", tc.tag, tc.user, short(id), err, tc.want)
		}
		if err != nil {
			continue
		}
		if tc.want != codes.OK {
			// Wrongly made: show whom it would have run as, then drop it.
			if _, err := e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil {
				t.Logf("%s: runs as %s", tc.tag, e.execOutput(t, id, "id"))
				e.stopContainer(t, id, 0)
			}
			e.removeContainer(t, id)
			continue
		}
		e.startContainer(t, id)
		e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
		status := e.execOutput(t, id, "cat", "/proc/self/status")
		var uid, gid, groups string
		for _, line := range strings.Split(status, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 1 && f[0] == "Uid:":
				uid = f[1] + ":" + f[2] + ":" + f[3] + ":" + f[4]
			case len(f) > 1 && f[0] == "Gid:":
				gid = f[1]
			case len(f) > 0 && f[0] == "Groups:":
				groups = strings.Join(f[1:], " ")
			}
		}
		want := strings.Fields(tc.wantID)
		if u := want[0]; uid != u+":"+u+":"+u+":"+u || gid != want[1] || groups != strings.Join(want[2:], " ") {
			t.Errorf("%s: User %q runs as uid %s gid %s groups [%s]; want uid %s (all four) gid %s groups %v",
				tc.tag, tc.user, uid, gid, groups, want[0], want[1], want[2:])
		}
		// ContainerStatus.user tells the kubelet what the process got
		// (KEP-3619), the same as the kernel's view.
		st, _ := e.containerStatus(t, id)
		lu := st.GetUser().GetLinux()
		var reported []string
		for _, g := range lu.GetSupplementalGroups() {
			reported = append(reported, strconv.FormatInt(g, 10))
		}
		slices.Sort(reported)
		kernel := strings.Fields(groups)
		slices.Sort(kernel)
		if strconv.FormatInt(lu.GetUid(), 10) != want[0] || strconv.FormatInt(lu.GetGid(), 10) != want[1] || !slices.Equal(reported, kernel) {
			t.Errorf("%s: ContainerStatus.user = %v; the process has uid %s gid %s groups %v", tc.tag, lu, want[0], want[1], kernel)
		}
		e.stopContainer(t, id, 0)
		e.removeContainer(t, id)
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers left: %v", containerIDs(got))
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// headerRecorder is a plain HTTP server that records the Authorization
// header of every request and answers blob GETs with the blob fetched from
// a registry (with that registry's credentials, test-side).
type headerRecorder struct {
	srv      *http.Server
	addr     string
	upstream string // registry base URL
	user     string
	pass     string

	mu    sync.Mutex
	auths []string // guarded by mu; "" for a request without the header
}

func startHeaderRecorder(t *testing.T, listen, upstream, user, pass string) *headerRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("listen on %s: %v", listen, err)
	}
	h := &headerRecorder{addr: ln.Addr().String(), upstream: upstream, user: user, pass: pass}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	t.Cleanup(func() { _ = h.srv.Close() })
	return h
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auths = append(h.auths, r.Header.Get("Authorization"))
	h.mu.Unlock()
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, h.upstream+r.URL.Path, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.SetBasicAuth(h.user, h.pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (h *headerRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.auths)
}

// TestSecurityPullCredentialsStayHome: a registry that wants credentials
// and answers blob GETs with a redirect to another host (as registries
// redirect to a storage service) gets the pull's credentials; the host
// it redirects to, at another address, never sees an Authorization
// header, and the pull succeeds there without them. The same address on
// another port does see them (a known gap of containers/image, skipped
// with the evidence until it is fixed there). (containers/image's HTTP client follows
// the redirect; what it forwards is what this test checks.)
func TestSecurityPullCredentialsStayHome(t *testing.T) {
	const user, pass = "kubelet", "s3cret-never-elsewhere"
	r := startRegistry(t, testimage.Options{Username: user, Password: pass})
	spec := defaultSpec(t, "test", "busybox")
	push(t, r, spec)
	upstream := "http://" + r.Addr()

	for _, tc := range []struct{ name, listen, knownGap string }{
		{"other-host", "127.0.0.2:0", ""},
		// Go's default redirect policy (net/http shouldCopyHeaderOnRedirect)
		// compares host names without the port (or scheme), and
		// containers/image v5.42.1's docker client (docker/docker_client.go,
		// http.Client without CheckRedirect) keeps that policy: the
		// credentials follow a redirect to another port of the same
		// host, as curl's did before CVE-2022-27776.
		{"same-host-other-port", "127.0.0.1:0", "containers/image forwards credentials to another port of the same host (Go's redirect policy ignores the port); needs a CheckRedirect upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := startHeaderRecorder(t, tc.listen, upstream, user, pass)
			var blobAuth atomic.Int64
			proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: r.Addr()})
			front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
					if u, p, ok := req.BasicAuth(); !ok || u != user || p != pass {
						w.Header().Set("WWW-Authenticate", `Basic realm="front"`)
						http.Error(w, "authentication required", http.StatusUnauthorized)
						return
					}
					blobAuth.Add(1)
					http.Redirect(w, req, "http://"+target.addr+req.URL.Path, http.StatusTemporaryRedirect)
					return
				}
				proxy.ServeHTTP(w, req)
			}))
			front.Start()
			t.Cleanup(front.Close)
			frontAddr := strings.TrimPrefix(front.URL, "http://")

			e := newEnv(t, envOptions{registries: insecureRegistry(frontAddr)})
			e.start("")
			ref := frontAddr + "/test/busybox:latest"
			id, err := e.tryPull(rpcCtx(t), ref, &runtimeapi.AuthConfig{Username: user, Password: pass})
			auths := target.seen()
			t.Logf("pull through a redirect to %s: %s, %v; the redirect target saw %d requests", target.addr, short(id), err, len(auths))
			if blobAuth.Load() == 0 {
				t.Fatal("no authenticated blob GET reached the registry: the redirect was not exercised")
			}
			if len(auths) == 0 {
				t.Fatalf("the redirect target saw no request (pull: %v)", err)
			}
			leaked := slices.IndexFunc(auths, func(a string) bool { return a != "" })
			if leaked >= 0 && tc.knownGap != "" {
				// Not podbay's to fix in place; the subtest starts to
				// pass once containers/image stops forwarding.
				t.Skipf("KNOWN GAP: the redirect target %s got Authorization %q: %s", target.addr, auths[leaked], tc.knownGap)
			}
			for i, a := range auths {
				if a != "" {
					t.Errorf("request %d to the redirect target %s carried Authorization %q: the registry's credentials left for another host", i, target.addr, a)
				}
			}
			if err != nil {
				t.Errorf("PullImage through the redirect: %v", err)
			} else if want := criID(t, hostImage(t, spec)); id != want {
				t.Errorf("PullImage: %s, want %s", id, want)
			}
			e.assertNoLeaks(t)
		})
	}
}

// TestSecurityLeakyVesselsWorkingDir: runc's CVE-2024-21626 let an image
// whose WorkingDir (or Entrypoint) went through /proc/self/fd/N reach the
// host's file system through a descriptor the runtime leaked. podbay
// refuses such an image's working directory and program, directly or
// through a symlink of the image (InvalidArgument, no container made), for
// every fd number a runtime could have leaked; and whatever the runtime,
// no container's output shows the host canary's bytes or the output of
// a host-only script. PODBAY_TEST_VULN_RUNC names a vulnerable runc
// (1.1.11) to run the pods with, to see the test fail without podbay's
// check.
func TestSecurityLeakyVesselsWorkingDir(t *testing.T) {
	canary := newHostCanary(t)
	tok := "HOSTONLY" + randString(8)
	script := filepath.Join(canary.dir, "host-only.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho "+tok+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	canary.content = nil // the directory now holds the script too; checked below by hand
	up := strings.Repeat("../", 12)
	readHost := "cat " + up + strings.TrimPrefix(canary.file, "/") + "; ls " + up + strings.TrimPrefix(canary.dir, "/") + "; echo end"

	type leakCase struct {
		tag string
		cfg testimage.Config
		fs  []testimage.File
	}
	var cases []leakCase
	for fd := 3; fd <= 9; fd++ {
		dir := fmt.Sprintf("/proc/self/fd/%d", fd)
		cases = append(cases,
			leakCase{tag: fmt.Sprintf("cwd-%d", fd), cfg: testimage.Config{WorkingDir: dir, Cmd: []string{"/bin/sh", "-c", readHost}}},
			leakCase{tag: fmt.Sprintf("entrypoint-%d", fd), cfg: testimage.Config{Entrypoint: []string{dir + "/" + up + strings.TrimPrefix(script, "/")}}},
		)
	}
	cases = append(cases,
		leakCase{tag: "cwd-thread-self", cfg: testimage.Config{WorkingDir: "/proc/thread-self/fd/7", Cmd: []string{"/bin/sh", "-c", readHost}}},
		leakCase{tag: "cwd-symlink", cfg: testimage.Config{WorkingDir: "/wd", Cmd: []string{"/bin/sh", "-c", readHost}},
			fs: []testimage.File{{Path: "/wd", Mode: fs.ModeSymlink, Link: "/proc/self/fd/7"}}},
		leakCase{tag: "entrypoint-symlink", cfg: testimage.Config{Entrypoint: []string{"/bin/leak"}},
			fs: []testimage.File{{Path: "/bin/leak", Mode: fs.ModeSymlink, Link: "/proc/self/fd/7/" + up + strings.TrimPrefix(script, "/")}}},
	)

	handler := ""
	opts := envOptions{}
	if vuln := os.Getenv("PODBAY_TEST_VULN_RUNC"); vuln != "" {
		handler = "vuln"
		opts.extraRuntimes = map[string]handlerOptions{"vuln": {runtime: vuln, typ: "oci"}}
	}
	r := startRegistry(t, testimage.Options{})
	opts.registries = insecureRegistry(r.Addr())
	e := newEnv(t, opts)
	for _, tc := range cases {
		tc.cfg.Env = []string{testimage.DefaultPath}
		push(t, r, testimage.Spec{Repository: "test/leaky", Tags: []string{tc.tag}, Config: tc.cfg, Files: tc.fs})
	}
	e.start("")
	podCfg := e.podConfig("leaky")
	if err := os.MkdirAll(podCfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := testPod{id: e.runPod(t, podCfg, handler), cfg: podCfg}

	for _, tc := range cases {
		ref := r.Reference("test/leaky:" + tc.tag)
		e.pullImage(t, ref, nil)
		cfg := containerConfig(tc.tag, ref)
		id, err := e.tryCreateContainer(rpcCtx(t), pod, cfg)
		if err != nil {
			if code(err) != codes.InvalidArgument {
				t.Errorf("%s: CreateContainer: %v, want InvalidArgument", tc.tag, err)
			}
			continue
		}
		t.Errorf("%s: CreateContainer accepted an image whose working directory or program goes through /proc", tc.tag)
		if _, err := e.rt.StartContainer(rpcCtx(t), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
			t.Logf("%s: StartContainer: %v", tc.tag, err)
		} else {
			e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
		}
		st, _ := e.containerStatus(t, id)
		out, _ := os.ReadFile(st.LogPath)
		if strings.Contains(string(out), canaryContent) || strings.Contains(string(out), tok) {
			t.Errorf("%s: the container reached the host's file system:\n%s", tc.tag, out)
		}
		e.removeContainer(t, id)
	}
	if got := e.listContainers(t, nil); len(got) != 0 {
		t.Errorf("containers left: %v", containerIDs(got))
	}
	if got, err := os.ReadFile(canary.file); err != nil || string(got) != canaryContent {
		t.Errorf("canary %q, %v", got, err)
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// hostileRegistry serves, without auth, the manifests and blobs it is
// given: content that go-containerregistry's registry would not store,
// generated on demand.
type hostileRegistry struct {
	manifests map[string]func(w io.Writer) // tag → body writer
	mediaType string
	blobs     map[string]func(w io.Writer) // "sha256:..." → body writer
	addr      string
}

func startHostileRegistry(t *testing.T, h *hostileRegistry) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elems := strings.Split(r.URL.Path, "/")
		switch {
		case r.URL.Path == "/v2/":
			w.WriteHeader(http.StatusOK)
			return
		case len(elems) >= 3 && elems[len(elems)-2] == "manifests":
			if body, ok := h.manifests[elems[len(elems)-1]]; ok {
				w.Header().Set("Content-Type", h.mediaType)
				if r.Method != http.MethodHead {
					body(w)
				}
				return
			}
		case len(elems) >= 3 && elems[len(elems)-2] == "blobs":
			if body, ok := h.blobs[elems[len(elems)-1]]; ok {
				w.Header().Set("Content-Type", "application/octet-stream")
				if r.Method != http.MethodHead {
					body(w)
				}
				return
			}
		}
		http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}`, http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	h.addr = strings.TrimPrefix(srv.URL, "http://")
}

// repeatTo writes head, then unit until at least size bytes, then tail.
func repeatTo(head, unit, sep, tail string, size int) func(io.Writer) {
	return func(w io.Writer) {
		bw := bufio.NewWriterSize(w, 1<<20)
		n, _ := bw.WriteString(head)
		for i := 0; n < size; i++ {
			if i > 0 {
				m, _ := bw.WriteString(sep)
				n += m
			}
			m, err := bw.WriteString(unit)
			if err != nil {
				return
			}
			n += m
		}
		_, _ = bw.WriteString(tail)
		_ = bw.Flush()
	}
}

// TestSecurityHugeImageMetadata: a registry that serves a 100 MiB manifest,
// a manifest with 100,000 layers, or a 100 MiB image config gets each
// pull refused (InvalidArgument), no image stored, and the daemon's peak
// RSS during the pull grows by less than 64 MiB (containers/image reads a
// manifest or config at most 4 MiB long). A manifest under that size with
// 20,000 layers (the same empty one) is refused within a minute once
// past 500 layers, the most the overlay driver mounts: unbounded, 2,000
// of them did not finish in 90 s (each layer costs more than the last).
func TestSecurityHugeImageMetadata(t *testing.T) {
	const ociManifest = "application/vnd.oci.image.manifest.v1+json"
	layer := fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":32}`, strings.Repeat("a", 64))
	manifestHead := `{"schemaVersion":2,"mediaType":"` + ociManifest + `","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("b", 64) + `","size":2},"layers":[`

	// A 100 MiB config, served under its true digest.
	configBody := repeatTo(`{"architecture":"amd64","os":"linux","config":{"Env":[`, `"A=`+strings.Repeat("x", 1000)+`"`, ",", `]},"rootfs":{"type":"layers","diff_ids":[]}}`, 100<<20)
	var cfg bytes.Buffer
	configBody(&cfg)
	sum := sha256.Sum256(cfg.Bytes())
	cfgDigest := "sha256:" + hex.EncodeToString(sum[:])
	cfgBytes := cfg.Bytes()
	hugeConfigManifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"%s","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[]}`,
		ociManifest, cfgDigest, len(cfgBytes))

	h := &hostileRegistry{
		mediaType: ociManifest,
		manifests: map[string]func(io.Writer){
			"huge-manifest": repeatTo(manifestHead, layer, ",", "]}", 100<<20),
			"many-layers":   repeatTo(manifestHead, layer, ",", "]}", 100000*len(layer)),
			"huge-config":   func(w io.Writer) { _, _ = io.WriteString(w, hugeConfigManifest) },
		},
		blobs: map[string]func(io.Writer){
			cfgDigest: func(w io.Writer) { _, _ = w.Write(cfgBytes) },
		},
	}
	// Deep: a manifest under the limit with more layers than the overlay
	// driver can ever mount (containers/storage's maxDepth, 500), all the
	// same tiny layer.
	deep := 20000
	var emptyTar bytes.Buffer
	_ = tar.NewWriter(&emptyTar).Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(emptyTar.Bytes())
	_ = zw.Close()
	diffSum, gzSum := sha256.Sum256(emptyTar.Bytes()), sha256.Sum256(gz.Bytes())
	diffID, layerDigest := "sha256:"+hex.EncodeToString(diffSum[:]), "sha256:"+hex.EncodeToString(gzSum[:])
	deepCfg := []byte(`{"architecture":"` + runtime.GOARCH + `","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["` +
		strings.TrimSuffix(strings.Repeat(diffID+`","`, deep), `","`) + `"]}}`)
	deepCfgSum := sha256.Sum256(deepCfg)
	deepCfgDigest := "sha256:" + hex.EncodeToString(deepCfgSum[:])
	deepLayer := fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"%s","size":%d}`, layerDigest, gz.Len())
	deepManifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"%s","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[%s]}`,
		ociManifest, deepCfgDigest, len(deepCfg), strings.TrimSuffix(strings.Repeat(deepLayer+",", deep), ","))
	h.manifests["deep"] = func(w io.Writer) { _, _ = io.WriteString(w, deepManifest) }
	h.blobs[deepCfgDigest] = func(w io.Writer) { _, _ = w.Write(deepCfg) }
	h.blobs[layerDigest] = func(w io.Writer) { _, _ = w.Write(gz.Bytes()) }

	startHostileRegistry(t, h)
	e := newEnv(t, envOptions{registries: insecureRegistry(h.addr)})
	e.start("")
	// The daemon imports its pause image at start: let it finish, so that
	// its layer and its memory are not counted against a refused pull.
	e.waitPauseImage(t)

	for _, tag := range []string{"huge-manifest", "many-layers", "huge-config", "deep"} {
		ref := h.addr + "/test/huge:" + tag
		layerDirs := layerDirNames(t, e.storageRoot)
		before := e.daemonPeakRSS(t, true)
		start := time.Now()
		_, err := e.tryPull(rpcCtx(t), ref, nil)
		peak := e.daemonPeakRSS(t, false)
		t.Logf("%s: %v in %v; daemon peak RSS %d MiB (%d MiB before)", tag, err, time.Since(start).Round(time.Millisecond), peak>>20, before>>20)
		if now := layerDirNames(t, e.storageRoot); len(now) > len(layerDirs) {
			t.Errorf("%s: layer directories %q after the refused pull, %q before: its layers were left behind", tag, now, layerDirs)
		}

		if code(err) != codes.InvalidArgument {
			t.Errorf("%s: PullImage: %v, want InvalidArgument", tag, err)
		}
		// The deep image is refused once its first 500 layers are in
		// storage (then removed): more memory and time than the others.
		bound, took := int64(64<<20), time.Since(start)
		if tag == "deep" {
			bound = 128 << 20
			if took > time.Minute {
				t.Errorf("deep: refused after %v, want within a minute", took)
			}
		}
		if peak-before > bound {
			t.Errorf("%s: the daemon's peak RSS grew by %d MiB, want < %d MiB", tag, (peak-before)>>20, bound>>20)
		}
		e.requireNoImage(t, ref)
	}
	e.assertNoLeaks(t)
}

// TestSecurityImageConfigVolumes: an image config's Volumes (containerd's
// CVE-2022-23648: targets with ".." or reached through the image's
// symlinks made containerd copy host files into the container) give the
// container nothing of the host: podbay makes no mount and copies nothing
// for them, so no mount in the spec names them, the container cannot read
// the host canary through any of them, and the host canary is untouched.
// (KEP-4639 image volumes with a sub path leaving the image are refused
// in TestImageVolume.)
func TestSecurityImageConfigVolumes(t *testing.T) {
	canary := newHostCanary(t)
	up := strings.Repeat("../", 12)
	volumes := []string{
		"/../../../../../../../.." + canary.dir,
		canary.dir,
		"/vlink",
		"/vrel",
		"/etc/../../../../tmp",
		"/vlink/canary",
	}
	r := startRegistry(t, testimage.Options{})
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr())})
	push(t, r, testimage.Spec{Repository: "test/volumes", Tags: []string{"evil"},
		Files: []testimage.File{
			{Path: "/vlink", Mode: fs.ModeSymlink, Link: canary.dir},
			{Path: "/vrel", Mode: fs.ModeSymlink, Link: up + strings.TrimPrefix(canary.dir, "/")},
		},
		Config: testimage.Config{Env: []string{testimage.DefaultPath}, Cmd: []string{"sleep", "1000"}, Volumes: volumes}})
	e.start("")
	ref := r.Reference("test/volumes:evil")
	e.pullImage(t, ref, nil)
	pod := e.runTestPod(t, "volumes")
	id, _ := e.runContainer(t, pod, containerConfig("volumes", ref))

	_, info := e.containerStatus(t, id)
	var spec struct {
		Mounts []struct {
			Destination string `json:"destination"`
			Source      string `json:"source"`
		} `json:"mounts"`
	}
	if err := json.Unmarshal(info.RuntimeSpec, &spec); err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Mounts {
		if strings.Contains(m.Source, canary.dir) || slices.Contains(volumes, m.Destination) ||
			strings.HasPrefix(m.Destination, "/vlink") || strings.HasPrefix(m.Destination, "/vrel") {
			t.Errorf("the spec mounts %s at %s, from the image's Volumes", m.Source, m.Destination)
		}
	}
	for _, p := range []string{canary.file, "/vlink/canary", "/vrel/canary", "/" + up + strings.TrimPrefix(canary.file, "/")} {
		resp := e.execSync(t, id, 10, "cat", p)
		if resp.ExitCode == 0 || strings.Contains(string(resp.Stdout), canaryContent) {
			t.Errorf("the container reads %s: exit %d, %q", p, resp.ExitCode, resp.Stdout)
		}
	}
	canary.check(t)
	e.stopContainer(t, id, 0)
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	canary.check(t)
	e.assertNoLeaks(t)
}

// layerDirNames lists the overlay driver's layer directories (named by
// layer ID), not the directories the driver makes for itself the first
// time it is used ("l" for its short links).
func layerDirNames(t *testing.T, storageRoot string) []string {
	return slices.DeleteFunc(dirNames(t, filepath.Join(storageRoot, "overlay")), func(n string) bool {
		_, err := hex.DecodeString(n)
		return len(n) != 64 || err != nil
	})
}
