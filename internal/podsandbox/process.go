package podsandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/specgen"
)

// Host is what a controller needs of the daemon to make its sandbox's
// process and undo it; the server fills it in and passes it to the calls
// that make or remove something. The controller keeps nothing of it.
type Host struct {
	// PauseImage is the pause image, pulled or made when absent.
	PauseImage func(context.Context) (*image.Image, error)
	// Rootfs makes and removes the sandbox's root filesystem.
	Rootfs Rootfses
}

// Rootfses are the image store's root filesystems, as the sandbox kinds
// use them.
type Rootfses interface {
	CreateRootfs(ctx context.Context, id, imageID string, opts image.RootfsOptions) (string, error)
	RemoveRootfs(ctx context.Context, id string) error
}

// PlanRequest is what of a new pod decides its sandbox's plan.
type PlanRequest struct {
	ID string
	// IPC: the pod has an IPC namespace of its own. UTS: it has a
	// network of its own (with host network it has the host's UTS
	// namespace).
	IPC, UTS bool
}

// Plan is what a new sandbox is made of, decided before anything is made:
// the record keeps Image and the pin paths, so that recovery, GC and
// doctor find what a crash left.
type Plan struct {
	// Image is the pause image's ID and Args its command; empty for a
	// sandbox without a process, which runs no image.
	Image string
	Args  []string
	// IPC and UTS are the paths of the namespaces a pinned sandbox pins
	// (PinnedNamespaces); empty for the process kinds.
	IPC, UTS string
}

// Phases name the metrics phases of a kind's steps (the phase label of
// podbay_sandbox_phase_seconds); an empty name: the kind has no such step,
// and its time falls into the next phase.
type Phases struct {
	PauseImage, Rootfs, Create, Start, Stop, Delete string
}

// processPhases are the phases of the process kinds.
var processPhases = Phases{
	PauseImage: "pause_image", Rootfs: "rootfs", Create: "runtime_create", Start: "runtime_start",
	Stop: "runtime_stop", Delete: "runtime_delete",
}

// Plan ensures the pause image and names it.
func (process) Plan(ctx context.Context, h Host, _ PlanRequest) (Plan, error) {
	img, err := h.PauseImage(ctx)
	if err != nil {
		return Plan{}, err
	}
	return Plan{Image: img.ID, Args: PauseArgs(img)}, nil
}

// MakeRootfs makes sandbox id's root filesystem from the plan's pause
// image.
func (process) MakeRootfs(ctx context.Context, h Host, id string, plan Plan, opts image.RootfsOptions) (string, error) {
	rootfs, err := h.Rootfs.CreateRootfs(ctx, id, plan.Image, opts)
	if err != nil {
		return "", fmt.Errorf("create sandbox root filesystem: %w", err)
	}
	return rootfs, nil
}

// RemoveRootfs removes sandbox id's root filesystem. Idempotent.
func (process) RemoveRootfs(ctx context.Context, h Host, id string) error {
	return h.Rootfs.RemoveRootfs(ctx, id)
}

// Spec is the pause container's spec: desc running the plan's command on
// rootfs.
func (process) Spec(desc specgen.Sandbox, plan Plan, rootfs string) (*specs.Spec, error) {
	desc.RootfsPath, desc.Args = rootfs, plan.Args
	return specgen.SandboxSpec(desc)
}

func (process) Phases() Phases { return processPhases }

// Observe is told each step of a Release as it finishes: the step's
// phase name (Phases) and how long it took. Steps that run at once call
// it at once.
type Observe func(phase string, took time.Duration)

// Release deletes the dead pause container's runtime state and removes
// its root filesystem, both at once: they touch nothing of each other's
// once the process is dead. Both are idempotent.
func (p process) Release(ctx context.Context, h Host, id string, observe Observe) error {
	var (
		wg       sync.WaitGroup
		rtDelErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		if rtDelErr = p.Delete(ctx, id); rtDelErr != nil {
			rtDelErr = fmt.Errorf("delete sandbox container: %w", rtDelErr)
		}
		observe(processPhases.Delete, time.Since(start))
	}()
	start := time.Now()
	rootfsErr := p.RemoveRootfs(ctx, h, id)
	if rootfsErr != nil {
		rootfsErr = fmt.Errorf("remove sandbox root filesystem: %w", rootfsErr)
	}
	observe(processPhases.Rootfs, time.Since(start))
	wg.Wait()
	return errors.Join(rtDelErr, rootfsErr)
}

// PauseArgs is the pause image's command.
func PauseArgs(img *image.Image) []string {
	args := append(append([]string(nil), img.Config.Entrypoint...), img.Config.Cmd...)
	if len(args) == 0 {
		return []string{"/pause"}
	}
	return args
}

// Plan names the namespaces to pin; there is no image.
func (p pinned) Plan(_ context.Context, _ Host, req PlanRequest) (Plan, error) {
	ipc, uts := PinnedNamespaces(p.root, req.ID, req.IPC, req.UTS)
	return Plan{IPC: ipc, UTS: uts}, nil
}

// MakeRootfs makes nothing: a pinned sandbox has no root filesystem.
func (pinned) MakeRootfs(context.Context, Host, string, Plan, image.RootfsOptions) (string, error) {
	return "", nil
}

// RemoveRootfs removes nothing.
func (pinned) RemoveRootfs(context.Context, Host, string) error { return nil }

// Spec is desc with no process: the namespaces, hostname and sysctls
// Create pins.
func (pinned) Spec(desc specgen.Sandbox, _ Plan, _ string) (*specs.Spec, error) {
	desc.NoProcess = true
	return specgen.SandboxSpec(desc)
}

// Release removes the pins (Delete): there is nothing else.
func (p pinned) Release(ctx context.Context, _ Host, id string, observe Observe) error {
	start := time.Now()
	if err := p.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete sandbox container: %w", err)
	}
	observe(p.Phases().Delete, time.Since(start))
	return nil
}

// Phases: pinning is the create, unmounting the stop, removing the pins
// the delete; there is no image, root filesystem or start.
func (pinned) Phases() Phases {
	return Phases{Create: "pins", Stop: "unmount_pins", Delete: "remove_pins"}
}
