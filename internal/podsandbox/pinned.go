package podsandbox

import (
	"context"
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/podns"
	"github.com/podbay/podbay/internal/runtime"
)

// Pins are a pod's pinned namespaces on the host (package podns); tests
// put a fake in.
type Pins interface {
	Pin(dir string, req podns.Request) error
	Unmount(dir string) error
	Remove(dir string) error
	State(dir string) (exists, mounted bool, err error)
}

// HostPins are the host's pinned namespaces.
type HostPins struct{}

func (HostPins) Pin(dir string, req podns.Request) error { return podns.Pin(dir, req) }
func (HostPins) Unmount(dir string) error                { return podns.Unmount(dir) }
func (HostPins) Remove(dir string) error                 { return podns.Remove(dir) }
func (HostPins) State(dir string) (bool, bool, error)    { return podns.State(dir) }

// pinned is a pod with no sandbox process: podbayd pins its IPC and UTS
// namespaces under <root>/<id> as it pins the netns, and the containers
// join them by path. Its "process" is the pins: running while they are
// mounted, exited once Stop has unmounted them.
type pinned struct {
	root string
	pins Pins
}

// NewPinned is the controller of pods without a sandbox process, whose
// pin directories are under root (podns.Root of the state dir).
func NewPinned(root string, pins Pins) Controller {
	if pins == nil {
		pins = HostPins{}
	}
	return pinned{root: root, pins: pins}
}

func (pinned) Traits() Traits { return KindPinned.Traits() }

func (p pinned) dir(id string) string { return podns.Dir(p.root, id) }

// Create pins the namespaces the sandbox spec in opts.BundleDir asks the
// sandbox to create (IPC and UTS with no path), with its hostname,
// domainname and sysctls, the net.* ones in the network namespace it
// names. The spec is the one the pause container would have run with, so
// both kinds give the pod the same namespaces. It returns pid 0: there is
// no process. A failed Create leaves nothing.
func (p pinned) Create(_ context.Context, opts runtime.CreateOptions) (int, error) {
	spec, err := runtime.ReadSpec(opts.BundleDir)
	if err != nil {
		return 0, fmt.Errorf("read sandbox spec: %w", err)
	}
	req, err := PinRequest(spec)
	if err != nil {
		return 0, err
	}
	if err := p.pins.Pin(p.dir(opts.ID), req); err != nil {
		var se *podns.SysctlError
		if errors.As(err, &se) {
			return 0, &runtime.SysctlError{Name: se.Name, Value: spec.Linux.Sysctl[se.Name], Err: se.Err}
		}
		return 0, fmt.Errorf("pin pod namespaces: %w", err)
	}
	return 0, nil
}

// PinRequest is what a sandbox spec asks of the pinned namespaces: the
// IPC and UTS namespaces it creates (no path), its hostname and
// domainname, its sysctls and its network namespace's path. A spec that
// needs a process (a user namespace of its own) is refused.
func PinRequest(spec *specs.Spec) (podns.Request, error) {
	var req podns.Request
	if spec.Linux == nil {
		return req, fmt.Errorf("sandbox spec has no linux section: %w", errdefs.ErrInvalidArgument)
	}
	for _, ns := range spec.Linux.Namespaces {
		switch ns.Type {
		case specs.IPCNamespace:
			req.IPC = ns.Path == ""
		case specs.UTSNamespace:
			req.UTS = ns.Path == ""
		case specs.NetworkNamespace:
			req.NetNS = ns.Path
		case specs.UserNamespace:
			return req, fmt.Errorf("a pod with a user namespace of its own needs a sandbox process: %w", errdefs.ErrFailedPrecondition)
		}
	}
	if req.UTS {
		req.Hostname, req.Domainname = spec.Hostname, spec.Domainname
	}
	req.Sysctls = spec.Linux.Sysctl
	return req, nil
}

// Start does nothing: the namespaces are ready once pinned.
func (pinned) Start(context.Context, string) error { return nil }

// Stop releases the namespaces (the files stay until Delete), as Stop
// releases the netns. Idempotent.
func (p pinned) Stop(_ context.Context, id string) error {
	if err := p.pins.Unmount(p.dir(id)); err != nil {
		return fmt.Errorf("unmount pod namespaces: %w", err)
	}
	return nil
}

// Delete unmounts what is still pinned and removes the pin directory.
// Idempotent.
func (p pinned) Delete(_ context.Context, id string) error {
	if err := p.pins.Remove(p.dir(id)); err != nil {
		return fmt.Errorf("remove pod namespaces: %w", err)
	}
	return nil
}

// Status is running while every pin is mounted, stopped after Stop, and
// errdefs.ErrNotFound once Delete has removed the pins (or before Create).
func (p pinned) Status(_ context.Context, id string) (runtime.State, error) {
	exists, mounted, err := p.pins.State(p.dir(id))
	switch {
	case err != nil:
		return runtime.State{ID: id, Status: runtime.StatusUnknown}, err
	case !exists:
		return runtime.State{ID: id}, fmt.Errorf("pod namespaces of %s: %w", id, errdefs.ErrNotFound)
	case mounted:
		return runtime.State{ID: id, Status: runtime.StatusRunning}, nil
	}
	return runtime.State{ID: id, Status: runtime.StatusStopped}, nil
}

// Exited is true once the pins are released (or gone): nothing else ends
// a pinned pod.
func (p pinned) Exited(id string) (runtime.ExitStatus, bool, error) {
	exists, mounted, err := p.pins.State(p.dir(id))
	if err != nil {
		return runtime.ExitStatus{}, false, err
	}
	return runtime.ExitStatus{}, !exists || !mounted, nil
}

// Wait has no process to wait for: it returns when ctx ends.
func (pinned) Wait(ctx context.Context, _ string) (runtime.ExitStatus, error) {
	<-ctx.Done()
	return runtime.ExitStatus{}, ctx.Err()
}

// Update does nothing: there is no sandbox cgroup to size; the pod's own
// cgroup (which the server sizes) holds every process of the pod.
func (pinned) Update(context.Context, UpdateRequest) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}
