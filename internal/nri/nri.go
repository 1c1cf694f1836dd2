// Package nri runs NRI plugins (github.com/containerd/nri) for podbay, as
// containerd and CRI-O do: external plugins connecting on a socket and
// pre-registered plugins started from a directory. It relays pod and
// container events to them through NRI's runtime adaptation, turns
// podbay's records into NRI's objects, and applies the adjustments the
// plugins return to a container's OCI spec.
//
// A nil *NRI is NRI disabled: every method returns at once, so the server
// calls it unconditionally and a disabled NRI costs one nil check.
package nri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	validator "github.com/containerd/nri/plugins/default-validator"
	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// RuntimeName is how podbay introduces itself to plugins.
const RuntimeName = "podbay"

// processWide sets what NRI keeps for the whole process (its logger and
// its plugin timeouts), once, from the first Start: a daemon runs one NRI,
// and NRI's goroutines read them unguarded.
var processWide sync.Once

// Options are the [nri] settings.
type Options struct {
	SocketPath       string
	PluginPath       string
	PluginConfigPath string
	// RegistrationTimeout bounds a plugin's registration; RequestTimeout
	// each event sent to a plugin. NRI keeps both process-wide.
	RegistrationTimeout time.Duration
	RequestTimeout      time.Duration
	// DisableConnections makes no socket: only pre-registered plugins run.
	DisableConnections bool
	// Version is podbay's, told to plugins.
	Version string
	// CDI resolves the CDI devices a plugin's adjustment asks for into
	// the spec (cdi_spec_dirs); nil refuses them.
	CDI func(ctx context.Context, spec *rspec.Spec, devices []string) error
	// Validator is NRI's default validator's configuration; nil or not
	// enabled: plugins' adjustments are not validated.
	Validator *validator.DefaultValidatorConfig
}

// Domain is what plugins see of the runtime besides the events: the
// objects that exist when a plugin registers, and the way to the
// containers they update unasked. The server implements it.
type Domain interface {
	// Snapshot lists the pods and the containers that are not exited.
	Snapshot(ctx context.Context) ([]*api.PodSandbox, []*api.Container)
	// UpdateContainers applies resource updates as
	// UpdateContainerResources does, and returns those that failed.
	UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
}

// NRI relays events to the plugins. The zero of a *NRI (nil) is disabled.
type NRI struct {
	opts   Options
	domain Domain
	// a is set once Start has started NRI; events before that (a
	// container exit found while the daemon recovers) go nowhere.
	a atomic.Pointer[adaptation.Adaptation]
}

// New returns NRI with opts; Start starts it.
func New(opts Options) *NRI {
	return &NRI{opts: opts}
}

// Start starts the pre-registered plugins (each is handed the pods and
// containers of domain before it gets events) and, unless disabled,
// listens for external plugins. A pre-registered plugin that fails to start
// is logged and left out, as in containerd; a socket that cannot be made
// is an error.
func (n *NRI) Start(domain Domain) error {
	if n == nil {
		return nil
	}
	if domain == nil {
		return errors.New("nri: no domain")
	}
	n.domain = domain
	if !n.opts.DisableConnections {
		// NRI replaces whatever is at the socket path: refuse to take the
		// socket of a runtime that is serving on it (containerd's, on a
		// node running both), rather than leave its plugins cut off. A
		// stale socket (nothing listening) is replaced.
		if c, err := net.DialTimeout("unix", n.opts.SocketPath, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("nri: %s is served by another process (another container runtime?); set [nri] socket_path", n.opts.SocketPath)
		}
	}
	processWide.Do(func() {
		nrilog.Set(logger{})
		if n.opts.RegistrationTimeout > 0 {
			adaptation.SetPluginRegistrationTimeout(n.opts.RegistrationTimeout)
		}
		if n.opts.RequestTimeout > 0 {
			adaptation.SetPluginRequestTimeout(n.opts.RequestTimeout)
		}
	})
	opts := []adaptation.Option{
		adaptation.WithPluginPath(n.opts.PluginPath),
		adaptation.WithPluginConfigPath(n.opts.PluginConfigPath),
		adaptation.WithSocketPath(n.opts.SocketPath),
	}
	if n.opts.DisableConnections {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	}
	if v := n.opts.Validator; v != nil && v.Enable {
		opts = append(opts, adaptation.WithDefaultValidator(v))
	}
	a, err := adaptation.New(RuntimeName, n.opts.Version, n.synchronize, n.update, opts...)
	if err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	if err := a.Start(); err != nil {
		return fmt.Errorf("nri: start: %w", err)
	}
	n.a.Store(a)
	return nil
}

// Stop closes the socket and stops the plugins (pre-registered plugins
// are killed).
func (n *NRI) Stop() {
	if a := n.get(); a != nil {
		a.Stop()
	}
}

// synchronize hands a newly registered plugin every pod and container,
// and applies the updates it answers with. NRI keeps events from the
// runtime (BlockPluginSync) out while an external plugin synchronizes.
func (n *NRI) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	pods, containers := n.domain.Snapshot(ctx)
	updates, err := cb(ctx, pods, containers)
	if err != nil {
		return fmt.Errorf("synchronize plugin: %w", err)
	}
	n.apply(ctx, "synchronize", updates)
	return nil
}

// update applies the updates a plugin asks for unasked
// (UpdateContainers).
func (n *NRI) update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return n.domain.UpdateContainers(ctx, updates)
}

// apply applies updates a plugin returned with an event or a
// synchronization; failures are logged (an update may say it can fail).
func (n *NRI) apply(ctx context.Context, event string, updates []*api.ContainerUpdate) {
	if len(updates) == 0 {
		return
	}
	failed, err := n.domain.UpdateContainers(ctx, updates)
	for _, u := range failed {
		if !u.GetIgnoreFailure() {
			log.G(ctx).Warn("NRI container update failed", "event", event, "container", u.GetContainerId())
		}
	}
	if err != nil {
		log.G(ctx).Warn("NRI container updates", "event", event, "err", err)
	}
}

// get returns the started adaptation, nil when NRI is disabled or not
// started.
func (n *NRI) get() *adaptation.Adaptation {
	if n == nil {
		return nil
	}
	return n.a.Load()
}

// event runs fn with plugin synchronization held off, so that a plugin
// registering meanwhile is synchronized before or after the event, not
// in the middle of it.
func event(a *adaptation.Adaptation, fn func() error) error {
	b := a.BlockPluginSync()
	defer b.Unblock()
	return fn()
}

// RunPodSandbox tells the plugins a pod is up.
func (n *NRI) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("RunPodSandbox", a.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}))
	})
}

// StopPodSandbox tells the plugins a pod has stopped.
func (n *NRI) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("StopPodSandbox", a.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod}))
	})
}

// RemovePodSandbox tells the plugins a pod is gone.
func (n *NRI) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("RemovePodSandbox", a.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod}))
	})
}

// CreateContainer asks the plugins for their adjustments to a container
// being created, applies them to spec, and applies the updates they
// return for other containers. ctr must describe spec (NewContainer). An
// error (a plugin refusing, or an adjustment that cannot be applied) must
// fail the create.
func (n *NRI) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, spec *rspec.Spec) error {
	a := n.get()
	if a == nil {
		return nil
	}
	var updates []*api.ContainerUpdate
	err := event(a, func() error {
		resp, err := a.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
		if isValidationRejection(err) {
			// The operator's rule, not the caller's mistake nor a
			// plugin's failure.
			return fmt.Errorf("NRI CreateContainer: refused by NRI validation ([nri.default_validator] or a validator plugin): %w: %w", err, errdefs.ErrPermissionDenied)
		}
		if err != nil {
			return wrap("CreateContainer", err)
		}
		var injectCDI func(*rspec.Spec, []string) error
		if n.opts.CDI != nil {
			injectCDI = func(spec *rspec.Spec, devices []string) error { return n.opts.CDI(ctx, spec, devices) }
		}
		if err := Adjust(spec, resp.GetAdjust(), injectCDI); err != nil {
			return fmt.Errorf("apply NRI adjustment: %w", err)
		}
		updates = resp.GetUpdate()
		return nil
	})
	if err != nil {
		return err
	}
	n.apply(ctx, "CreateContainer", updates)
	return nil
}

// PostCreateContainer tells the plugins a container was created.
func (n *NRI) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("PostCreateContainer", a.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr}))
	})
}

// StartContainer tells the plugins a container is about to start; an
// error fails the start.
func (n *NRI) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("StartContainer", a.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr}))
	})
}

// PostStartContainer tells the plugins a container has started.
func (n *NRI) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("PostStartContainer", a.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr}))
	})
}

// UpdateContainer asks the plugins about new resources for ctr and
// returns the resources to apply to it (res, or what the plugins made of
// it), and the updates they return for other containers, which the caller
// applies with ApplyUpdates once it holds no container's lock.
func (n *NRI) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *rspec.LinuxResources) (*rspec.LinuxResources, []*api.ContainerUpdate, error) {
	a := n.get()
	if a == nil {
		return res, nil, nil
	}
	var others []*api.ContainerUpdate
	err := event(a, func() error {
		resp, err := a.UpdateContainer(ctx, &api.UpdateContainerRequest{
			Pod: pod, Container: ctr, LinuxResources: api.FromOCILinuxResources(res, nil),
		})
		if err != nil {
			return wrap("UpdateContainer", err)
		}
		for _, u := range resp.GetUpdate() {
			switch {
			case u == nil:
			case u.GetContainerId() == ctr.GetId():
				if r := u.GetLinux().GetResources(); r != nil {
					res = r.ToOCI()
				}
			default:
				others = append(others, u)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return res, others, nil
}

// PostUpdateContainer tells the plugins a container's resources changed.
func (n *NRI) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("PostUpdateContainer", a.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr}))
	})
}

// StopContainer tells the plugins a container has stopped (by
// StopContainer or by exiting on its own). The updates they return for
// other containers are applied by the caller with ApplyUpdates, which
// must not hold a container's lock.
func (n *NRI) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	a := n.get()
	if a == nil {
		return nil, nil
	}
	var updates []*api.ContainerUpdate
	err := event(a, func() error {
		resp, err := a.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
		if err != nil {
			return wrap("StopContainer", err)
		}
		updates = resp.GetUpdate()
		return nil
	})
	return updates, err
}

// ApplyUpdates applies updates plugins returned for an event.
func (n *NRI) ApplyUpdates(ctx context.Context, event string, updates []*api.ContainerUpdate) {
	if n.get() != nil {
		n.apply(ctx, event, updates)
	}
}

// RemoveContainer tells the plugins a container is gone.
func (n *NRI) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("RemoveContainer", a.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr}))
	})
}

// Enabled reports whether NRI runs (n is not nil and started).
func (n *NRI) Enabled() bool { return n.get() != nil }

// isValidationRejection reports whether err is a validator's refusal of a
// container's adjustment. NRI v0.12.5 reports it only as text
// (api.ValidateContainerAdjustmentResponse.ValidationResult), for the
// built-in default validator as for validator plugins.
func isValidationRejection(err error) bool {
	return err != nil && (errors.Is(err, validator.ErrValidation) || strings.Contains(err.Error(), "rejected container adjustment, reason: "))
}

func wrap(event string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("NRI %s: %w", event, err)
}
