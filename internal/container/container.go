// Package container holds podbay's container records: what is persisted for
// each CRI container, the in-memory index with name reservation, and the
// per-container lock that keeps start, stop and remove from interleaving.
package container

import (
	"encoding/json"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbay/podbay/internal/nameindex"
	"github.com/podbay/podbay/internal/podrequest"
)

// RecordVersion is the format version of persisted records.
const RecordVersion = 1

// State is a container's lifecycle state, as the CRI names them.
type State string

// States. A container is Creating from the moment its record is first
// persisted until CreateContainer finishes; it is never listed so.
const (
	StateCreating State = "creating"
	StateCreated  State = "created"
	StateRunning  State = "running"
	StateExited   State = "exited"
)

// Exit reasons reported by ContainerStatus.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	ReasonOOMKilled = "OOMKilled"
)

// Mount is a mount as ContainerStatus reports it.
type Mount struct {
	ContainerPath  string `json:"containerPath"`
	HostPath       string `json:"hostPath"`
	Readonly       bool   `json:"readonly,omitempty"`
	Propagation    string `json:"propagation,omitempty"`
	SelinuxRelabel bool   `json:"selinuxRelabel,omitempty"`
	// RecursiveReadOnly: submounts are read-only too (OCI option "rro").
	RecursiveReadOnly bool `json:"recursiveReadOnly,omitempty"`
	// Image is the ID of the image an image volume (KEP-4639) mounts,
	// ImageRef the reference asked for and ImageSubPath the directory of
	// it; HostPath is empty then. Source is the host directory bound in.
	Image        string `json:"image,omitempty"`
	ImageRef     string `json:"imageRef,omitempty"`
	ImageSubPath string `json:"imageSubPath,omitempty"`
	Source       string `json:"source,omitempty"`
	// Options are the CRI mount_options.
	Options []string `json:"options,omitempty"`
}

// User is a container process's identity.
type User struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// Record is the persisted state of one container.
type Record struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SandboxID string `json:"sandboxId"`
	// RuntimeHandler is the pod's runtime handler, kept here so that the
	// container can be stopped and deleted when its pod's record is gone.
	// Records written before it was added have none.
	RuntimeHandler string `json:"runtimeHandler,omitempty"`
	// MetaName and Attempt are the CRI metadata.
	MetaName string `json:"metaName"`
	Attempt  uint32 `json:"attempt"`
	// Image is the image ID; ImageRef the reference the kubelet asked for
	// (an ID or a name); UserImage the name in the pod's spec
	// (ImageSpec.user_specified_image), which ContainerStatus reports when
	// it still tags the image. Records written before it was added have none.
	Image     string `json:"image"`
	ImageRef  string `json:"imageRef"`
	UserImage string `json:"userImage,omitempty"`

	State      State     `json:"state"`
	CreatedAt  time.Time `json:"createdAt"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	ExitCode   int32     `json:"exitCode"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`

	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Mounts      []Mount           `json:"mounts,omitempty"`
	// LogPath is the absolute path of the CRI log file ("" = no log).
	LogPath string `json:"logPath,omitempty"`
	// Dir is the container's directory under the root: its checkpoint
	// and restore files, and the bundle of records without Bundle.
	Dir string `json:"dir"`
	// Bundle is the OCI bundle (config.json) and conmon's persist dir,
	// under the state dir (a tmpfs, as containerd's and CRI-O's are).
	// Records written before it keep theirs in Dir; see BundleDir.
	Bundle string `json:"bundle,omitempty"`
	// CgroupPath is the container's cgroup, relative to the hierarchies.
	CgroupPath string `json:"cgroupPath"`
	// User is the identity the container's process runs as, as resolved
	// at create (image user, run_as_*, supplemental groups and policy).
	User *User `json:"user,omitempty"`
	// StopSignal is the container config's stop signal, else the
	// image's ("" = SIGTERM).
	StopSignal string `json:"stopSignal,omitempty"`
	Pid        int    `json:"pid,omitempty"`
	// ParentOOMKills, under the systemd cgroup driver, is the OOM kill
	// count of the container's parent cgroup (its pod's) when it started;
	// nil when it was not read.
	ParentOOMKills *uint64 `json:"parentOOMKills,omitempty"`
	// RestoreFrom, on a container created from a checkpoint archive, is
	// the directory of its CRIU images: StartContainer restores it from
	// there instead of starting it.
	RestoreFrom string `json:"restoreFrom,omitempty"`
	// RuntimeCreated is set just before the runtime is asked to create the
	// container, so recovery knows there may be runtime state to delete.
	RuntimeCreated bool `json:"runtimeCreated,omitempty"`
	// Removing is set when RemoveContainer has begun; a restart finishes it.
	Removing bool `json:"removing,omitempty"`
	// Request is the container as CreateContainer read it: what podbay
	// acts on. Records written before it have only Config; the server
	// converts that on load.
	Request *podrequest.Container `json:"request,omitempty"`
	// Config is the CRI ContainerConfig as protobuf JSON, kept for
	// verbose ContainerStatus, checkpoints and a podbay before Request.
	Config json.RawMessage `json:"config,omitempty"`
}

// BundleDir is the container's OCI bundle: Bundle, or for a record
// written before bundles moved to the state dir, Dir/bundle.
func (r Record) BundleDir() string {
	if r.Bundle != "" {
		return r.Bundle
	}
	return filepath.Join(r.Dir, "bundle")
}

// Container is one container in memory.
type Container struct {
	// ID never changes; SandboxID neither.
	ID        string
	SandboxID string

	// OpMu serialises the operations that change the container on the
	// host (create, start, stop, remove).
	OpMu sync.Mutex
	// EventMu is held from a change of the container's state through the
	// event that reports it (the server's GetContainerEvents), so that
	// the container's events come in the order of its changes.
	EventMu sync.Mutex

	mu  sync.Mutex
	rec Record // guarded by mu

	// stopping is set once StopContainer signals the container: its exit
	// from then on is the stop's doing.
	stopping atomic.Bool
}

// MarkStopping records that a stop is signalling the container.
func (c *Container) MarkStopping() { c.stopping.Store(true) }

// Stopping reports whether a stop has signalled the container.
func (c *Container) Stopping() bool { return c.stopping.Load() }

// New returns a container for rec.
func New(rec Record) *Container {
	return &Container{ID: rec.ID, SandboxID: rec.SandboxID, rec: rec}
}

// Record returns a copy of the record; maps and slices are shared and must
// not be modified.
func (c *Container) Record() Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec
}

// Update changes the record under the lock and returns the new copy.
func (c *Container) Update(fn func(*Record)) Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(&c.rec)
	return c.rec
}

// Index is the in-memory set of published containers and the reservation
// of their names.
type Index struct {
	*nameindex.Index[*Container]
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{nameindex.Grouped("container",
		func(c *Container) string { return c.ID },
		func(c *Container) string { return c.SandboxID })}
}

// ErrNameReserved is wrapped when a name is taken by a published container.
var ErrNameReserved = nameindex.ErrNameReserved

// InSandbox returns the published containers of a sandbox, ordered by ID.
func (x *Index) InSandbox(sandboxID string) []*Container {
	return x.InGroup(sandboxID)
}
