package ocifeatures

import "testing"

func TestParseSpecVersion(t *testing.T) {
	for _, tc := range []struct {
		name, out, want string
		fails           bool
	}{
		{"runc 1.1.5", "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\ngo: go1.19.8\nlibseccomp: 2.5.4\n", "1.0.2-dev", false},
		{"crun 1.8.1", "crun version 1.8.1\ncommit: f8a096be060b22ccd3d5f3ebe44108517fbf6c30\nrundir: /run/crun\nspec: 1.0.0\n+SYSTEMD +SELINUX +APPARMOR +CAP +SECCOMP +EBPF +CRIU +YAJL\n", "1.0.0", false},
		{"no spec line", "some-runtime 0.1\n", "", true},
		{"empty spec line", "spec:\n", "", true},
		{"garbage after spec", "spec: 1.0 and more\n", "", true},
	} {
		got, err := ParseSpecVersion(tc.out)
		if (err != nil) != tc.fails || got != tc.want {
			t.Errorf("%s: %q, %v; want %q (fails %v)", tc.name, got, err, tc.want, tc.fails)
		}
	}
}
