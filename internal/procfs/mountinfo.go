package procfs

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)    (10)         (11)
type Mount struct {
	// Root is the directory of the file system mounted (4), Point where
	// it is mounted (5), both unescaped.
	Root, Point string
	// Options are the mount's own options (6).
	Options string
	// FSType (9), Source (10) and SuperOptions (11) follow the "-".
	FSType, Source, SuperOptions string
}

// ParseMountinfo parses a mountinfo file. A line without the "-"
// separator or with too few fields is skipped.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, tail := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(tail) < 1 {
			continue
		}
		m := Mount{Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: tail[0]}
		if len(f) > 5 {
			m.Options = f[5]
		}
		if len(tail) > 1 {
			m.Source = tail[1]
		}
		if len(tail) > 2 {
			m.SuperOptions = tail[2]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Unescape undoes the octal escapes (\040 for a space, \134 for a
// backslash...) that mountinfo uses in paths.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
