package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scraper reads the daemon's Prometheus endpoint.
type scraper struct {
	url string
}

func (s *scraper) scrape(ctx context.Context) (metricSet, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	// Ask for the text format: the only one parseText reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.url, resp.Status)
	}
	return parseText(resp.Body)
}

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metricSet is a scrape: its samples in order, and their values by series.
type metricSet []sample

// parseText reads the Prometheus text exposition format (version 0.0.4):
// comments and blank lines are skipped; each other line is
// name[{label="value",...}] value [timestamp].
func parseText(r io.Reader) (metricSet, error) {
	var set metricSet
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		set = append(set, s)
	}
	return set, sc.Err()
}

func parseLine(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.name, line = line[:end], line[end:]
	if line[0] == '{' {
		rest, err := parseLabels(line[1:], s.labels)
		if err != nil {
			return s, err
		}
		line = rest
	}
	fields := strings.Fields(line)
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("want a value and an optional timestamp after %s, got %q", s.name, line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value of %s: %w", s.name, err)
	}
	s.value = v
	return s, nil
}

// parseLabels reads `name="value",...}` into labels and returns what
// follows the closing brace. Values may hold the escapes \\, \" and \n.
func parseLabels(in string, labels map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " \t")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.IndexByte(in, '=')
		if eq <= 0 {
			return "", fmt.Errorf("malformed labels at %q", in)
		}
		name := strings.TrimSpace(in[:eq])
		in = strings.TrimLeft(in[eq+1:], " \t")
		if !strings.HasPrefix(in, `"`) {
			return "", fmt.Errorf("value of label %s is not quoted", name)
		}
		in = in[1:]
		var val strings.Builder
		closed := false
		for i := 0; i < len(in); i++ {
			c := in[i]
			if c == '"' {
				in, closed = in[i+1:], true
				break
			}
			if c == '\\' && i+1 < len(in) {
				i++
				switch in[i] {
				case 'n':
					c = '\n'
				default:
					c = in[i]
				}
			}
			val.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("unterminated value of label %s", name)
		}
		labels[name] = val.String()
		in = strings.TrimLeft(in, " \t")
		in = strings.TrimPrefix(in, ",")
	}
}

// get returns the value of the series name{labels}, given as name/value
// pairs; ok is false when the scrape has no such series.
func (set metricSet) get(name string, labels ...string) (v float64, ok bool) {
	for _, s := range set {
		if s.name != name || len(s.labels) != len(labels)/2 {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				match = false
				break
			}
		}
		if match {
			return s.value, true
		}
	}
	return 0, false
}

// phaseKey names one series of the phase summary.
type phaseKey struct{ operation, phase string }

// phaseOrder is the order the daemon runs each operation's phases in.
var phaseOrder = map[string][]string{
	// The pairs an oci handler overlaps have a phase of their own, after
	// its two parts (each timed alone).
	"run":    {"pause_image", "prepare", "rootfs", "netns", "bundle", "cni", "runtime_create", "cni_and_create", "runtime_start", "persist"},
	"stop":   {"containers", "cni", "netns", "runtime_stop", "runtime_delete", "rootfs", "network_and_kill", "persist"},
	"remove": {"containers", "runtime_delete", "rootfs", "runtime_delete_and_rootfs", "netns", "persist"},
	// podbay_image_phase_duration_seconds: a pull, and each layer's unpacking.
	"pull": {"resolve", "manifest", "layers", "commit", "record"},
}

// phases lists the (operation, phase) series of the summary name in the
// scrape: run, stop, remove, then any other operation; phases in the order
// the daemon runs them, then any unknown phase by name.
func (set metricSet) phases(name string) []phaseKey {
	return set.phaseKeys(name, []string{"run", "stop", "remove"}, phaseOrder)
}

// phaseKeys lists the (operation, phase) series of the summary name in the
// scrape: the operations of ops in that order, then any other by name;
// within one, the phases in order[operation]'s order, then any other by
// name.
func (set metricSet) phaseKeys(name string, ops []string, order map[string][]string) []phaseKey {
	seen := map[phaseKey]bool{}
	var keys []phaseKey
	for _, s := range set {
		if s.name != name+"_count" {
			continue
		}
		k := phaseKey{s.labels["operation"], s.labels["phase"]}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	rank := func(k phaseKey) (int, int) {
		op := slices.Index(ops, k.operation)
		if op < 0 {
			op = len(ops)
		}
		ph := slices.Index(order[k.operation], k.phase)
		if ph < 0 {
			ph = len(order[k.operation])
		}
		return op, ph
	}
	slices.SortFunc(keys, func(a, b phaseKey) int {
		ao, ap := rank(a)
		bo, bp := rank(b)
		switch {
		case ao != bo:
			return ao - bo
		case a.operation != b.operation:
			return strings.Compare(a.operation, b.operation)
		case ap != bp:
			return ap - bp
		default:
			return strings.Compare(a.phase, b.phase)
		}
	})
	return keys
}
