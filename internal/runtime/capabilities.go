package runtime

import (
	"context"

	"github.com/podbay/podbay/internal/cgroups"
	"github.com/podbay/podbay/internal/ocifeatures"
)

// TaskReporter is a runtime that reports a container's statistics and
// processes itself, from where they run: a VM runtime, whose containers'
// cgroups and processes are inside the VM, where the host cannot read
// them.
type TaskReporter interface {
	TaskStats(ctx context.Context, id string) (*cgroups.Stats, error)
	TaskPids(ctx context.Context, id string) ([]int, error)
}

// MonitorWaiter is a runtime whose containers each have a monitor process
// (conmon) of their own, which WaitMonitor waits for (and kills after a
// grace period) once the container has exited.
type MonitorWaiter interface {
	WaitMonitor(ctx context.Context, id string) error
}

// Capabilities are what a runtime offers beyond Runtime, each one of this
// package's optional interfaces. A handler's are found once, when the
// handler is set up (CapabilitiesOf), so that no caller discovers them on
// the way. A nil field is a capability the runtime lacks:
type Capabilities struct {
	// Checkpointer nil: the handler cannot checkpoint containers (vm
	// handlers).
	Checkpointer Checkpointer
	// Restorer nil: the handler cannot create a container from a
	// checkpoint.
	Restorer Restorer
	// Pauser nil: the handler cannot freeze a container, so it cannot
	// checkpoint a pod.
	Pauser Pauser
	// Features nil: the handler supports the baseline features only.
	Features FeaturesRuntime
	// Tasks nil: the containers' statistics and processes are read from
	// their host cgroups.
	Tasks TaskReporter
	// Monitors nil: the containers have no monitor process of their own
	// to wait for on removal.
	Monitors MonitorWaiter
}

// CapabilitiesOf returns what rt offers beyond Runtime.
func CapabilitiesOf(rt Runtime) Capabilities {
	var c Capabilities
	c.Checkpointer, _ = rt.(Checkpointer)
	c.Restorer, _ = rt.(Restorer)
	c.Pauser, _ = rt.(Pauser)
	c.Features, _ = rt.(FeaturesRuntime)
	c.Tasks, _ = rt.(TaskReporter)
	c.Monitors, _ = rt.(MonitorWaiter)
	return c
}

// HandlerFeatures is what the handler supports beyond the baseline; the
// baseline's (the zero value) without Features.
func (c Capabilities) HandlerFeatures() ocifeatures.Handler {
	if c.Features == nil {
		return ocifeatures.Handler{}
	}
	return c.Features.Features()
}
