package nri

import (
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/runtime-tools/generate"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// errNoCDI refuses CDI devices a plugin asks for: podbay's NRI does not
// resolve CDI names, and a container without the device it was promised
// must not start as if it had it.
var errNoCDI = errors.New("CDI devices requested by an NRI plugin, but CDI injection is not available")

// Adjust applies a plugin adjustment to spec in place: annotations,
// environment, arguments, hooks, devices, mounts, resources, cgroups path,
// OOM score, I/O priority, scheduler, seccomp policy, namespaces, sysctls,
// network devices, memory policy, RDT and rlimits, as NRI's generator
// defines them.
//
// CDI devices a plugin asks for are resolved by injectCDI; nil refuses
// them.
func Adjust(spec *rspec.Spec, adj *api.ContainerAdjustment, injectCDI func(*rspec.Spec, []string) error) error {
	if adj == nil {
		return nil
	}
	if injectCDI == nil {
		injectCDI = func(*rspec.Spec, []string) error { return errNoCDI }
	}
	gen := generate.SpecGenerator(&specGen{spec: spec},
		generate.WithCDIDeviceInjector(injectCDI),
		generate.WithResourceChecker(checkResources),
	)
	return gen.Adjust(adj)
}

// minMemoryLimit is runc's floor for a memory limit (as specgen's
// checks).
const minMemoryLimit = 6 << 20

// checkResources refuses resources no runtime would accept, so that a
// plugin's bad value fails the create with a message naming NRI rather
// than a runtime error.
func checkResources(r *rspec.LinuxResources) error {
	if r == nil {
		return nil
	}
	if m := r.Memory; m != nil && m.Limit != nil && *m.Limit > 0 && *m.Limit < minMemoryLimit {
		return fmt.Errorf("memory limit %d is below the minimum of %d bytes", *m.Limit, minMemoryLimit)
	}
	if c := r.CPU; c != nil {
		if c.Shares != nil && *c.Shares != 0 && (*c.Shares < 2 || *c.Shares > 262144) {
			return fmt.Errorf("cpu shares %d out of range [2, 262144]", *c.Shares)
		}
		if c.Period != nil && *c.Period != 0 && (*c.Period < 1000 || *c.Period > 1000000) {
			return fmt.Errorf("cpu period %d out of range [1000, 1000000]", *c.Period)
		}
	}
	return nil
}
