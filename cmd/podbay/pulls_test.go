package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/pullprogress"
)

func testSnapshot(running bool) pullprogress.Snapshot {
	now := time.Date(2026, 12, 8, 2, 0, 0, 0, time.UTC)
	p := pullprogress.Pull{ImageRef: "example.com/llm:7b", State: pullprogress.PullDone, Size: 3 << 30, Fetched: 3 << 30,
		LayersDone: 2, Layers: make([]pullprogress.Layer, 2)}
	if running {
		p.State, p.Fetched, p.LayersDone, p.RateBytesPerSecond = pullprogress.PullRunning, 1<<30, 1, 100<<20
		p.StalledSince = now.Add(-12 * time.Second)
	}
	return pullprogress.Snapshot{Time: now, Pulls: []pullprogress.Pull{p}}
}

// The table shows layers done of all, human sizes, the percentage, the
// rate, the time left at it and for how long the pull is stalled.
func TestPullsTable(t *testing.T) {
	var out bytes.Buffer
	if err := printPullsTable(&out, testSnapshot(true)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("table:\n%s", out.String())
	}
	for _, want := range []string{"example.com/llm:7b", "1/2", "1.0GiB/3.0GiB", "33%", "100.0MiB/s", "20s", "12s", "pulling"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("line %q lacks %q", lines[1], want)
		}
	}
}

// --watch, to a pipe, prints a table per interval and stops once no pull
// is in flight.
func TestPullsWatchStops(t *testing.T) {
	answers := []pullprogress.Snapshot{testSnapshot(true), testSnapshot(true), testSnapshot(false)}
	calls := 0
	fetch := func() (pullprogress.Snapshot, error) {
		s := answers[min(calls, len(answers)-1)]
		calls++
		return s, nil
	}
	var out bytes.Buffer
	err := watchPulls(context.Background(), &out, time.Millisecond, fetch, func(s pullprogress.Snapshot) error {
		return printPullsTable(&out, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 || strings.Count(out.String(), "REF") != 3 || strings.Contains(out.String(), "\x1b[") {
		t.Errorf("%d fetches, output:\n%q\nwant 3 tables, no terminal escapes", calls, out.String())
	}
}
