package nri

import (
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/runtime-tools/generate"
	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
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
// them. An adjustment that sets or removes an annotation in a reserved
// namespace (annotations.Reserved: the runtime stack's own keys, which
// runc or a VM runtime acts on) is refused whole: a plugin is trusted with
// the spec, but not to forge the keys that tell a sandbox from its
// containers or to smuggle unit properties past podbay.
func Adjust(spec *rspec.Spec, adj *api.ContainerAdjustment, injectCDI func(*rspec.Spec, []string) error) error {
	if adj == nil {
		return nil
	}
	if err := checkAnnotations(adj.GetAnnotations()); err != nil {
		return err
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

// checkAnnotations refuses an adjustment's annotation in a reserved
// namespace, set or marked for removal ("-key").
func checkAnnotations(adj map[string]string) error {
	for k := range adj {
		key, _ := api.IsMarkedForRemoval(k)
		if annotations.Reserved(key) {
			return fmt.Errorf("annotation %q is in a reserved namespace, which no plugin may set or remove", key)
		}
	}
	return nil
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
