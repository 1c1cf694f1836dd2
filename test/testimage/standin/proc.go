package standin

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// pgrep is procps's pgrep, reduced: `pgrep [-flx] PATTERN` prints the PID of
// every process whose name (/proc/PID/comm; with -f the whole command line)
// matches the extended regular expression PATTERN, one per line, itself
// excluded; -x matches the whole name only, -l adds the name. Exit status 0
// when something matched, 1 when nothing did, 2 on a usage error — what
// `sh -c "pgrep sleep || true"` in the exec-timeout spec relies on: empty
// output once the timed-out sleep is gone.
func pgrep(env Env) int {
	var full, exact, long bool
	args := env.Args[1:]
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		a := args[0]
		args = args[1:]
		if a == "--" {
			break
		}
		for _, c := range a[1:] {
			switch c {
			case 'f':
				full = true
			case 'x':
				exact = true
			case 'l':
				long = true
			default:
				fmt.Fprintf(env.Stderr, "pgrep: unknown option -%c\nusage: pgrep [-flx] PATTERN\n", c)
				return 2
			}
		}
	}
	if len(args) != 1 {
		fmt.Fprintln(env.Stderr, "usage: pgrep [-flx] PATTERN")
		return 2
	}
	pattern := args[0]
	if exact {
		pattern = "^(?:" + pattern + ")$"
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		fmt.Fprintf(env.Stderr, "pgrep: %v\n", err)
		return 2
	}
	procs, err := listProcs(env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "pgrep: %v\n", err)
		return 2
	}
	self := os.Getpid()
	found := false
	for _, p := range procs {
		if p.pid == self {
			continue
		}
		subject := p.comm
		if full && p.cmdline != "" {
			subject = p.cmdline
		}
		if !re.MatchString(subject) {
			continue
		}
		found = true
		if long {
			fmt.Fprintf(env.Stdout, "%d %s\n", p.pid, subject)
		} else {
			fmt.Fprintf(env.Stdout, "%d\n", p.pid)
		}
	}
	if !found {
		return 1
	}
	return 0
}

// proc is one process of /proc.
type proc struct {
	pid     int
	comm    string // the name, as /proc/PID/comm has it (15 bytes at most)
	cmdline string // arguments joined by spaces; "" for kernel threads
}

// listProcs reads every process in /proc, ordered by PID. A process that
// exits while it is read is left out.
func listProcs(env Env) ([]proc, error) {
	dir := env.path("/proc")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		comm, err := os.ReadFile(path.Join(dir, e.Name(), "comm"))
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(path.Join(dir, e.Name(), "cmdline"))
		cmd = bytes.TrimRight(cmd, "\x00")
		out = append(out, proc{
			pid:     pid,
			comm:    strings.TrimSuffix(string(comm), "\n"),
			cmdline: string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out, nil
}

// ipcs is util-linux's ipcs, reduced: `ipcs [-m|-q|-s|-a]` prints the System
// V shared memory segments, message queues and semaphore arrays of the IPC
// namespace it runs in, read from /proc/sysvipc, in util-linux's default
// format (the HostIpc specs look for a segment ID in `ipcs -m`).
func ipcs(env Env) int {
	show := map[byte]bool{}
	for _, a := range env.Args[1:] {
		if len(a) < 2 || a[0] != '-' {
			fmt.Fprintf(env.Stderr, "ipcs: unexpected argument %q\nusage: ipcs [-m|-q|-s|-a]\n", a)
			return 1
		}
		for _, c := range []byte(a[1:]) {
			switch c {
			case 'm', 'q', 's':
				show[c] = true
			case 'a':
				show['m'], show['q'], show['s'] = true, true, true
			default:
				fmt.Fprintf(env.Stderr, "ipcs: unknown option -%c\nusage: ipcs [-m|-q|-s|-a]\n", c)
				return 1
			}
		}
	}
	if len(show) == 0 {
		show['m'], show['q'], show['s'] = true, true, true
	}
	users := readUsers(env)
	sections := []struct {
		flag   byte
		file   string
		title  string
		header string
		row    func(f map[string]string, owner string) string
	}{
		{'q', "msg", "Message Queues", "key        msqid      owner      perms      used-bytes   messages    ",
			func(f map[string]string, owner string) string {
				return fmt.Sprintf("%s %-10s %-10s %-10s %-12s %-12s", ipcKey(f["key"]), f["msqid"], owner, perms(f["perms"]), f["cbytes"], f["qnum"])
			}},
		{'m', "shm", "Shared Memory Segments", "key        shmid      owner      perms      bytes      nattch     status      ",
			func(f map[string]string, owner string) string {
				return fmt.Sprintf("%s %-10s %-10s %-10s %-10s %-10s %-12s", ipcKey(f["key"]), f["shmid"], owner, perms(f["perms"]), f["size"], f["nattch"], shmStatus(f["perms"]))
			}},
		{'s', "sem", "Semaphore Arrays", "key        semid      owner      perms      nsems     ",
			func(f map[string]string, owner string) string {
				return fmt.Sprintf("%s %-10s %-10s %-10s %-10s", ipcKey(f["key"]), f["semid"], owner, perms(f["perms"]), f["nsems"])
			}},
	}
	status := 0
	for _, s := range sections {
		if !show[s.flag] {
			continue
		}
		rows, err := readSysvipc(env.path(path.Join("/proc/sysvipc", s.file)))
		if err != nil {
			fmt.Fprintf(env.Stderr, "ipcs: %v\n", err)
			status = 1
			continue
		}
		fmt.Fprintf(env.Stdout, "\n------ %s --------\n%s\n", s.title, s.header)
		for _, r := range rows {
			owner := r["uid"]
			if name, ok := users[owner]; ok {
				owner = name
			}
			fmt.Fprintln(env.Stdout, s.row(r, owner))
		}
		fmt.Fprintln(env.Stdout)
	}
	return status
}

// readSysvipc parses a /proc/sysvipc table: a header line of column names,
// then one line per object.
func readSysvipc(file string) ([]map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	var cols []string
	var rows []map[string]string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if cols == nil {
			cols = fields
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			if i < len(fields) {
				row[c] = fields[i]
			}
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return rows, nil
}

// ipcKey formats the decimal (signed) key of /proc/sysvipc as ipcs does.
func ipcKey(s string) string {
	k, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return fmt.Sprintf("0x%08x", uint32(k))
}

// perms drops the status bits from the octal mode of /proc/sysvipc.
func perms(s string) string {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return s
	}
	return strconv.FormatUint(m&0o777, 8)
}

// shmStatus is the status column of a segment: dest (marked for removal)
// and locked, from the mode's SHM_DEST (01000) and SHM_LOCKED (02000) bits.
func shmStatus(s string) string {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return ""
	}
	var out []string
	if m&0o1000 != 0 {
		out = append(out, "dest")
	}
	if m&0o2000 != 0 {
		out = append(out, "locked")
	}
	return strings.Join(out, " ")
}

// readUsers maps UIDs to names from the image's /etc/passwd; none when it
// cannot be read.
func readUsers(env Env) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile(env.path("/etc/passwd"))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if _, dup := out[f[2]]; !dup {
			out[f[2]] = f[0]
		}
	}
	return out
}
