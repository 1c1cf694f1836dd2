package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/podbay/podbay/internal/pullprogress"
)

// maxPullsResponse bounds the answer of podbay.v1.Pulls/List; podbayd
// keeps it well under (16 pulls in flight and 16 finished listed).
const maxPullsResponse = 16 << 20

// fetchPulls asks podbayd for its pulls in flight.
func fetchPulls(ctx context.Context, conn grpc.ClientConnInterface) (pullprogress.Snapshot, error) {
	var snap pullprogress.Snapshot
	resp := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, pullprogress.ListMethod, &emptypb.Empty{}, resp, grpc.MaxCallRecvMsgSize(maxPullsResponse)); err != nil {
		return snap, fmt.Errorf("list pulls: %w", err)
	}
	if err := json.Unmarshal([]byte(resp.GetValue()), &snap); err != nil {
		return snap, fmt.Errorf("list pulls: decode: %w", err)
	}
	return snap, nil
}

// pulls is `podbay pulls [--json] [--watch]`.
func pulls(conn grpc.ClientConnInterface, timeout time.Duration, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pulls", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the daemon's answer as JSON")
	watch := fs.Bool("watch", false, "print again every --interval until no pull is in flight (or Ctrl-C)")
	interval := fs.Duration("interval", time.Second, "how often --watch asks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fetch := func() (pullprogress.Snapshot, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return fetchPulls(ctx, conn)
	}
	show := func(s pullprogress.Snapshot) error {
		if *asJSON {
			return printPullsJSON(out, s, *watch)
		}
		return printPullsTable(out, s)
	}
	if !*watch {
		s, err := fetch()
		if err != nil {
			return err
		}
		return show(s)
	}
	return watchPulls(ctx, out, *interval, fetch, show)
}

// watchPulls prints what fetch returns every interval until no pull is
// in flight or ctx ends. On a terminal each print replaces the last;
// elsewhere (a pipe, a file) they follow one another, a blank line apart.
func watchPulls(ctx context.Context, out io.Writer, interval time.Duration,
	fetch func() (pullprogress.Snapshot, error), show func(pullprogress.Snapshot) error) error {
	tty := isTerminal(out)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for first := true; ; first = false {
		s, err := fetch()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch {
		case tty:
			fmt.Fprint(out, "\x1b[H\x1b[2J")
		case !first:
			fmt.Fprintln(out)
		}
		if err := show(s); err != nil {
			return err
		}
		if inFlight(s) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func inFlight(s pullprogress.Snapshot) int {
	n := s.OmittedInFlight
	for _, p := range s.Pulls {
		if p.State == pullprogress.PullRunning {
			n++
		}
	}
	return n
}

func printPullsJSON(out io.Writer, s pullprogress.Snapshot, compact bool) error {
	var b []byte
	var err error
	if compact {
		b, err = json.Marshal(s) // one line an interval
	} else {
		b, err = json.MarshalIndent(s, "", "    ")
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

// printPullsTable prints one line a pull: layers done of all, bytes
// fetched of the layers to fetch, the rate over the last seconds, the time
// left at that rate, and for how long nothing arrived.
func printPullsTable(out io.Writer, s pullprogress.Snapshot) error {
	if len(s.Pulls) == 0 {
		_, err := fmt.Fprintln(out, "no pulls in flight or finished in the last minute")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REF\tLAYERS\tFETCHED/TOTAL\t%\tRATE\tETA\tSTALLED\tSTATE")
	for _, p := range s.Pulls {
		total, pct, eta := "?", "-", "-"
		if p.Size >= 0 {
			total = humanBytes(p.Size)
			if p.Size > 0 {
				pct = fmt.Sprintf("%.0f%%", 100*float64(p.Fetched)/float64(p.Size))
			}
			if p.RateBytesPerSecond > 0 && p.State == pullprogress.PullRunning {
				eta = (time.Duration(float64(p.Size-p.Fetched)/float64(p.RateBytesPerSecond)) * time.Second).Round(time.Second).String()
			}
		}
		rate, stalled := "-", "-"
		if p.State == pullprogress.PullRunning {
			rate = humanBytes(p.RateBytesPerSecond) + "/s"
		}
		if !p.StalledSince.IsZero() {
			stalled = s.Time.Sub(p.StalledSince).Round(time.Second).String()
		}
		state := p.State
		if p.Error != "" {
			state += ": " + truncate(p.Error, 80)
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%s/%s\t%s\t%s\t%s\t%s\t%s\n", p.ImageRef, p.LayersDone, len(p.Layers),
			humanBytes(p.Fetched), total, pct, rate, eta, stalled, state)
	}
	if s.OmittedInFlight > 0 {
		fmt.Fprintf(w, "(%d more pulls in flight not listed)\n", s.OmittedInFlight)
	}
	return w.Flush()
}

// humanBytes is n in binary units: 512B, 1.5KiB, 3.2GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
