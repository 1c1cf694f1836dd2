package standin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nginxTitle starts the command line nginx's master process shows; the
// ContainerPID and PodPID specs grep /proc/1/cmdline for "master process".
const nginxTitle = "nginx: master process"

// nginxPage is the body nginx's default site serves.
const nginxPage = `<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>podbay's stand-in for the nginx test image.</p>
</body>
</html>
`

// httpdPage is the body Apache httpd's default site serves.
const httpdPage = "<html><body><h1>It works!</h1></body></html>\n"

// listenRE matches nginx's "listen 80;" and "listen [::]:80 default_server;"
// and Apache's "Listen 80".
var listenRE = regexp.MustCompile(`(?mi)^\s*listen\s+(?:\S*:)?(\d+)\b`)

// nginx serves its default site on the ports the "listen N;" lines of
// /etc/nginx/conf.d/*.conf name (80 when none do), writes its PID to
// /var/run/nginx.pid, logs each request to stdout, and stops on SIGTERM,
// SIGINT or SIGQUIT (exit 0). Started under any other command line it
// first re-executes itself as "nginx: master process <command line>", the
// title the real master process sets, so /proc/PID/cmdline shows it and
// the process name stays nginx.
func nginx(env Env) int {
	if !strings.HasPrefix(env.Args[0], nginxTitle) && env.Exec != nil {
		title := nginxTitle + " " + strings.Join(env.Args, " ")
		err := env.Exec([]string{title})
		fmt.Fprintf(env.Stderr, "nginx: re-exec as %q: %v\n", title, err)
		return 1
	}
	ports, err := configuredPorts(env.path("/etc/nginx/conf.d"), "*.conf")
	if err != nil {
		fmt.Fprintf(env.Stderr, "nginx: %v\n", err)
		return 1
	}
	srv := &server{
		name:    "nginx",
		page:    []byte(nginxPage),
		ports:   ports,
		pidFile: env.path("/var/run/nginx.pid"),
		log:     env.Stdout,
	}
	return srv.main(env, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
}

// httpd serves Apache's default page on the ports the "Listen N" lines of
// /usr/local/apache2/conf/httpd.conf name (80 when none do), logs a start
// line naming httpd to stderr (the multi-container log spec looks for
// "httpd") and each request to stdout, and stops on SIGWINCH (the image's
// stop signal, Apache's graceful stop), SIGTERM or SIGINT (exit 0).
func httpd(env Env) int {
	ports, err := configuredPorts(env.path("/usr/local/apache2/conf"), "httpd.conf")
	if err != nil {
		fmt.Fprintf(env.Stderr, "httpd: %v\n", err)
		return 1
	}
	srv := &server{
		name:    "httpd",
		page:    []byte(httpdPage),
		ports:   ports,
		log:     env.Stdout,
		started: env.Stderr,
	}
	return srv.main(env, syscall.SIGWINCH, syscall.SIGTERM, syscall.SIGINT)
}

// configuredPorts returns the ports that listen lines in the files of dir
// matching glob name, in order and without repeats; [80] when there are
// none (or no such files).
func configuredPorts(dir, glob string) ([]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		return nil, err
	}
	var ports []int
	seen := map[int]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range listenRE.FindAllStringSubmatch(string(data), -1) {
			p, err := strconv.Atoi(m[1])
			if err != nil || p > 65535 {
				return nil, fmt.Errorf("%s: bad port %q", f, m[1])
			}
			if !seen[p] {
				seen[p] = true
				ports = append(ports, p)
			}
		}
	}
	if len(ports) == 0 {
		ports = []int{80}
	}
	return ports, nil
}

// server is the web server behind nginx and httpd.
type server struct {
	name    string
	page    []byte
	ports   []int     // 0 picks a free port (tests)
	pidFile string    // written once listening, removed on exit; "" for none
	log     io.Writer // one line per request
	started io.Writer // one line once listening; nil for none
}

// main runs the server until one of the signals arrives and returns the
// exit status.
func (s *server) main(env Env, stop ...os.Signal) int {
	ctx, cancel := signal.NotifyContext(context.Background(), stop...)
	defer cancel()
	if err := s.run(ctx, nil); err != nil {
		fmt.Fprintf(env.Stderr, "%s: %v\n", s.name, err)
		return 1
	}
	return 0
}

// run listens on every port, calls ready with the addresses, and serves
// until ctx ends; then it shuts down (bounded) and returns nil.
func (s *server) run(ctx context.Context, ready func([]net.Addr)) error {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []net.Addr
	for _, p := range s.ports {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr())
	}
	if s.pidFile != "" {
		if err := os.MkdirAll(path.Dir(s.pidFile), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(s.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return err
		}
		defer os.Remove(s.pidFile)
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	if s.started != nil {
		var where []string
		for _, a := range addrs {
			where = append(where, a.String())
		}
		fmt.Fprintf(s.started, "%s: podbay stand-in listening on %s; resuming normal operations\n", s.name, strings.Join(where, ", "))
	}
	if ready != nil {
		ready(addrs)
	}

	errc := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// handler answers GET and HEAD of / and /index.html with the page, and 404
// to everything else, logging each request in the combined log format.
func (s *server) handler() http.Handler {
	var mu sync.Mutex // serialises log lines
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, body := http.StatusOK, s.page
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			status, body = http.StatusMethodNotAllowed, []byte("405 Method Not Allowed\n")
		case r.URL.Path != "/" && r.URL.Path != "/index.html":
			status, body = http.StatusNotFound, []byte("404 Not Found\n")
		}
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Server", s.name)
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(s.log, "%s - - [%s] %q %d %d \"-\" %q\n", host, time.Now().Format("02/Jan/2006:15:04:05 -0700"),
			r.Method+" "+r.RequestURI+" "+r.Proto, status, len(body), r.UserAgent())
	})
}

// nnp prints the effective UID, as the nonewprivs image's setuid-root
// /usr/local/bin/nnp does: "Effective uid: 0" when the setuid bit took
// effect, the caller's UID when no_new_privs kept it from doing so.
func nnp(env Env) int {
	fmt.Fprintf(env.Stdout, "Effective uid: %d\n", os.Geteuid())
	return 0
}
