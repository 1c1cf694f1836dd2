package systemd

import "testing"

func TestParseIOWeight(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IOWeight
		bad  bool
	}{
		{in: "default 150", want: IOWeight{Weight: 150}},
		{in: " 200\n", want: IOWeight{Weight: 200}},
		{in: "8:16 300", want: IOWeight{Device: "8:16", Weight: 300}},
		{in: "10000", want: IOWeight{Weight: 10000}},
		{in: "0", bad: true},
		{in: "default 10001", bad: true},
		{in: "8:16 default", bad: true},
		{in: "sda 100", bad: true},
		{in: "8: 100", bad: true},
		{in: "", bad: true},
		{in: "default 1 2", bad: true},
	} {
		got, err := ParseIOWeight(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseIOWeight(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseIOWeight(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
