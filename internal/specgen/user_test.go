package specgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

const testPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1::/:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
alice:x:1000:1000::/home/alice:/bin/sh
# a comment
not a passwd line
bob:x:notanumber:1:::
  nobody:x:65534:65534:nobody:/nonexistent:/bin/false
`

const testGroup = `root:x:0:
daemon:x:1:alice
wheel:x:10:root,alice
www-data:x:33:
staff:x:50: alice , bob
alice:x:1000:
broken:x:
nogroup:x:65534:
`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

func TestResolveUser(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root+"/etc/passwd", testPasswd)
	writeFile(t, root+"/etc/group", testGroup)
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		req  UserRequest
		want ResolvedUser
		err  bool // an invalid argument
	}{
		{"default is root", UserRequest{}, ResolvedUser{0, 0, []uint32{0, 10}}, false},
		{"name", UserRequest{ImageUser: "alice"}, ResolvedUser{1000, 1000, []uint32{1, 10, 50, 1000}}, false},
		{"uid listed in passwd", UserRequest{ImageUser: "1000"}, ResolvedUser{1000, 1000, []uint32{1, 10, 50, 1000}}, false},
		{"uid not in passwd", UserRequest{ImageUser: "4242"}, ResolvedUser{4242, 0, []uint32{0}}, false},
		{"name:group", UserRequest{ImageUser: "alice:staff"}, ResolvedUser{1000, 50, []uint32{1, 10, 50}}, false},
		{"uid:gid", UserRequest{ImageUser: "1000:33"}, ResolvedUser{1000, 33, []uint32{1, 10, 33, 50}}, false},
		{"name:gid", UserRequest{ImageUser: "www-data:1000"}, ResolvedUser{33, 1000, []uint32{1000}}, false},
		{"uid:group", UserRequest{ImageUser: "4242:www-data"}, ResolvedUser{4242, 33, []uint32{33}}, false},
		{"uid:unlisted gid", UserRequest{ImageUser: "4242:4343"}, ResolvedUser{4242, 4343, []uint32{4343}}, false},
		{"indented line", UserRequest{ImageUser: "nobody"}, ResolvedUser{65534, 65534, []uint32{65534}}, false},
		{"unknown name", UserRequest{ImageUser: "ghost"}, ResolvedUser{}, true},
		{"unparsable line is no user", UserRequest{ImageUser: "bob"}, ResolvedUser{}, true},
		{"unknown group", UserRequest{ImageUser: "alice:ghosts"}, ResolvedUser{}, true},
		{"empty group", UserRequest{ImageUser: "alice:"}, ResolvedUser{}, true},
		{"three parts", UserRequest{ImageUser: "a:b:c"}, ResolvedUser{}, true},
		{"negative uid", UserRequest{ImageUser: "-5"}, ResolvedUser{}, true},
		{"uid too large", UserRequest{ImageUser: "2147483648"}, ResolvedUser{}, true},
		{"gid too large", UserRequest{ImageUser: "0:4294967296"}, ResolvedUser{}, true},
		{"RunAsUser replaces the image user", UserRequest{ImageUser: "alice", RunAsUser: i64(33)}, ResolvedUser{33, 33, []uint32{33}}, false},
		{"RunAsUser drops the image group", UserRequest{ImageUser: "alice:staff", RunAsUser: i64(4242)}, ResolvedUser{4242, 0, []uint32{0}}, false},
		{"RunAsUser 0", UserRequest{ImageUser: "alice", RunAsUser: i64(0)}, ResolvedUser{0, 0, []uint32{0, 10}}, false},
		{"RunAsUsername", UserRequest{ImageUser: "alice", RunAsUsername: "www-data", RunAsUser: i64(1000)}, ResolvedUser{33, 33, []uint32{33}}, false},
		{"unknown RunAsUsername", UserRequest{RunAsUsername: "ghost"}, ResolvedUser{}, true},
		{"RunAsUsername with a group", UserRequest{RunAsUsername: "alice:staff"}, ResolvedUser{}, true},
		{"RunAsGroup replaces the primary group", UserRequest{ImageUser: "alice", RunAsGroup: i64(7)}, ResolvedUser{1000, 7, []uint32{1, 7, 10, 50}}, false},
		{"RunAsGroup over the image group", UserRequest{ImageUser: "alice:staff", RunAsGroup: i64(7)}, ResolvedUser{1000, 7, []uint32{1, 7, 10, 50}}, false},
		{"RunAsUser and RunAsGroup", UserRequest{RunAsUser: i64(4242), RunAsGroup: i64(4343)}, ResolvedUser{4242, 4343, []uint32{4343}}, false},
		{"supplemental groups merge", UserRequest{ImageUser: "alice", SupplementalGroups: []int64{5, 10, 10}},
			ResolvedUser{1000, 1000, []uint32{1, 5, 10, 50, 1000}}, false},
		{"strict skips /etc/group", UserRequest{ImageUser: "alice", SupplementalGroups: []int64{5}, StrictSupplementalGroups: true},
			ResolvedUser{1000, 1000, []uint32{5, 1000}}, false},
		{"negative RunAsUser", UserRequest{RunAsUser: i64(-1)}, ResolvedUser{}, true},
		{"RunAsUser too large", UserRequest{RunAsUser: i64(1 << 31)}, ResolvedUser{}, true},
		{"negative RunAsGroup", UserRequest{RunAsGroup: i64(-1)}, ResolvedUser{}, true},
		{"negative supplemental group", UserRequest{SupplementalGroups: []int64{-3}}, ResolvedUser{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveUser(root, tc.req)
			if tc.err {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("ResolveUser = %+v, %v; want an invalid argument", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.UID != tc.want.UID || got.GID != tc.want.GID || !slices.Equal(got.AdditionalGids, tc.want.AdditionalGids) {
				t.Fatalf("ResolveUser = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResolveUserWithoutEtc(t *testing.T) {
	root := t.TempDir()
	got, err := ResolveUser(root, UserRequest{ImageUser: "1000:1000"})
	if err != nil || got.UID != 1000 || got.GID != 1000 || !slices.Equal(got.AdditionalGids, []uint32{1000}) {
		t.Fatalf("numeric user without /etc: %+v, %v", got, err)
	}
	if _, err := ResolveUser(root, UserRequest{ImageUser: "alice"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("named user without /etc: %v, want an invalid argument", err)
	}
	if _, err := ResolveUser(filepath.Join(root, "missing"), UserRequest{}); err == nil {
		t.Fatal("a missing rootfs resolved")
	}
}

// TestResolveUserSymlinkEscape: an image's /etc/passwd that points outside
// the rootfs must not be read from the host.
func TestResolveUserSymlinkEscape(t *testing.T) {
	tmp := t.TempDir()
	// On the host, outside the rootfs: alice would be root.
	writeFile(t, tmp+"/outside/passwd", "alice:x:0:0::/:/bin/sh\n")

	t.Run("absolute", func(t *testing.T) {
		root := tmp + "/abs"
		symlink(t, tmp+"/outside/passwd", root+"/etc/passwd")
		if u, err := ResolveUser(root, UserRequest{ImageUser: "alice"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("ResolveUser = %+v, %v: read the host's file", u, err)
		}
	})
	t.Run("relative", func(t *testing.T) {
		root := tmp + "/rel"
		symlink(t, "../../../../../outside/passwd", root+"/etc/passwd")
		writeFile(t, root+"/outside/passwd", "alice:x:1234:1234::/:/bin/sh\n")
		u, err := ResolveUser(root, UserRequest{ImageUser: "alice"})
		if err != nil || u.UID != 1234 {
			t.Fatalf("ResolveUser = %+v, %v; want the rootfs's alice (1234)", u, err)
		}
	})
}

func TestReadFileInRoot(t *testing.T) {
	openers := map[string]func(rootFd int, name string) (int, error){
		"openat2":  openInRoot,
		"fallback": openInRootFallback,
	}
	for _, tc := range []struct {
		name string
		path string
		// setup builds root; outside is a host directory next to it that
		// holds a file "secret".
		setup func(t *testing.T, root, outside string)
		want  string
		// err: "notexist", or "other" for any error that is not a missing file.
		err string
	}{
		{"plain file", "/etc/passwd", func(t *testing.T, root, _ string) {
			writeFile(t, root+"/etc/passwd", "in")
		}, "in", ""},
		{"absolute symlink out of the root", "/etc/passwd", func(t *testing.T, root, outside string) {
			symlink(t, outside+"/secret", root+"/etc/passwd")
		}, "", "notexist"},
		{"absolute symlink resolves inside the root", "/etc/passwd", func(t *testing.T, root, outside string) {
			symlink(t, outside+"/secret", root+"/etc/passwd")
			writeFile(t, root+outside+"/secret", "in")
		}, "in", ""},
		{"relative symlink climbing out", "/etc/passwd", func(t *testing.T, root, outside string) {
			symlink(t, "../../../../../../../../"+filepath.Base(outside)+"/secret", root+"/etc/passwd")
		}, "", "notexist"},
		{"relative symlink climbing out stops at the root", "/etc/passwd", func(t *testing.T, root, outside string) {
			symlink(t, "../../../../../../../../"+filepath.Base(outside)+"/secret", root+"/etc/passwd")
			writeFile(t, root+"/"+filepath.Base(outside)+"/secret", "in")
		}, "in", ""},
		{"symlinked directory, absolute", "/etc/passwd", func(t *testing.T, root, _ string) {
			symlink(t, "/real-etc", root+"/etc")
			writeFile(t, root+"/real-etc/passwd", "in")
		}, "in", ""},
		{"symlinked directory climbing out", "/etc/secret", func(t *testing.T, root, outside string) {
			symlink(t, "../../"+filepath.Base(outside), root+"/etc")
		}, "", "notexist"},
		{"chain of symlinks", "/etc/passwd", func(t *testing.T, root, _ string) {
			symlink(t, "passwd2", root+"/etc/passwd")
			symlink(t, "/lib/../etc/passwd3", root+"/etc/passwd2")
			writeFile(t, root+"/etc/passwd3", "in")
			if err := os.MkdirAll(root+"/lib", 0o755); err != nil {
				t.Fatal(err)
			}
		}, "in", ""},
		{"dot-dot in the name", "/../../etc/./passwd", func(t *testing.T, root, _ string) {
			writeFile(t, root+"/etc/passwd", "in")
		}, "in", ""},
		{"symlink loop", "/etc/passwd", func(t *testing.T, root, _ string) {
			symlink(t, "passwd", root+"/etc/passwd")
		}, "", "other"},
		{"missing file", "/etc/passwd", func(t *testing.T, root, _ string) {
			writeFile(t, root+"/etc/group", "")
		}, "", "notexist"},
		{"missing directory", "/etc/passwd", func(*testing.T, string, string) {}, "", "notexist"},
		{"a directory", "/etc/passwd", func(t *testing.T, root, _ string) {
			if err := os.MkdirAll(root+"/etc/passwd", 0o755); err != nil {
				t.Fatal(err)
			}
		}, "", "other"},
		{"a file where a directory should be", "/etc/passwd", func(t *testing.T, root, _ string) {
			writeFile(t, root+"/etc", "")
		}, "", "other"},
		{"a FIFO does not block", "/etc/passwd", func(t *testing.T, root, _ string) {
			if err := os.MkdirAll(root+"/etc", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(root+"/etc/passwd", 0o644); err != nil {
				t.Fatal(err)
			}
		}, "", "other"},
		{"a symlink to a host device", "/etc/passwd", func(t *testing.T, root, _ string) {
			symlink(t, "/dev/zero", root+"/etc/passwd")
		}, "", "notexist"},
	} {
		for opener, open := range openers {
			t.Run(tc.name+"/"+opener, func(t *testing.T) {
				tmp := t.TempDir()
				root, outside := tmp+"/root", tmp+"/outside"
				writeFile(t, outside+"/secret", "host secret")
				if err := os.MkdirAll(root, 0o755); err != nil {
					t.Fatal(err)
				}
				tc.setup(t, root, outside)
				rootFd, err := openRoot(root)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(rootFd)
				var got []byte
				fd, err := open(rootFd, tc.path)
				if err == nil {
					got, err = readFd(fd, tc.path)
				}
				switch tc.err {
				case "":
					if err != nil || string(got) != tc.want {
						t.Fatalf("read %q, %v; want %q", got, err, tc.want)
					}
				case "notexist":
					if !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("read %q, %v; want a missing file", got, err)
					}
				default:
					if err == nil || errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("read %q, %v; want an error other than a missing file", got, err)
					}
				}
			})
		}
	}
}

func TestParsePasswdAndGroup(t *testing.T) {
	users := parsePasswd([]byte(testPasswd))
	var names []string
	for _, u := range users {
		names = append(names, u.name)
	}
	if !slices.Equal(names, []string{"root", "daemon", "www-data", "alice", "nobody"}) {
		t.Errorf("users %v", names)
	}
	groups := parseGroup([]byte(testGroup))
	i := slices.IndexFunc(groups, func(g groupEntry) bool { return g.name == "staff" })
	if i < 0 || groups[i].gid != 50 || !slices.Equal(groups[i].members, []string{"alice", "bob"}) {
		t.Errorf("staff group %+v", groups)
	}
	if slices.ContainsFunc(groups, func(g groupEntry) bool { return g.name == "broken" }) {
		t.Error("a group line without a gid was kept")
	}
	if parsePasswd(nil) != nil || parseGroup(nil) != nil {
		t.Error("empty files gave entries")
	}
}

// TestSecuritySupplementalGroupCount: more supplemental groups than
// setgroups(2) takes are refused before a spec is built, not by the
// runtime at create; NGROUPS_MAX with the primary group is fine.
func TestSecuritySupplementalGroupCount(t *testing.T) {
	many := func(n int) []int64 {
		g := make([]int64, n)
		for i := range g {
			g[i] = int64(i + 1)
		}
		return g
	}
	if _, err := resolveUser(UserRequest{SupplementalGroups: many(maxGroups - 1)}, nil, nil); err != nil {
		t.Errorf("%d groups and gid 0: %v", maxGroups-1, err)
	}
	for _, n := range []int{maxGroups, 100_000} {
		if _, err := resolveUser(UserRequest{SupplementalGroups: many(n)}, nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%d groups and gid 0: %v, want an invalid argument", n, err)
		}
	}
}

// An image's files of millions of lines resolve as small ones do, keeping
// only the entries the user selects; a user listed in more groups than a
// process can have is refused.
func TestResolveUserLargeFiles(t *testing.T) {
	root := t.TempDir()
	var passwd, group strings.Builder
	passwd.WriteString("root:x:0:0::/:/bin/sh\n")
	for i := range 500000 {
		fmt.Fprintf(&passwd, "u%d:x:%d:%d::/:\n", i, 10000+i%50, 10000+i%50)
	}
	passwd.WriteString("last:x:4242:4242::/:/bin/sh\n")
	for i := range 500000 {
		fmt.Fprintf(&group, "g%d:x:%d:last\n", i, 20000+i%3)
	}
	writeFile(t, filepath.Join(root, "etc/passwd"), passwd.String())
	writeFile(t, filepath.Join(root, "etc/group"), group.String())
	u, err := ResolveUser(root, UserRequest{ImageUser: "last"})
	if err != nil || u.UID != 4242 || u.GID != 4242 || !slices.Equal(u.AdditionalGids, []uint32{4242, 20000, 20001, 20002}) {
		t.Errorf("ResolveUser(last) = %+v, %v", u, err)
	}
	u, err = ResolveUser(root, UserRequest{ImageUser: "10007"})
	if err != nil || u.UID != 10007 || u.GID != 10007 {
		t.Errorf("ResolveUser(10007) = %+v, %v; want the first entry with that uid", u, err)
	}

	group.Reset()
	for i := range maxGroups + 1 {
		fmt.Fprintf(&group, "g%d:x:%d:last\n", i, 100000+i)
	}
	writeFile(t, filepath.Join(root, "etc/group"), group.String())
	if _, err := ResolveUser(root, UserRequest{ImageUser: "last"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("user in %d groups: %v, want InvalidArgument", maxGroups+1, err)
	}
	writeFile(t, filepath.Join(root, "etc/passwd"), strings.Repeat("x", maxRootFileSize+1))
	if _, err := ResolveUser(root, UserRequest{ImageUser: "0"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("oversized /etc/passwd: %v, want InvalidArgument", err)
	}
}
