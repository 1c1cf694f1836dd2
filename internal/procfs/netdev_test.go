package procfs

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseNetDev(t *testing.T) {
	devs, err := ParseNetDev(bytes.NewReader(readFixture(t, "net-dev")))
	if err != nil {
		t.Fatal(err)
	}
	want := []NetDev{
		{Name: "eth0", RxBytes: 2282, RxPackets: 23, RxErrors: 1, RxDropped: 2, TxBytes: 1116, TxPackets: 12, TxErrors: 3, TxDropped: 4},
		{Name: "net1", RxBytes: 18446744073709551615, RxPackets: 1, TxBytes: 5, TxPackets: 6},
	}
	if !slices.Equal(devs, want) {
		t.Errorf("ParseNetDev = %+v\nwant %+v", devs, want)
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"eth0: 1 2 3 4 5 6 7 8 9 10 11 x 13 14 15 16\n", false},  // a bad counter
		{"eth0: 1 2 3 4 5 6 7 8 9 10 11 -1 13 14 15 16\n", false}, // a negative one
		{"eth0: 1 2 3 4 5 6 7 8 9 10 11 12\n", true},              // too short: skipped
		{"no colon here\n", true},
	} {
		got, err := ParseNetDev(strings.NewReader(tc.in))
		if (err == nil) != tc.ok || (tc.ok && len(got) != 0) {
			t.Errorf("ParseNetDev(%q) = (%+v, %v), want ok %v and nothing", tc.in, got, err, tc.ok)
		}
	}
}

func TestReadNetDevSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/net/dev"); err != nil {
		t.Skip(err)
	}
	if _, err := ReadNetDev(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
