package systemd

import (
	"errors"
	"testing"
)

func TestExpandSlice(t *testing.T) {
	for in, want := range map[string]string{
		"-.slice":        "/",
		"podbay.slice":   "/podbay.slice",
		"a-b-c.slice":    "/a.slice/a-b.slice/a-b-c.slice",
		"system.slice":   "/system.slice",
		"kubepods.slice": "/kubepods.slice",
		// cgroupfs-style paths count as their last element, as containerd
		// and CRI-O take them (critest sends /test.slice).
		"/test.slice": "/test.slice",
		"/kubepods.slice/kubepods-burstable.slice": "/kubepods.slice/kubepods-burstable.slice",
		"a/b.slice": "/b.slice",
		"kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice": "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice",
	} {
		got, err := ExpandSlice(in)
		if err != nil || got != want {
			t.Errorf("ExpandSlice(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ".slice", "/podbay", "podbay", "a--b.slice", "-a.slice", "a-.slice", "a/b", "/", "/a.slice/b", "podbay.scope"} {
		if got, err := ExpandSlice(bad); err == nil {
			t.Errorf("ExpandSlice(%q) = %q, want an error", bad, got)
		}
		if CheckSlice(bad) == nil {
			t.Errorf("CheckSlice(%q) accepted it", bad)
		}
	}
}

func TestLayout(t *testing.T) {
	const pod = "kubepods-besteffort-podabc.slice"
	sd := Layout{Systemd: true}
	if got := sd.SpecPath(pod, "c1"); got != "kubepods-besteffort-podabc.slice:podbay:c1" {
		t.Errorf("SpecPath = %q", got)
	}
	if got := sd.SpecPath("/test.slice", "c1"); got != "test.slice:podbay:c1" {
		t.Errorf("SpecPath(/test.slice) = %q", got)
	}
	if got := sd.Dir(pod, "c1"); got != "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc.slice/podbay-c1.scope" {
		t.Errorf("Dir = %q", got)
	}
	if got := sd.ParentDir(pod); got != "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc.slice" {
		t.Errorf("ParentDir = %q", got)
	}
	if sd.Dir("/kubepods", "c1") != "" || sd.ParentDir("/kubepods") != "" {
		t.Error("a cgroupfs parent under systemd maps to a path")
	}
	fs := Layout{}
	if fs.SpecPath("/kubepods/pod1", "c1") != "/kubepods/pod1/podbay-c1" || fs.Dir("/kubepods/pod1", "c1") != "/kubepods/pod1/podbay-c1" ||
		fs.ParentDir("/kubepods/pod1") != "/kubepods/pod1" {
		t.Error("cgroupfs layout changed")
	}
	if ScopeName("c1") != "podbay-c1.scope" {
		t.Error(ScopeName("c1"))
	}
}

func TestParseSpecPath(t *testing.T) {
	for in, want := range map[string][2]string{
		"kubepods-pod1.slice:podbay:c1": {"kubepods-pod1.slice", "podbay-c1.scope"},
		":podbay:c1":                    {"system.slice", "podbay-c1.scope"},
		"a.slice::c1":                   {"a.slice", "c1.scope"},
		"a.slice:x:b.slice":             {"a.slice", "b.slice"},
	} {
		slice, unit, ok := ParseSpecPath(in)
		if !ok || slice != want[0] || unit != want[1] {
			t.Errorf("ParseSpecPath(%q) = %q %q %v, want %v", in, slice, unit, ok, want)
		}
	}
	for _, p := range []string{"/podbay/podbay-c1", "a:b", ""} {
		if _, _, ok := ParseSpecPath(p); ok {
			t.Errorf("ParseSpecPath(%q) ok", p)
		}
	}
}

func TestResolve(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	for _, tc := range []struct {
		in     string
		booted func() bool
		want   string
		err    bool
	}{
		{"auto", yes, "systemd", false}, {"auto", no, "cgroupfs", false},
		{"systemd", yes, "systemd", false}, {"systemd", no, "", true},
		{"cgroupfs", yes, "cgroupfs", false}, {"cgroupfs", no, "cgroupfs", false},
		{"", yes, "", true},
	} {
		got, err := Resolve(tc.in, tc.booted)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("Resolve(%q, booted %v) = %q, %v", tc.in, tc.booted(), got, err)
		}
	}
}

func TestBrokenBus(t *testing.T) {
	if brokenBus(errors.New("x")) {
		t.Error("a plain error is a broken bus")
	}
}
