package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/store"
)

// The buckets podbayd keeps its records in (internal/server's
// sandboxBucket and containerBucket).
const (
	sandboxBucket   = "sandboxes"
	containerBucket = "containers"
)

// Record sources.
const (
	SourceCRI      = "cri"
	SourceDatabase = "database"
	// SourceNone: no records were read (Options.NoRecords), so everything
	// of podbay's found is reported.
	SourceNone = "none"
)

// DatabasePath is where podbayd keeps its records.
func DatabasePath(cfg *config.Config) string { return filepath.Join(cfg.Root, "podbay.db") }

// DaemonPID returns the PID of the process serving the unix socket at
// path (its peer credentials), 0 when nothing accepts a connection there.
func DaemonPID(path string, timeout time.Duration) int {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return 0
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	var pid int
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// RecordsFromCRI asks the daemon serving socket for every sandbox and
// container it has (ListPodSandbox and ListContainers without filters).
func RecordsFromCRI(ctx context.Context, socket string) (*Records, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	pods, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	ctrs, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListContainers: %w", err)
	}
	r := &Records{Source: SourceCRI, Detail: socket, Sandboxes: []string{}, Containers: []string{}}
	for _, p := range pods.GetItems() {
		r.Sandboxes = append(r.Sandboxes, p.GetId())
	}
	for _, c := range ctrs.GetContainers() {
		r.Containers = append(r.Containers, c.GetId())
	}
	return r, nil
}

// RecordsFromDatabase reads the record keys of a stopped daemon's
// database, read-only, waiting at most timeout for its lock. With no
// database there are no records.
func RecordsFromDatabase(path string, timeout time.Duration) (*Records, error) {
	r := &Records{Source: SourceDatabase, Detail: path, Sandboxes: []string{}, Containers: []string{}}
	db, err := store.OpenReadOnly(path, timeout)
	if errors.Is(err, fs.ErrNotExist) {
		r.Detail = path + " (absent: no records)"
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, b := range []struct {
		bucket string
		dst    *[]string
	}{{sandboxBucket, &r.Sandboxes}, {containerBucket, &r.Containers}} {
		keys, err := db.Keys(b.bucket)
		if err != nil {
			return nil, fmt.Errorf("read %s records: %w", b.bucket, err)
		}
		*b.dst = append(*b.dst, keys...)
	}
	return r, nil
}

// LoadRecords asks the running daemon when its socket answers, else reads
// the database.
func LoadRecords(ctx context.Context, cfg *config.Config, daemonPID int, timeout time.Duration) (*Records, error) {
	if daemonPID != 0 {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r, err := RecordsFromCRI(ctx, cfg.Listen)
		if err == nil {
			return r, nil
		}
		return nil, fmt.Errorf("podbayd (pid %d) accepts connections on %s but does not answer: %w", daemonPID, cfg.Listen, err)
	}
	r, err := RecordsFromDatabase(DatabasePath(cfg), timeout)
	if errors.Is(err, store.ErrHeld) {
		return nil, fmt.Errorf("%w; nothing answers on %s: is podbayd starting, or serving another socket?", err, cfg.Listen)
	}
	return r, err
}
