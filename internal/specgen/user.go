package specgen

import (
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
	return resolveUser(req, parsePasswd(passwd), parseGroup(group))
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
	var userPart, groupPart string
	switch {
	case req.RunAsUsername != "":
		if strings.Contains(req.RunAsUsername, ":") {
			return ResolvedUser{}, fmt.Errorf("user name %q: %w", req.RunAsUsername, errdefs.ErrInvalidArgument)
		}
		userPart = req.RunAsUsername
	case req.RunAsUser != nil:
		if _, err := checkID(*req.RunAsUser, "uid"); err != nil {
			return ResolvedUser{}, err
		}
		userPart = strconv.FormatInt(*req.RunAsUser, 10)
	default:
		var more bool
		userPart, groupPart, more = strings.Cut(req.ImageUser, ":")
		if more && (strings.Contains(groupPart, ":") || groupPart == "") {
			return ResolvedUser{}, fmt.Errorf("image user %q: %w", req.ImageUser, errdefs.ErrInvalidArgument)
		}
	}

	var u ResolvedUser
	var name string // the user's name in /etc/passwd, for its memberships
	if userPart == "" {
		userPart = "0"
	}
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
// EINVAL, which the runtime would report only at create.
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
	var out []passwdEntry
	for _, f := range fileLines(data, 4) {
		uid, err1 := strconv.ParseUint(f[2], 10, 31)
		gid, err2 := strconv.ParseUint(f[3], 10, 31)
		if f[0] == "" || err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid)})
	}
	return out
}

// parseGroup reads group(5) lines, skipping comments and lines it cannot
// parse.
func parseGroup(data []byte) []groupEntry {
	var out []groupEntry
	for _, f := range fileLines(data, 3) {
		gid, err := strconv.ParseUint(f[2], 10, 31)
		if f[0] == "" || err != nil {
			continue
		}
		g := groupEntry{name: f[0], gid: uint32(gid)}
		if len(f) > 3 {
			for _, m := range strings.Split(f[3], ",") {
				if m = strings.TrimSpace(m); m != "" {
					g.members = append(g.members, m)
				}
			}
		}
		out = append(out, g)
	}
	return out
}

// fileLines splits a colon-separated file into the fields of each line
// that has at least min of them.
func fileLines(data []byte, min int) [][]string {
	var out [][]string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if f := strings.Split(line, ":"); len(f) >= min {
			out = append(out, f)
		}
	}
	return out
}
