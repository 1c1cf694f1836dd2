package standin

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// nmeter is busybox's nmeter, reduced to its clock: `nmeter [-d MSEC] FORMAT`
// prints FORMAT once every MSEC milliseconds (default 1000; 0: without
// pause), until writing fails (its reader went away). In FORMAT, %t is the
// local time as HH:MM:SS, %Nt the same with N (1-6) digits of the second's
// fraction, %% a percent sign; other text is printed as it is. Debian's
// busybox builds lack the applet; Kubernetes' node e2e specs
// (container_lifecycle_pod_construction.go) log millisecond timestamps
// with `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z`. Busybox's other
// conversions (CPU, memory, network) exit with status 2.
func nmeter(env Env) int {
	delay := time.Second
	args := env.Args[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-d") {
		v := strings.TrimPrefix(args[0], "-d")
		args = args[1:]
		if v == "" {
			if len(args) == 0 {
				fmt.Fprintln(env.Stderr, "usage: nmeter [-d MSEC] FORMAT")
				return 2
			}
			v, args = args[0], args[1:]
		}
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			fmt.Fprintf(env.Stderr, "nmeter: invalid delay %q\n", v)
			return 2
		}
		delay = time.Duration(ms) * time.Millisecond
	}
	if len(args) != 1 {
		fmt.Fprintln(env.Stderr, "usage: nmeter [-d MSEC] FORMAT")
		return 2
	}
	format, err := parseNmeterFormat(args[0])
	if err != nil {
		fmt.Fprintf(env.Stderr, "nmeter: %v\n", err)
		return 2
	}
	for {
		if _, err := fmt.Fprintln(env.Stdout, format(time.Now())); err != nil {
			return 0
		}
		if delay > 0 {
			time.Sleep(delay)
		}
	}
}

// parseNmeterFormat returns the function that renders an nmeter FORMAT of
// literal text, %t, %Nt and %% at a time.
func parseNmeterFormat(f string) (func(time.Time) string, error) {
	type part struct {
		text   string
		digits int // -1: text; 0-6: a time with that many fraction digits
	}
	var parts []part
	for len(f) > 0 {
		i := strings.IndexByte(f, '%')
		if i < 0 {
			parts = append(parts, part{text: f, digits: -1})
			break
		}
		if i > 0 {
			parts = append(parts, part{text: f[:i], digits: -1})
		}
		f = f[i+1:]
		digits := 0
		if len(f) > 0 && f[0] >= '0' && f[0] <= '9' {
			digits = int(f[0] - '0')
			f = f[1:]
		}
		switch {
		case len(f) > 0 && f[0] == '%' && digits == 0:
			parts = append(parts, part{text: "%", digits: -1})
		case len(f) > 0 && f[0] == 't' && digits <= 6:
			parts = append(parts, part{digits: digits})
		case len(f) > 0:
			return nil, fmt.Errorf("unsupported conversion %%%c (this nmeter prints the time only: %%t, %%Nt)", f[0])
		default:
			return nil, fmt.Errorf("format ends with %%")
		}
		f = f[1:]
	}
	return func(t time.Time) string {
		var b strings.Builder
		for _, p := range parts {
			if p.digits < 0 {
				b.WriteString(p.text)
				continue
			}
			b.WriteString(t.Format("15:04:05"))
			if p.digits > 0 {
				b.WriteByte('.')
				frac := fmt.Sprintf("%06d", t.Nanosecond()/1000)
				b.WriteString(frac[:p.digits])
			}
		}
		return b.String()
	}, nil
}
