package standin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeRoot writes files (path → content) under a temp dir and returns it.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// run runs Main with args in root and returns the status and both streams.
func run(root string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(Env{Args: args, Stdout: &stdout, Stderr: &stderr, Root: root})
	return code, stdout.String(), stderr.String()
}

// procFiles is a /proc with pid 1 top, 7 sh -c sleep, 12 sleep 4321, a
// kernel thread 2 and this process under its own PID (which pgrep skips).
func procFiles() map[string]string {
	self := strconv.Itoa(os.Getpid())
	return map[string]string{
		"proc/1/comm":               "top\n",
		"proc/1/cmdline":            "top\x00",
		"proc/2/comm":               "kthreadd\n",
		"proc/2/cmdline":            "",
		"proc/7/comm":               "sh\n",
		"proc/7/cmdline":            "sh\x00-c\x00pgrep sleep || true\x00",
		"proc/12/comm":              "sleep\n",
		"proc/12/cmdline":           "sleep\x004321\x00",
		"proc/" + self + "/comm":    "pgrep\n",
		"proc/" + self + "/cmdline": "pgrep\x00sleep\x00",
		"proc/self/comm":            "pgrep\n", // not a PID: ignored
		"proc/version":              "Linux\n",
	}
}

func TestPgrep(t *testing.T) {
	root := fakeRoot(t, procFiles())
	for _, tc := range []struct {
		args     []string
		code     int
		stdout   string
		stderrIn string
	}{
		{args: []string{"pgrep", "sleep"}, code: 0, stdout: "12\n"},
		{args: []string{"pgrep", "-f", "sleep"}, code: 0, stdout: "7\n12\n"},
		{args: []string{"pgrep", "-l", "^(top|sh)$"}, code: 0, stdout: "1 top\n7 sh\n"},
		{args: []string{"pgrep", "-x", "slee"}, code: 1},
		{args: []string{"pgrep", "slee"}, code: 0, stdout: "12\n"},
		{args: []string{"pgrep", "-fx", "sleep 4321"}, code: 0, stdout: "12\n"},
		{args: []string{"pgrep", "--", "-x"}, code: 1},
		{args: []string{"pgrep", "pgrep"}, code: 1}, // itself only
		{args: []string{"pgrep", "nothing"}, code: 1},
		{args: []string{"pgrep"}, code: 2, stderrIn: "usage"},
		{args: []string{"pgrep", "a", "b"}, code: 2, stderrIn: "usage"},
		{args: []string{"pgrep", "-q", "a"}, code: 2, stderrIn: "unknown option -q"},
		{args: []string{"pgrep", "("}, code: 2, stderrIn: "pgrep:"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(root, tc.args...)
			if code != tc.code || stdout != tc.stdout || !strings.Contains(stderr, tc.stderrIn) {
				t.Errorf("got %d %q %q, want %d %q stderr containing %q", code, stdout, stderr, tc.code, tc.stdout, tc.stderrIn)
			}
			if tc.stderrIn == "" && stderr != "" {
				t.Errorf("stderr %q", stderr)
			}
		})
	}
}

func TestPgrepNoProc(t *testing.T) {
	code, _, stderr := run(t.TempDir(), "pgrep", "x")
	if code != 2 || stderr == "" {
		t.Fatalf("got %d %q", code, stderr)
	}
}

const (
	shmTable = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n" +
		" 826649445         32   644                  4096  5314     0      0     0     0     0     0          0          0 1795340498                     0                     0\n" +
		"        -1      32769  1600               1048576  5315     0      1    33    33     0     0          0          0 1795340498                     0                     0\n"
	msgTable = "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime\n"
	semTable = "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n" +
		"         0          5   600          1  1000  1000  1000  1000          0 1795340498\n"
	passwd = "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\n"
)

func TestIpcs(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/sysvipc/shm": shmTable,
		"proc/sysvipc/msg": msgTable,
		"proc/sysvipc/sem": semTable,
		"etc/passwd":       passwd,
	})
	code, stdout, stderr := run(root, "ipcs", "-m")
	if code != 0 || stderr != "" {
		t.Fatalf("ipcs -m: %d %q", code, stderr)
	}
	want := "\n------ Shared Memory Segments --------\n" +
		"key        shmid      owner      perms      bytes      nattch     status      \n" +
		"0x3145ab65 32         root       644        4096       0                      \n" +
		"0xffffffff 32769      www-data   600        1048576    1          dest        \n" +
		"\n"
	if stdout != want {
		t.Errorf("ipcs -m:\n%q\nwant\n%q", stdout, want)
	}

	_, all, _ := run(root, "ipcs")
	for _, s := range []string{"Message Queues", "Shared Memory Segments", "Semaphore Arrays", "0x00000000 5          1000       600        1"} {
		if !strings.Contains(all, s) {
			t.Errorf("ipcs: no %q in\n%s", s, all)
		}
	}
	if _, q, _ := run(root, "ipcs", "-q"); strings.Contains(q, "Shared") || !strings.Contains(q, "Message Queues") {
		t.Errorf("ipcs -q:\n%s", q)
	}
	if code, _, stderr := run(root, "ipcs", "-z"); code != 1 || !strings.Contains(stderr, "unknown option") {
		t.Errorf("ipcs -z: %d %q", code, stderr)
	}
	if code, _, _ := run(t.TempDir(), "ipcs", "-m"); code != 1 {
		t.Errorf("ipcs -m without /proc/sysvipc: %d", code)
	}
}

// An empty IPC namespace lists headers only, with no digit a segment ID
// could be mistaken for (the HostIpc=false spec checks the ID is absent).
func TestIpcsEmpty(t *testing.T) {
	root := fakeRoot(t, map[string]string{"proc/sysvipc/shm": strings.SplitAfter(shmTable, "\n")[0]})
	code, stdout, _ := run(root, "ipcs", "-m")
	if code != 0 || strings.ContainsAny(stdout, "0123456789") {
		t.Fatalf("%d %q", code, stdout)
	}
}

func TestConfiguredPorts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		glob  string
		want  []int
		err   bool
	}{
		{name: "none", glob: "*.conf", want: []int{80}},
		{name: "nginx", glob: "*.conf", files: map[string]string{
			"default.conf": "server {\n    listen       12003;\n    server_name  localhost;\n}\n",
			"other.conf":   "server {\n  listen [::]:8080 default_server;\n  listen 12003;\n}\n",
			"skip.txt":     "listen 1;\n",
		}, want: []int{12003, 8080}},
		{name: "apache", glob: "httpd.conf", files: map[string]string{"httpd.conf": "ServerRoot x\nListen 8081\n#Listen 9\n"}, want: []int{8081}},
		{name: "bad", glob: "*.conf", files: map[string]string{"a.conf": "listen 99999;\n"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeRoot(t, tc.files)
			got, err := configuredPorts(dir, tc.glob)
			if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("got %v, %v; want %v (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestServer(t *testing.T) {
	dir := t.TempDir()
	var log, started bytes.Buffer
	s := &server{
		name:    "nginx",
		page:    []byte(nginxPage),
		ports:   []int{0, 0},
		pidFile: filepath.Join(dir, "var/run/nginx.pid"),
		log:     &log,
		started: &started,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, func(a []net.Addr) { addrs <- a }) }()

	var got []net.Addr
	select {
	case got = <-addrs:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("listening on %v", got)
	}
	pid, err := os.ReadFile(s.pidFile)
	if err != nil || string(pid) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("pid file: %q, %v", pid, err)
	}
	if !strings.HasPrefix(started.String(), "nginx: podbay stand-in listening on ") {
		t.Errorf("start line %q", started.String())
	}
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/", 200, "Welcome to nginx!"},
		{"/index.html", 200, "Welcome to nginx!"},
		{"/nope", 404, "404"},
	} {
		for _, a := range got {
			_, port, _ := net.SplitHostPort(a.String())
			resp, err := http.Get("http://127.0.0.1:" + port + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
				t.Errorf("GET %s on %s: %d %q", tc.path, port, resp.StatusCode, body)
			}
		}
	}
	if n := strings.Count(log.String(), "\n"); n != 6 || !strings.Contains(log.String(), `"GET / HTTP/1.1" 200`) {
		t.Errorf("access log (%d lines):\n%s", n, log.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := os.Stat(s.pidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left: %v", err)
	}
}

func TestServerPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := &server{name: "httpd", ports: []int{port}, log: io.Discard}
	if err := s.run(context.Background(), nil); err == nil {
		t.Fatal("run on a port in use succeeded")
	}
}

func TestNginxReexec(t *testing.T) {
	var argv []string
	var stderr bytes.Buffer
	code := Main(Env{
		Args:   []string{"/usr/sbin/nginx", "-g", "daemon off;"},
		Stdout: io.Discard,
		Stderr: &stderr,
		Exec: func(a []string) error {
			argv = a
			return os.ErrPermission
		},
	})
	want := []string{"nginx: master process /usr/sbin/nginx -g daemon off;"}
	if !reflect.DeepEqual(argv, want) {
		t.Errorf("exec %q, want %q", argv, want)
	}
	if code != 1 || !strings.Contains(stderr.String(), "re-exec") {
		t.Errorf("failed exec: %d %q", code, stderr.String())
	}
}

func TestDispatch(t *testing.T) {
	if code, stdout, _ := run("", "/usr/local/bin/nnp"); code != 0 || stdout != "Effective uid: "+strconv.Itoa(os.Geteuid())+"\n" {
		t.Errorf("nnp: %d %q", code, stdout)
	}
	if code, stdout, _ := run("", "podbay-standin", "nnp"); code != 0 || !strings.HasPrefix(stdout, "Effective uid: ") {
		t.Errorf("podbay-standin nnp: %d %q", code, stdout)
	}
	if code, _, stderr := run("", "podbay-standin"); code != 127 || !strings.Contains(stderr, "curl, httpd, ipcs, nginx, nnp, pgrep") {
		t.Errorf("podbay-standin: %d %q", code, stderr)
	}
	if code, _, stderr := run("", "ls", "-l"); code != 127 || !strings.Contains(stderr, `"ls"`) {
		t.Errorf("ls: %d %q", code, stderr)
	}
	if code, _, _ := run(""); code != 2 {
		t.Errorf("no args: %d", code)
	}
	if got := Names(); !reflect.DeepEqual(got, []string{"curl", "httpd", "ipcs", "nginx", "nnp", "pgrep"}) {
		t.Errorf("Names() = %v", got)
	}
}

func TestCurl(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/hostName", http.StatusFound)
		case "/hostName":
			w.Header().Set("X-Test", "yes")
			fmt.Fprint(w, "pod-1")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	if code, out, errOut := run("", "curl", "-g", "-q", "-s", "--max-time", "15", "--connect-timeout", "1", "http://"+host+"/hostName"); code != 0 || out != "pod-1" {
		t.Errorf("GET: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run("", "curl", "-o", "/dev/null", "-i", "-q", "-s", "-w", "%{http_code}", "--connect-timeout", "1", srv.URL+"/missing"); code != 0 || out != "404" {
		t.Errorf("-w %%{http_code} of a 404: status %d, stdout %q", code, out)
	}
	if code, out, _ := run("", "curl", "-i", "-s", srv.URL+"/hostName"); code != 0 || !strings.HasPrefix(out, "HTTP/1.1 200 OK\r\n") || !strings.Contains(out, "X-Test: yes\r\n") || !strings.HasSuffix(out, "\r\n\r\npod-1") {
		t.Errorf("-i: status %d, stdout %q", code, out)
	}
	if _, out, _ := run("", "curl", "-s", "-w", "%{http_code}", srv.URL+"/redirect"); out != "<a href=\"/hostName\">Found</a>.\n\n302" {
		t.Errorf("no -L: stdout %q", out)
	}
	if _, out, _ := run("", "curl", "-sL", srv.URL+"/redirect"); out != "pod-1" {
		t.Errorf("-L: stdout %q", out)
	}
	// Nothing listens on a port just closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if code, _, _ := run("", "curl", "-s", "http://"+addr+"/"); code != 7 {
		t.Errorf("refused: status %d, want 7", code)
	}
	for _, bad := range [][]string{{"curl"}, {"curl", "-X", "POST", srv.URL}, {"curl", "--max-time"}} {
		if code, _, _ := run("", bad...); code != 2 {
			t.Errorf("%q: status %d, want 2", bad, code)
		}
	}
}
