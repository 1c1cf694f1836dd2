// Package sandbox holds podbay's pod sandbox records: what is persisted for
// each pod, the in-memory index with name reservation, and the per-sandbox
// locks that keep operations on one pod from interleaving.
package sandbox

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/podrequest"
)

// RecordVersion is the format version of persisted records.
const RecordVersion = 1

// State is a sandbox's state as the CRI sees it, and as records before
// phases stored it (see Phase.State).
type State string

// States.
const (
	StateCreating State = "creating"
	StateReady    State = "ready"
	StateNotReady State = "notready"
)

// Network modes.
const (
	// ModeCNI: podbay pins a namespace at the sandbox key and configures it
	// with CNI.
	ModeCNI = "cni"
	// ModeHost: the pod shares the host's network namespace.
	ModeHost = "host"
)

// Metadata identifies a pod as the kubelet names it.
type Metadata struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Attempt   uint32 `json:"attempt"`
}

// NamespaceMode mirrors the CRI's namespace modes as strings.
type NamespaceMode string

// Namespace modes.
const (
	NamespacePod       NamespaceMode = "POD"
	NamespaceContainer NamespaceMode = "CONTAINER"
	NamespaceNode      NamespaceMode = "NODE"
	NamespaceTarget    NamespaceMode = "TARGET"
)

// Namespaces records which namespaces a pod shares with the node.
type Namespaces struct {
	Network NamespaceMode `json:"network"`
	PID     NamespaceMode `json:"pid"`
	IPC     NamespaceMode `json:"ipc"`
}

// Pins are the namespaces podbayd pinned for a pod without a sandbox
// process, besides the netns (NetworkSettings.SandboxKey). An empty path:
// the node's namespace (host IPC, or the host's UTS with host network).
type Pins struct {
	IPC string `json:"ipc,omitempty"`
	UTS string `json:"uts,omitempty"`
}

// Record is the persisted state of one sandbox. Its JSON also carries the
// fields of records written before phases; see MarshalJSON.
type Record struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Metadata Metadata `json:"metadata"`
	// Phase is where the sandbox is in its life; see Phase.
	Phase          Phase             `json:"phase"`
	CreatedAt      time.Time         `json:"createdAt"`
	RuntimeHandler string            `json:"runtimeHandler"`
	NetworkMode    string            `json:"networkMode"`
	NetworkOrder   string            `json:"networkOrder"`
	Namespaces     Namespaces        `json:"namespaces"`
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	// CgroupParent is the pod's cgroup parent (the default when the
	// kubelet named none); the pause container's cgroup is
	// <CgroupParent>/podbay-<id>.
	CgroupParent string `json:"cgroupParent,omitempty"`
	// Image is the ID of the pause image the sandbox runs.
	Image string `json:"image,omitempty"`
	// Dir is the sandbox's directory under the root: resolv.conf,
	// hostname and hosts, and the bundle of records without Bundle.
	Dir string `json:"dir"`
	// Bundle is the sandbox container's OCI bundle (config.json) and
	// conmon's persist dir, under the state dir (a tmpfs, as containerd's
	// and CRI-O's are). Records written before it keep theirs in Dir; see
	// BundleDir.
	Bundle string `json:"bundle,omitempty"`
	// Kind is the kind of sandbox the pod runs (podsandbox.Kind:
	// "pause", "shim" or "pinned"), chosen at RunPodSandbox; empty in
	// records written before kinds, whose handler's type tells.
	Kind string `json:"sandboxKind,omitempty"`
	// Pins are the paths of a pinned sandbox's namespaces, which its
	// containers join; empty for the other kinds.
	Pins Pins `json:"pins,omitzero"`
	// ShmPath is the pod's own /dev/shm, a tmpfs its sandbox and
	// containers bind (package podshm): set, before it is mounted, for a
	// pod with its own IPC namespace on the node's kernel; empty for host
	// IPC (the node's /dev/shm), a VM's pod and records written before it
	// (a tmpfs per container).
	ShmPath string `json:"shmPath,omitempty"`
	// Pid is the sandbox container's init process, 0 until created; a
	// pinned sandbox has none.
	Pid int `json:"pid,omitempty"`
	// ContainerCreated is set just before the runtime creates the sandbox
	// container (see BeginContainerCreate), so recovery knows there may be
	// runtime state to delete. Published sandboxes always have it set.
	ContainerCreated bool `json:"containerCreated,omitempty"`
	// PauseReleased is set once Stop has deleted the pause container's
	// runtime state and root filesystem (see ReleasePause), which an oci
	// handler's Stop does as soon as the pause process is dead; Remove then
	// has neither left to do.
	PauseReleased bool `json:"pauseReleased,omitempty"`
	// Network is the CNI network's progress; see NetworkPhase.
	Network NetworkPhase `json:"network,omitempty"`
	// NetworkSettings are what inspect shows; SandboxKey is the netns path.
	NetworkSettings network.Settings `json:"networkSettings"`
	// Request is the pod as RunPodSandbox validated it (its resources as
	// UpdatePodSandboxResources last set them): what podbay acts on.
	// Records written before it have only Config; the server converts
	// that on load.
	Request *podrequest.Pod `json:"request,omitempty"`
	// Config is the CRI PodSandboxConfig as protobuf JSON, kept for what
	// shows or exports the kubelet's request (verbose PodSandboxStatus,
	// pod checkpoints) and for a podbay before Request; podbay acts on
	// Request.
	Config json.RawMessage `json:"config,omitempty"`
}

// BundleDir is the sandbox container's OCI bundle: Bundle, or for a
// record written before bundles moved to the state dir, Dir/bundle.
func (r Record) BundleDir() string {
	if r.Bundle != "" {
		return r.Bundle
	}
	return filepath.Join(r.Dir, "bundle")
}

// Sandbox is one pod sandbox in memory.
type Sandbox struct {
	// ID never changes.
	ID string

	// OpMu serialises the operations that change the sandbox on the host
	// (run, stop, remove), so that a Stop racing a Remove does each step once.
	OpMu sync.Mutex
	// StopMu is read-locked by operations that add to a pod (creating a
	// container) and write-locked by Stop, so nothing is added to a pod
	// while it stops.
	StopMu sync.RWMutex

	// saveMu serialises a transition with the persisting of its result
	// (see Advance), so that records reach the store in the order of
	// their transitions when two steps of one Stop finish at once.
	saveMu sync.Mutex

	mu  sync.Mutex
	rec Record // guarded by mu

	watchMu  sync.Mutex
	endWatch context.CancelFunc // guarded by watchMu
}

// New returns a sandbox for rec.
func New(rec Record) *Sandbox {
	return &Sandbox{ID: rec.ID, rec: rec}
}

// Record returns a copy of the record. Maps are shared and must not be
// modified by the caller.
func (s *Sandbox) Record() Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec
}

// Update changes the record's data under the lock and returns the new copy.
// The caller persists it. The phase changes through Transition only.
func (s *Sandbox) Update(fn func(*Record)) Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.rec)
	return s.rec
}

// Transition applies one of Record's lifecycle transitions under the lock
// and returns the new copy, which the caller persists. A refused
// transition changes nothing and returns the record as it is.
func (s *Sandbox) Transition(step func(*Record) error) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.rec
	if err := step(&next); err != nil {
		return s.rec, err
	}
	s.rec = next
	return s.rec, nil
}

// Advance applies a transition as Transition does and persists the new
// record with save before another Advance of the same sandbox can
// transition it. The record is kept in memory even when save fails.
func (s *Sandbox) Advance(step func(*Record) error, save func(Record) error) (Record, error) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	rec, err := s.Transition(step)
	if err != nil {
		return rec, err
	}
	return rec, save(rec)
}

// WatchExit returns the context for a watch of the pause process's exit,
// derived from parent; EndExitWatch cancels it. A new watch ends the
// previous one.
func (s *Sandbox) WatchExit(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.endWatch != nil {
		s.endWatch()
	}
	s.endWatch = cancel
	return ctx
}

// EndExitWatch ends the watch of the pause process's exit, if any: the
// pod's teardown is about to delete what it waits on.
func (s *Sandbox) EndExitWatch() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.endWatch != nil {
		s.endWatch()
		s.endWatch = nil
	}
}

// Phase returns the current phase.
func (s *Sandbox) Phase() Phase {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Phase
}
