package specgen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/errdefs"
)

// UserRequest is who a container asks to run as.
type UserRequest struct {
	// ImageUser is the image config's User: "", "user", "user:group",
	// each of user and group a name or a number.
	ImageUser string
	// RunAsUsername, else RunAsUser, replaces ImageUser, group included.
	RunAsUsername string
	RunAsUser     *int64
	// RunAsGroup replaces the primary group, whichever user was chosen.
	RunAsGroup         *int64
	SupplementalGroups []int64
	// StrictSupplementalGroups leaves out the groups /etc/group lists the
	// user in (CRI's SupplementalGroupsPolicy Strict; the default, Merge,
	// includes them).
	StrictSupplementalGroups bool
}

// ResolvedUser is the identity a container's process runs with.
// AdditionalGids is sorted, free of duplicates and holds GID too.
type ResolvedUser struct {
	UID, GID       uint32
	AdditionalGids []uint32
}

// maxID is the largest uid or gid runc and containerd accept.
const maxID = 1<<31 - 1

// ResolveUser resolves a container's user against the /etc/passwd and
// /etc/group of its rootfs, read without letting symlinks or ".." leave
// rootfs. A missing file counts as empty: numeric ids still resolve, names
// do not.
func ResolveUser(rootfs string, req UserRequest) (ResolvedUser, error) {
	rootFd, err := openRoot(rootfs)
	if err != nil {
		return ResolvedUser{}, fmt.Errorf("resolve user: %w", err)
	}
	defer unix.Close(rootFd)
	passwd, err := readFileInRoot(rootFd, "/etc/passwd")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ResolvedUser{}, fmt.Errorf("read the image's /etc/passwd: %w", err)
	}
	group, err := readFileInRoot(rootFd, "/etc/group")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ResolvedUser{}, fmt.Errorf("read the image's /etc/group: %w", err)
	}
	// Only the entries the request can select are kept, so that an
	// image's file of millions of lines costs its own size and no more.
	userPart, groupPart, err := req.parts()
	if err != nil {
		return ResolvedUser{}, err
	}
	users := parsePasswdFiltered(passwd, firstOnly(func(e passwdEntry) bool { return userSelects(userPart, e) }))
	name := ""
	if len(users) > 0 {
		name = users[0].name
	}
	groups, err := memberGroups(group, groupPart, name)
	if err != nil {
		return ResolvedUser{}, err
	}
	return resolveUser(req, users, groups)
}

// memberGroups returns the groups of data a user named name (if any) and
// a group part (if any) select: the first group named groupPart and every
// group listing name, one per gid.
func memberGroups(data []byte, groupPart, name string) ([]groupEntry, error) {
	namedSeen := false
	gids := map[uint32]bool{}
	var out []groupEntry
	var tooMany bool
	eachEntry(data, 3, func(f []string) bool {
		g, ok := groupOf(f)
		if !ok {
			return true
		}
		named := !namedSeen && groupPart != "" && g.name == groupPart
		member := name != "" && slices.Contains(g.members, name)
		if !named && !member {
			return true
		}
		namedSeen = namedSeen || named
		if member && !named && gids[g.gid] {
			return true
		}
		gids[g.gid] = true
		if len(gids) > maxGroups {
			tooMany = true
			return false
		}
		out = append(out, g)
		return true
	})
	if tooMany {
		return nil, fmt.Errorf("the image's /etc/group lists user %q in more than %d groups: %w", name, maxGroups, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// firstOnly wraps keep so that it accepts its first match only.
func firstOnly[E any](keep func(E) bool) func(E) (bool, bool) {
	return func(e E) (bool, bool) {
		if keep(e) {
			return true, false
		}
		return false, true
	}
}

// userSelects reports whether the user part of a request ("0", "alice")
// names the passwd entry e, by the rule resolveUser applies: a number is
// a uid, anything else a name.
func userSelects(userPart string, e passwdEntry) bool {
	if id, err := strconv.ParseInt(userPart, 10, 64); err == nil {
		return id >= 0 && id <= maxID && uint32(id) == e.uid
	}
	return e.name == userPart
}

// parts returns the user and group parts the request selects: RunAs*
// before the image's User; "" user part means root.
func (req UserRequest) parts() (userPart, groupPart string, err error) {
	switch {
	case req.RunAsUsername != "":
		if strings.Contains(req.RunAsUsername, ":") {
			return "", "", fmt.Errorf("user name %q: %w", req.RunAsUsername, errdefs.ErrInvalidArgument)
		}
		userPart = req.RunAsUsername
	case req.RunAsUser != nil:
		if _, err := checkID(*req.RunAsUser, "uid"); err != nil {
			return "", "", err
		}
		userPart = strconv.FormatInt(*req.RunAsUser, 10)
	default:
		var more bool
		userPart, groupPart, more = strings.Cut(req.ImageUser, ":")
		if more && (strings.Contains(groupPart, ":") || groupPart == "") {
			return "", "", fmt.Errorf("image user %q: %w", req.ImageUser, errdefs.ErrInvalidArgument)
		}
	}
	if userPart == "" {
		userPart = "0"
	}
	return userPart, groupPart, nil
}

type passwdEntry struct {
	name     string
	uid, gid uint32
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// resolveUser is ResolveUser on parsed files. The rules are runc's for the
// user string (a numeric user need not be listed; its primary group is
// then 0) and containerd's for supplementary groups (the user's
// memberships are added even when a group was named).
func resolveUser(req UserRequest, users []passwdEntry, groups []groupEntry) (ResolvedUser, error) {
	userPart, groupPart, err := req.parts()
	if err != nil {
		return ResolvedUser{}, err
	}

	var u ResolvedUser
	var name string // the user's name in /etc/passwd, for its memberships
	if id, err := strconv.ParseInt(userPart, 10, 64); err == nil {
		if u.UID, err = checkID(id, "uid"); err != nil {
			return ResolvedUser{}, err
		}
		if i := slices.IndexFunc(users, func(e passwdEntry) bool { return e.uid == u.UID }); i >= 0 {
			u.GID, name = users[i].gid, users[i].name
		}
	} else {
		i := slices.IndexFunc(users, func(e passwdEntry) bool { return e.name == userPart })
		if i < 0 {
			return ResolvedUser{}, fmt.Errorf("user %q is not in the image's /etc/passwd: %w", userPart, errdefs.ErrInvalidArgument)
		}
		u.UID, u.GID, name = users[i].uid, users[i].gid, users[i].name
	}

	if groupPart != "" {
		if id, err := strconv.ParseInt(groupPart, 10, 64); err == nil {
			if u.GID, err = checkID(id, "gid"); err != nil {
				return ResolvedUser{}, err
			}
		} else {
			i := slices.IndexFunc(groups, func(g groupEntry) bool { return g.name == groupPart })
			if i < 0 {
				return ResolvedUser{}, fmt.Errorf("group %q is not in the image's /etc/group: %w", groupPart, errdefs.ErrInvalidArgument)
			}
			u.GID = groups[i].gid
		}
	}
	if req.RunAsGroup != nil {
		gid, err := checkID(*req.RunAsGroup, "gid")
		if err != nil {
			return ResolvedUser{}, err
		}
		u.GID = gid
	}

	gids := []uint32{u.GID}
	if name != "" && !req.StrictSupplementalGroups {
		for _, g := range groups {
			if slices.Contains(g.members, name) {
				gids = append(gids, g.gid)
			}
		}
	}
	if err := checkGroupCount(len(req.SupplementalGroups)); err != nil {
		return ResolvedUser{}, err
	}
	for _, g := range req.SupplementalGroups {
		gid, err := checkID(g, "supplemental gid")
		if err != nil {
			return ResolvedUser{}, err
		}
		gids = append(gids, gid)
	}
	slices.Sort(gids)
	u.AdditionalGids = slices.Compact(gids)
	// With the primary group and the image's memberships.
	if err := checkGroupCount(len(u.AdditionalGids)); err != nil {
		return ResolvedUser{}, err
	}
	return u, nil
}

func checkID(id int64, what string) (uint32, error) {
	if id < 0 || id > maxID {
		return 0, fmt.Errorf("%s %d outside [0, %d]: %w", what, id, maxID, errdefs.ErrInvalidArgument)
	}
	return uint32(id), nil
}

// maxGroups is the kernel's NGROUPS_MAX: setgroups(2) refuses more with
// EINVAL, which the runtime would report only at create. An image listing
// its user in more groups is refused too.
const maxGroups = 65536

// checkGroupCount refuses more supplemental groups than setgroups(2)
// takes, before a spec of that size is built.
func checkGroupCount(n int) error {
	if n > maxGroups {
		return fmt.Errorf("%d supplemental groups, more than the kernel's %d: %w", n, maxGroups, errdefs.ErrInvalidArgument)
	}
	return nil
}

// parsePasswd reads passwd(5) lines, skipping comments and lines it cannot
// parse, as libc does.
func parsePasswd(data []byte) []passwdEntry {
	return parsePasswdFiltered(data, func(passwdEntry) (bool, bool) { return true, true })
}

// parsePasswdFiltered is parsePasswd keeping the entries keep accepts,
// until it says to stop.
func parsePasswdFiltered(data []byte, keep func(passwdEntry) (ok, more bool)) []passwdEntry {
	var out []passwdEntry
	eachEntry(data, 4, func(f []string) bool {
		uid, err1 := strconv.ParseUint(f[2], 10, 31)
		gid, err2 := strconv.ParseUint(f[3], 10, 31)
		if f[0] == "" || err1 != nil || err2 != nil {
			return true
		}
		e := passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid)}
		ok, more := keep(e)
		if ok {
			out = append(out, e)
		}
		return more
	})
	return out
}

// parseGroup reads group(5) lines, skipping comments and lines it cannot
// parse.
func parseGroup(data []byte) []groupEntry {
	var out []groupEntry
	eachEntry(data, 3, func(f []string) bool {
		if g, ok := groupOf(f); ok {
			out = append(out, g)
		}
		return true
	})
	return out
}

// groupOf parses the fields of a group line.
func groupOf(f []string) (groupEntry, bool) {
	gid, err := strconv.ParseUint(f[2], 10, 31)
	if f[0] == "" || err != nil {
		return groupEntry{}, false
	}
	g := groupEntry{name: f[0], gid: uint32(gid)}
	if len(f) > 3 {
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				g.members = append(g.members, m)
			}
		}
	}
	return g, true
}

// eachEntry calls fn with the colon-separated fields of each line of data
// that has at least min of them, skipping blank lines and comments, until
// fn returns false. One line at a time: nothing of the whole file is kept.
func eachEntry(data []byte, min int, fn func(fields []string) bool) {
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if bytes.Count(line, []byte(":"))+1 < min {
			continue
		}
		if !fn(strings.Split(string(line), ":")) {
			return
		}
	}
}
