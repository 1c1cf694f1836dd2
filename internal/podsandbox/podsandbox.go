// Package podsandbox owns what a pod sandbox is: the thing that holds a
// pod's shared namespaces for its life, behind one Controller. The server
// asks a pod's controller, never its handler's type or the kind, to plan
// the sandbox (the pause image, or the pins), make and remove its root
// filesystem, put its process in the spec, create, start, stop, delete,
// watch, inspect and resize it, and reads what differs between kinds from
// the Traits and Phases the controller declares. What the controller
// needs of the daemon it is lent per call (Host), so the package does not
// import the server.
//
// Three kinds are implemented: the pause container (oci handlers: conmon
// and runc run the pause program in the pinned namespaces) and the shim
// sandbox (vm handlers: the shim's sandbox task, a VM or gVisor's
// sandbox), both over a runtime handler's runtime.Runtime, and the pinned
// sandbox (oci handlers, a pod that shares no PID namespace and has no
// user namespace: no process at all; podbayd pins the IPC and UTS
// namespaces itself, package podns, and containers join them by path).
// Choose picks a pod's kind; see docs/design.md ("The sandbox controller").
package podsandbox

import (
	"context"
	"strconv"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/specgen"
)

// Controller is one pod's sandbox as the server drives it. Calls for the
// same pod are serialized by the caller (the pod's OpMu).
type Controller interface {
	// Traits are what this kind of sandbox declares about itself.
	Traits() Traits
	// Create creates the sandbox from opts (its bundle) and returns the
	// pid of its process, which waits for Start. A failed Create may have
	// left state: the caller's undo is Delete.
	Create(ctx context.Context, opts runtime.CreateOptions) (int, error)
	// Start starts the sandbox's process.
	Start(ctx context.Context, id string) error
	// Stop kills the sandbox's process; it holds nothing worth a grace
	// period.
	Stop(ctx context.Context, id string) error
	// Delete removes the sandbox's runtime state; an unknown ID is not an
	// error.
	Delete(ctx context.Context, id string) error
	// Status reports the sandbox's process; an unknown ID gives
	// errdefs.ErrNotFound.
	Status(ctx context.Context, id string) (runtime.State, error)
	// Exited returns the exit status once the sandbox's process has
	// exited; ok is false before.
	Exited(id string) (status runtime.ExitStatus, ok bool, err error)
	// Wait blocks until the sandbox's process has exited, or ctx ends.
	Wait(ctx context.Context, id string) (runtime.ExitStatus, error)
	// Update gives the sandbox the pod's new resource totals and returns
	// the update that puts the previous ones back.
	Update(ctx context.Context, req UpdateRequest) (undo func(context.Context) error, err error)

	// Plan readies what a new sandbox runs (the pause image, pulled or
	// made when absent) and names what the record keeps; it makes nothing
	// on the host that a later undo must remove.
	Plan(ctx context.Context, h Host, req PlanRequest) (Plan, error)
	// MakeRootfs makes the sandbox's root filesystem and returns its
	// path; "" for a kind that has none. A failed MakeRootfs may have
	// made storage: the caller's undo is RemoveRootfs, registered before.
	MakeRootfs(ctx context.Context, h Host, id string, plan Plan, opts image.RootfsOptions) (string, error)
	// RemoveRootfs removes the sandbox's root filesystem. Idempotent.
	RemoveRootfs(ctx context.Context, h Host, id string) error
	// Spec is the sandbox's OCI spec (its bundle's config.json, which
	// Create reads): desc, the pod's namespaces and what the daemon made
	// for them, with the kind's process (or none) on rootfs.
	Spec(desc specgen.Sandbox, plan Plan, rootfs string) (*specs.Spec, error)
	// Release deletes a stopped sandbox's runtime state and root
	// filesystem (Delete and RemoveRootfs; for kinds without
	// TeardownInOrder, whose two touch nothing of each other's), telling
	// observe each step's phase and time. Idempotent.
	Release(ctx context.Context, h Host, id string, observe Observe) error
	// Phases name the kind's steps in the sandbox phase metrics.
	Phases() Phases
}

// Traits are the properties in which kinds of sandbox differ, named for
// what the server asks of them.
type Traits struct {
	// HostKernel: the pod's processes run on the node's kernel, so a
	// sysctl the node lacks cannot be set. A VM's guest kernel may have
	// sysctls the node lacks.
	HostKernel bool
	// CreateUsesNetwork: Create reads the pod's configured network (a VM
	// boots at create and mirrors the namespace's interfaces into it
	// then), so CNI ADD must finish before Create, never beside it.
	CreateUsesNetwork bool
	// TeardownInOrder: the sandbox's teardown touches the network and the
	// storage (a VM's runtime tears its mirror of the pod's interfaces
	// down as the VM stops; the shim unmounts under the bundle on
	// Delete), so StopPodSandbox releases the network, then stops the
	// sandbox, and leaves Delete and the root filesystem to
	// RemovePodSandbox, in sequence. Without it (the pause process holds
	// nothing the network or the storage needs) Stop releases the network
	// while it stops the sandbox, then deletes it beside its root
	// filesystem.
	TeardownInOrder bool
	// SizedByUpdate: the sandbox itself is sized from the pod's totals by
	// Update (a VM), so a pod without a cgroup of its own can still be
	// resized.
	SizedByUpdate bool
	// MonitorPerPod: one monitor serves the whole pod (the shim, started
	// with the sandbox) rather than one per container (conmon); it is
	// placed as the pod's.
	MonitorPerPod bool
	// BoundToInstance: running sandboxes stay connected to the handler's
	// runtime instance (shims connected to it), so the handler's settings
	// cannot change while pods use it.
	BoundToInstance bool
	// NeverExits: nothing but Stop ends the sandbox (pinned namespaces,
	// not a process), so there is no exit to watch.
	NeverExits bool
	// Handlerless: the sandbox needs no handler's runtime (podbayd
	// makes it itself), so its pods are driven, and torn down in any
	// order, even once their handler is no longer configured.
	Handlerless bool
	// QuickCreate: Create takes a millisecond or two (pinning), so it is
	// not worth overlapping with CNI ADD.
	QuickCreate bool
	// PodShm: the pod's containers can share a tmpfs of the node's at
	// /dev/shm (package podshm), which a VM, with its own kernel and
	// /dev/shm, cannot.
	PodShm bool
}

// Monitor names the process that watches this kind's sandbox and
// containers, as the systemd scopes spell it.
func (t Traits) Monitor() string {
	if t.MonitorPerPod {
		return "shim"
	}
	return "conmon"
}

// UpdateRequest is a resize of a pod's sandbox.
type UpdateRequest struct {
	ID string
	// Next and Prev are the sandbox's limits for the new totals and the
	// ones they replace (Prev restores).
	Next, Prev *specs.LinuxResources
	// Totals are the pod's new totals as the CRI request gave them.
	Totals Totals
	// Spec is the sandbox's current config.json (what Prev was read
	// from).
	Spec *specs.Spec
}

// Totals are a pod's resource totals as CRI gives them.
type Totals struct {
	CPUPeriod, CPUQuota, CPUShares, Memory int64
}

// Kind is a kind of sandbox.
type Kind string

const (
	// KindPause is the pause container of oci handlers.
	KindPause Kind = "pause"
	// KindShim is the shim's sandbox task of vm handlers.
	KindShim Kind = "shim"
	// KindPinned is an oci handler's pod without a sandbox process: its
	// namespaces pinned by podbayd.
	KindPinned Kind = "pinned"
)

// Needs are what of a pod decides whether it needs a sandbox process.
type Needs struct {
	// SharedPID: the pod's containers share a PID namespace (pid: POD),
	// whose init the pause process is.
	SharedPID bool
	// UserNamespace: the pod has a user namespace of its own
	// (hostUsers: false). It keeps the pause process for now: the
	// namespace would have to be pinned with its ID mappings, which
	// unshare from a multi-threaded daemon cannot do (CRI-O forks pinns).
	UserNamespace bool
}

// Choose is the kind of sandbox a pod runs on a handler of type
// handlerType, given sandbox_process (config.SandboxProcessAuto or
// config.SandboxProcessAlways): a vm handler's shim, else the pause
// container when configured always or when the pod needs a process, else
// pinned namespaces.
func Choose(handlerType, sandboxProcess string, pod Needs) Kind {
	switch {
	case handlerType == config.TypeVM:
		return KindShim
	case sandboxProcess == config.SandboxProcessAlways, pod.SharedPID, pod.UserNamespace:
		return KindPause
	}
	return KindPinned
}

// KindOf is the kind a pod's record names (kind), or for a record written
// before kinds were recorded, the kind its handler runs.
func KindOf(kind, handlerType string) Kind {
	switch k := Kind(kind); k {
	case KindPause, KindShim, KindPinned:
		return k
	}
	return KindFor(handlerType)
}

// KindFor is the kind of sandbox a runtime handler of type handlerType
// (config.TypeOCI, config.TypeVM) runs.
func KindFor(handlerType string) Kind {
	if handlerType == config.TypeVM {
		return KindShim
	}
	return KindPause
}

// Traits are what a kind declares; the same as its controller's.
func (k Kind) Traits() Traits {
	switch k {
	case KindShim:
		return Traits{
			CreateUsesNetwork: true,
			TeardownInOrder:   true,
			SizedByUpdate:     true,
			MonitorPerPod:     true,
			BoundToInstance:   true,
		}
	case KindPinned:
		return Traits{HostKernel: true, NeverExits: true, Handlerless: true, QuickCreate: true, PodShm: true}
	default:
		return Traits{HostKernel: true, PodShm: true}
	}
}

// For is the controller of kind over the handler's runtime rt; a pinned
// sandbox needs no runtime and keeps its pins under pinRoot.
func For(kind Kind, rt runtime.Runtime, pinRoot string) Controller {
	switch kind {
	case KindShim:
		return NewShim(rt)
	case KindPinned:
		return NewPinned(pinRoot, nil)
	}
	return NewPause(rt)
}

// ForHandler is For(KindFor(handlerType), rt, ""): the process kinds.
func ForHandler(handlerType string, rt runtime.Runtime) Controller {
	return For(KindFor(handlerType), rt, "")
}

// Namespaces are the paths of a pod's namespaces that its containers join;
// an empty path is the node's namespace or, with Pid set, the sandbox
// process's.
type Namespaces struct {
	// Net is the pinned netns (the sandbox key); empty with host network.
	Net string
	// IPC and UTS are the pinned namespaces of a pinned sandbox.
	IPC, UTS string
	// Pid is the sandbox process of a process kind, whose namespaces the
	// containers join through /proc/<pid>/ns; 0 for a pinned sandbox.
	Pid int
}

// PinnedNamespaces are the paths of the pinned IPC and UTS namespaces of
// pod id under pinRoot, as the pinned controller makes them for a pod with
// its own IPC namespace (ipc) and network (uts: a pod with host network
// has the host's UTS namespace).
func PinnedNamespaces(pinRoot, id string, ipc, uts bool) (ipcPath, utsPath string) {
	dir := podns.Dir(pinRoot, id)
	if ipc {
		ipcPath = podns.Path(dir, podns.IPC)
	}
	if uts {
		utsPath = podns.Path(dir, podns.UTS)
	}
	return ipcPath, utsPath
}

// process is what both implemented kinds share: the sandbox is one
// container of the handler's runtime.
type process struct {
	rt runtime.Runtime
}

func (p process) Create(ctx context.Context, opts runtime.CreateOptions) (int, error) {
	return p.rt.Create(ctx, opts)
}

func (p process) Start(ctx context.Context, id string) error { return p.rt.Start(ctx, id) }

func (p process) Stop(ctx context.Context, id string) error {
	return p.rt.Stop(ctx, id, 0, syscall.SIGKILL)
}

func (p process) Delete(ctx context.Context, id string) error { return p.rt.Delete(ctx, id) }

func (p process) Status(ctx context.Context, id string) (runtime.State, error) {
	return p.rt.State(ctx, id)
}

func (p process) Exited(id string) (runtime.ExitStatus, bool, error) { return p.rt.Exited(id) }

func (p process) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	return p.rt.Wait(ctx, id)
}

// pause is the pause container: runc runs the pause program in the pod's
// pinned namespaces, under conmon, in the pod's cgroup.
type pause struct{ process }

// NewPause is the pause-container controller over an oci handler's
// runtime.
func NewPause(rt runtime.Runtime) Controller { return pause{process{rt}} }

func (pause) Traits() Traits { return KindPause.Traits() }

// Update sets the pause container's cgroup limits.
func (p pause) Update(ctx context.Context, req UpdateRequest) (func(context.Context) error, error) {
	if err := p.rt.Update(ctx, req.ID, req.Next); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return p.rt.Update(ctx, req.ID, req.Prev) }, nil
}

// shim is the shim's sandbox task: the VM (or gVisor's sandbox) the pod's
// containers run in.
type shim struct {
	process
	// upd is the runtime's sandbox update, when it has one (the shim
	// runtime does): the VM is sized from the totals it is sent.
	upd runtime.SandboxUpdater
}

// NewShim is the shim-sandbox controller over a vm handler's runtime.
func NewShim(rt runtime.Runtime) Controller {
	upd, _ := rt.(runtime.SandboxUpdater)
	return shim{process: process{rt}, upd: upd}
}

func (shim) Traits() Traits { return KindShim.Traits() }

// sandboxTotalKeys are the annotations a sandbox update carries, as
// containerd sends them.
var sandboxTotalKeys = []string{annotations.SandboxCPUPeriod, annotations.SandboxCPUQuota, annotations.SandboxCPUShares, annotations.SandboxMemory}

// Update sends the shim the pod's new totals, with the
// io.kubernetes.cri.sandbox-* annotations, as containerd does; its undo
// sends the previous limits and annotations back. A runtime without a
// sandbox update gets a plain update.
func (s shim) Update(ctx context.Context, req UpdateRequest) (func(context.Context) error, error) {
	if s.upd == nil {
		return pause{s.process}.Update(ctx, req)
	}
	prevAnn := make(map[string]string, len(sandboxTotalKeys))
	for _, k := range sandboxTotalKeys {
		if req.Spec != nil {
			prevAnn[k] = req.Spec.Annotations[k]
		} else {
			prevAnn[k] = ""
		}
	}
	ann := map[string]string{
		annotations.SandboxCPUPeriod: strconv.FormatInt(req.Totals.CPUPeriod, 10),
		annotations.SandboxCPUQuota:  strconv.FormatInt(req.Totals.CPUQuota, 10),
		annotations.SandboxCPUShares: strconv.FormatInt(req.Totals.CPUShares, 10),
		annotations.SandboxMemory:    strconv.FormatInt(req.Totals.Memory, 10),
	}
	if err := s.upd.UpdateSandbox(ctx, req.ID, req.Next, ann); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return s.upd.UpdateSandbox(ctx, req.ID, req.Prev, prevAnn) }, nil
}
