package cgroups

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestParseCounter(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   uint64
		wantOK bool
	}{
		{"0", 0, true},
		{"4096", 4096, true},
		{"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", math.MaxUint64, true}, // saturates
		{"99999999999999999999999", math.MaxUint64, true},
		{"9223372036854771712", 9223372036854771712, true},
		{"-4096", 0, true}, // per-CPU drift, seen in memory.stat
		{"-99999999999999999999999", 0, true},
		{"max", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"12k", 0, false},
		{"+5", 0, false},
	} {
		got, ok := parseCounter(tc.in)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("parseCounter(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"max\n", 0, false},
		{"536870912\n", 536870912, false},
		{"9223372036854771712\n", 0, false}, // v1 unset, 4 KiB pages
		{"9223372036854710272\n", 0, false}, // v1 unset, 64 KiB pages
		{"9223372036852678656\n", 9223372036852678656, false},
		{"18446744073709551615\n", 0, false},
		{"1024", 1024, false},
		{"unlimited\n", 0, true},
		{"\n", 0, true},
	} {
		got, err := parseLimit("memory.max", []byte(tc.in))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseLimit(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseKeyed(t *testing.T) {
	in := "cache 10371072\n" +
		"rss  7847936\n" + // extra blank between fields
		"total_inactive_file -8192\n" +
		"hierarchical_memory_limit 9223372036854771712\n" +
		"huge 18446744073709551615\n" +
		"too_huge 18446744073709551616\n" +
		"some_future_field 1 2\n" +
		"text_field abc\n" +
		"lonely\n" +
		"\n" +
		"pgfault 108980" // no final newline
	got := parseKeyed([]byte(in))
	want := map[string]uint64{
		"cache":                     10371072,
		"rss":                       7847936,
		"total_inactive_file":       0,
		"hierarchical_memory_limit": 9223372036854771712,
		"huge":                      math.MaxUint64,
		"too_huge":                  math.MaxUint64,
		"pgfault":                   108980,
	}
	if len(got) != len(want) {
		t.Errorf("parseKeyed = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parseKeyed[%q] = %d, want %d", k, got[k], v)
		}
	}
}

func TestParsePids(t *testing.T) {
	got, err := parsePids([]byte("1\n4242\n\n  77 \n"))
	if err != nil || !slices.Equal(got, []int{1, 4242, 77}) {
		t.Errorf("parsePids = %v, %v", got, err)
	}
	if got, err := parsePids(nil); err != nil || len(got) != 0 {
		t.Errorf("parsePids(empty) = %v, %v", got, err)
	}
	if _, err := parsePids([]byte("12\nabc\n")); err == nil {
		t.Error("parsePids accepted a non-number")
	}
}

func TestUsageNanoCores(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	sample := func(at time.Duration, usage uint64) *Stats {
		s := &Stats{Timestamp: t0.Add(at)}
		s.CPU.UsageNanos = usage
		return s
	}
	for _, tc := range []struct {
		name      string
		prev, cur *Stats
		want      uint64
	}{
		{"one core", sample(0, 5e9), sample(time.Second, 6e9), 1e9},
		{"half a core over 10s", sample(0, 0), sample(10*time.Second, 5e9), 5e8},
		{"two cores over 100ms", sample(0, 1e9), sample(100*time.Millisecond, 1.2e9), 2e9},
		{"idle", sample(0, 7), sample(time.Second, 7), 0},
		// 100 cores for an hour: du*1e9 overflows 64 bits.
		{"large delta", sample(0, 0), sample(time.Hour, 100*uint64(time.Hour)), 100e9},
		{"no previous sample", nil, sample(time.Second, 1), 0},
		{"no current sample", sample(0, 1), nil, 0},
		{"same instant", sample(time.Second, 1), sample(time.Second, 2e9), 0},
		{"clock went back", sample(time.Second, 1), sample(0, 2e9), 0},
		{"counter reset", sample(0, 9e9), sample(time.Second, 1e9), 0},
		{"saturates", sample(0, 0), sample(1, math.MaxUint64), math.MaxUint64},
	} {
		if got := UsageNanoCores(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: UsageNanoCores = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestMemoryAvailable(t *testing.T) {
	for _, tc := range []struct {
		m    MemoryStats
		want uint64
	}{
		{MemoryStats{Limit: 0, WorkingSet: 100}, 0},
		{MemoryStats{Limit: 1000, WorkingSet: 100}, 900},
		{MemoryStats{Limit: 1000, WorkingSet: 1000}, 0},
		{MemoryStats{Limit: 1000, WorkingSet: 1200}, 0},
	} {
		if got := tc.m.Available(); got != tc.want {
			t.Errorf("%+v.Available() = %d, want %d", tc.m, got, tc.want)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/kubepods/pod1/podbay-abc": "/kubepods/pod1/podbay-abc",
		"kubepods/pod1/":            "/kubepods/pod1",
		"/":                         "/",
		"/../../etc":                "/etc", // cannot climb out of the root
		"a/../../b":                 "/b",
	} {
		if got, err := cleanPath(in); err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := cleanPath(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("cleanPath(\"\") = %v, want ErrInvalidArgument", err)
	}
}

func TestReadFileClassifiesMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := readFile(dir, "memory.current")
	if !errors.Is(err, fs.ErrNotExist) || errdefs.IsNotFound(err) {
		t.Errorf("missing file in an existing cgroup: %v, want fs.ErrNotExist only", err)
	}
	if b, err := readOptional(dir, "memory.current"); b != nil || err != nil {
		t.Errorf("readOptional of a missing file = %q, %v; want nil, nil", b, err)
	}
	gone := filepath.Join(dir, "gone")
	if _, err := readFile(gone, "memory.current"); !errdefs.IsNotFound(err) {
		t.Errorf("file of a missing cgroup: %v, want ErrNotFound", err)
	}
	if _, err := readOptional(gone, "memory.current"); !errdefs.IsNotFound(err) {
		t.Errorf("optional file of a missing cgroup: %v, want ErrNotFound", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := requireDir(filepath.Join(dir, "plain")); err == nil || errdefs.IsNotFound(err) {
		t.Errorf("requireDir(file) = %v, want a non-NotFound error", err)
	}
}
