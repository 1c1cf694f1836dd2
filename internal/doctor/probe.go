package doctor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/config"
)

// Probe is what the host checks read of the machine. Host is the real one;
// the tests use a fake.
type Probe interface {
	// LookPath resolves a binary the way podbayd does (config.LookPath).
	LookPath(name string) (string, error)
	// Output runs a command (a --version) and returns its output.
	Output(name string, args ...string) (string, error)
	ReadFile(path string) ([]byte, error)
	Stat(path string) (fs.FileInfo, error)
	// Statfs returns the file system type (magic) and the bytes free for
	// an unprivileged user at path.
	Statfs(path string) (fsType int64, free uint64, err error)
	// Writable reports whether this process may create files in dir.
	Writable(dir string) error
	// PidfdOpen tries pidfd_open(2) on this process.
	PidfdOpen() error
	// TCPListeners lists the listening TCP sockets and who holds them.
	TCPListeners() ([]Listener, error)
}

// Listener is a listening TCP socket.
type Listener struct {
	Addr netip.AddrPort
	// PID and Comm are the process holding it (0 and "" when not found).
	PID  int
	Comm string
}

// Host is the Probe of this machine.
type Host struct{}

var _ Probe = Host{}

// commandTimeout bounds each --version a check runs.
const commandTimeout = 5 * time.Second

// LookPath is config.LookPath.
func (Host) LookPath(name string) (string, error) { return config.LookPath(name) }

// Output runs name with args, bounded by commandTimeout.
func (Host) Output(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, firstLine(string(out)))
	}
	return string(out), nil
}

// ReadFile is os.ReadFile.
func (Host) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// Stat is os.Stat.
func (Host) Stat(path string) (fs.FileInfo, error) { return os.Stat(path) }

// Statfs is statfs(2).
func (Host) Statfs(path string) (int64, uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Type), st.Bavail * uint64(st.Bsize), nil
}

// Writable is access(dir, W_OK|X_OK).
func (Host) Writable(dir string) error { return unix.Access(dir, unix.W_OK|unix.X_OK) }

// PidfdOpen opens and closes a pidfd of this process.
func (Host) PidfdOpen() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// TCPListeners reads /proc/net/tcp and tcp6 for listening sockets and finds
// their holders through /proc/*/fd.
func (Host) TCPListeners() ([]Listener, error) {
	var out []Listener
	inodes := map[string][]int{} // socket inode → indexes in out
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, l := range parseProcNetTCP(data) {
			inodes[l.inode] = append(inodes[l.inode], len(out))
			out = append(out, Listener{Addr: l.addr})
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			for _, i := range inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				if out[i].PID == 0 {
					comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
					out[i].PID, out[i].Comm = pid, strings.TrimSpace(string(comm))
				}
			}
		}
	}
	return out, nil
}

type procNetListener struct {
	addr  netip.AddrPort
	inode string
}

// parseProcNetTCP returns the LISTEN (state 0A) sockets of a /proc/net/tcp
// or tcp6 table. Addresses are hex in host byte order per 32-bit word.
func parseProcNetTCP(data []byte) []procNetListener {
	var out []procNetListener
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		hostHex, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			continue
		}
		raw, err := hexWords(hostHex)
		if err != nil {
			continue
		}
		addr, ok := netip.AddrFromSlice(raw)
		if !ok {
			continue
		}
		out = append(out, procNetListener{addr: netip.AddrPortFrom(addr.Unmap(), uint16(port)), inode: f[9]})
	}
	return out
}

// hexWords decodes the kernel's address format: 32-bit words in hex, each
// in the host's (little-endian) byte order.
func hexWords(s string) ([]byte, error) {
	if len(s)%8 != 0 {
		return nil, fmt.Errorf("bad address %q", s)
	}
	out := make([]byte, 0, len(s)/2)
	for i := 0; i < len(s); i += 8 {
		w, err := strconv.ParseUint(s[i:i+8], 16, 32)
		if err != nil {
			return nil, err
		}
		out = append(out, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	return out, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
