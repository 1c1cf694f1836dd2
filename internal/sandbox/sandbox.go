// Package sandbox holds podbay's pod sandbox records: what is persisted for
// each pod, the in-memory index with name reservation, and the per-sandbox
// locks that keep operations on one pod from interleaving.
package sandbox

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/network"
)

// RecordVersion is the format version of persisted records.
const RecordVersion = 1

// State is a sandbox's lifecycle state.
type State string

// States. A sandbox is Creating from the moment its record is first
// persisted until RunPodSandbox finishes; it is never listed in that state.
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

// Record is the persisted state of one sandbox.
type Record struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Metadata       Metadata          `json:"metadata"`
	State          State             `json:"state"`
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
	// Dir holds the bundle (config.json), resolv.conf, hostname and hosts.
	Dir string `json:"dir"`
	// Pid is the sandbox container's init process, 0 until created.
	Pid int `json:"pid,omitempty"`
	// ContainerCreated is set once the runtime has created the sandbox
	// container, so recovery knows there is runtime state to delete.
	ContainerCreated bool `json:"containerCreated,omitempty"`
	// NetworkSettings are what inspect shows; SandboxKey is the netns path.
	NetworkSettings network.Settings `json:"networkSettings"`
	// NetworkSetup is set from just before CNI ADD is issued until CNI DEL
	// succeeds: while it is set, the pod may hold CNI resources.
	NetworkSetup bool `json:"networkSetup,omitempty"`
	// NetworkStopped is set once Stop has torn down the network and unmounted
	// the namespace.
	NetworkStopped bool `json:"networkStopped,omitempty"`
	// Stopping is set, with the state NOTREADY, before Stop tears anything
	// down, so a restart finishes a Stop a crash interrupted.
	Stopping bool `json:"stopping,omitempty"`
	// Removing is set when RemovePodSandbox has begun, so a restart finishes it.
	Removing bool `json:"removing,omitempty"`
	// Config is the CRI PodSandboxConfig as protobuf JSON; the server owns
	// its meaning.
	Config json.RawMessage `json:"config,omitempty"`
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

	mu  sync.Mutex
	rec Record // guarded by mu
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

// Update changes the record under the lock and returns the new copy. The
// caller persists it.
func (s *Sandbox) Update(fn func(*Record)) Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.rec)
	return s.rec
}

// State returns the current state.
func (s *Sandbox) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.State
}
