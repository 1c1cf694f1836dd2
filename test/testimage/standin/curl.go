package standin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// curl is curl reduced to what Kubernetes' e2e specs run inside agnhost
// (whose upstream image has Alpine's curl): one HTTP GET of the URL,
// `curl [-gqsiL] [-o FILE] [-w FORMAT] [--connect-timeout S] [--max-time S]
// URL`. The body goes to stdout (or FILE), after the status line and headers
// with -i; -w prints FORMAT afterwards with %{http_code} replaced; -L
// follows redirects (without it none is followed, as curl). Exit status 0
// on any HTTP response, 6 when the host does not resolve, 7 when the
// connection fails, 28 on a timeout, 2 on a usage error; -g, -q and -s are
// accepted and change nothing (no globbing, no config file, no progress
// meter here).
func curl(env Env) int {
	var (
		url, outFile, writeOut string
		include, follow        bool
		connectTimeout         time.Duration
		maxTime                time.Duration
	)
	seconds := func(v string) (time.Duration, bool) {
		f, err := strconv.ParseFloat(v, 64)
		return time.Duration(f * float64(time.Second)), err == nil && f >= 0
	}
	args := env.Args[1:]
	for len(args) > 0 {
		a := args[0]
		args = args[1:]
		value := func() (string, bool) {
			if len(args) == 0 {
				return "", false
			}
			v := args[0]
			args = args[1:]
			return v, true
		}
		ok := true
		switch {
		case a == "--connect-timeout" || a == "--max-time" || a == "-m":
			var v string
			if v, ok = value(); ok {
				var d time.Duration
				if d, ok = seconds(v); ok && a == "--connect-timeout" {
					connectTimeout = d
				} else if ok {
					maxTime = d
				}
			}
		case a == "-o" || a == "--output":
			outFile, ok = value()
		case a == "-w" || a == "--write-out":
			writeOut, ok = value()
		case a == "--silent" || a == "--globoff" || a == "--include" || a == "--location":
			include = include || a == "--include"
			follow = follow || a == "--location"
		case len(a) > 1 && a[0] == '-' && a[1] != '-':
			for _, c := range a[1:] {
				switch c {
				case 'g', 'q', 's', 'S', 'f':
				case 'i':
					include = true
				case 'L':
					follow = true
				default:
					ok = false
				}
			}
		case url == "" && !strings.HasPrefix(a, "-"):
			url = a
		default:
			ok = false
		}
		if !ok {
			fmt.Fprintf(env.Stderr, "curl: option %s: unknown or missing its value\n", a)
			return 2
		}
	}
	if url == "" {
		fmt.Fprintln(env.Stderr, "curl: no URL specified")
		return 2
	}
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}

	dialer := &net.Dialer{Timeout: connectTimeout}
	client := &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: http.ProxyFromEnvironment},
		Timeout:   maxTime,
	}
	if !follow {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(env.Stderr, "curl: (3) URL rejected: %v\n", err)
		return 3
	}
	req.Header.Set("User-Agent", "curl/podbay-standin")
	resp, err := client.Do(req)
	if err != nil {
		var dnsErr *net.DNSError
		code := 7
		switch {
		case errors.As(err, &dnsErr):
			code = 6
		case isTimeout(err):
			code = 28
		}
		fmt.Fprintf(env.Stderr, "curl: (%d) %v\n", code, err)
		return code
	}
	defer resp.Body.Close()

	out := env.Stdout
	if outFile != "" && outFile != "-" {
		f, err := os.Create(outFile)
		if err != nil {
			fmt.Fprintf(env.Stderr, "curl: (23) %v\n", err)
			return 23
		}
		defer f.Close()
		out = f
	}
	if include {
		fmt.Fprintf(out, "%s %s\r\n", resp.Proto, resp.Status)
		_ = resp.Header.Write(out)
		fmt.Fprint(out, "\r\n")
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		code := 56
		if isTimeout(err) {
			code = 28
		}
		fmt.Fprintf(env.Stderr, "curl: (%d) %v\n", code, err)
		return code
	}
	if writeOut != "" {
		fmt.Fprint(env.Stdout, strings.ReplaceAll(writeOut, "%{http_code}", fmt.Sprintf("%03d", resp.StatusCode)))
	}
	return 0
}

// isTimeout reports whether err is, or wraps, a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
