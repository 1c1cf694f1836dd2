package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParsePSI(t *testing.T) {
	r, err := ParsePSI("some avg10=40.48 avg60=71.42 avg300=86.16 total=7895265064\nfull avg10=0.50 avg60=0.25 avg300=0.10 total=12\n")
	if err != nil {
		t.Fatal(err)
	}
	want := PSIResource{
		Some: PSILine{Avg10: 40.48, Avg60: 71.42, Avg300: 86.16, TotalNanos: 7895265064000},
		Full: PSILine{Avg10: 0.5, Avg60: 0.25, Avg300: 0.1, TotalNanos: 12000},
	}
	if *r != want {
		t.Errorf("got %+v, want %+v", *r, want)
	}
	// cpu.pressure before Linux 5.13: no full line.
	if r, err := ParsePSI("some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n"); err != nil || r.Some.TotalNanos != 4000 || r.Full != (PSILine{}) {
		t.Errorf("some only: %+v %v", r, err)
	}
	for _, bad := range []string{"", "none avg10=1", "some avg10=x avg60=0 avg300=0 total=0", "some avg10=0 avg60=0 avg300=0", "full avg10=0 avg60=0 avg300=0 total=0", "some avg10"} {
		if _, err := ParsePSI(bad); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

func TestReadPSI(t *testing.T) {
	dir := t.TempDir()
	if p, err := readPSI(dir); p != nil || err != nil {
		t.Errorf("no pressure files: %+v, want nil", p)
	}
	line := "some avg10=1.00 avg60=2.00 avg300=3.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"
	for _, f := range []string{"cpu.pressure", "io.pressure"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := readPSI(dir)
	if err != nil || p == nil || p.CPU == nil || p.IO == nil || p.Memory != nil || p.CPU.Some.Avg60 != 2 || p.IO.Full.TotalNanos != 1000 {
		t.Errorf("cpu and io pressure: %+v", p)
	}
}
