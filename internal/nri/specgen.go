package nri

import (
	"fmt"
	"slices"
	"strings"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// specGen is the spec editor NRI's generator (pkg/runtime-tools/generate)
// drives, working on the spec in place; it stands in for
// opencontainers/runtime-tools' generator, which would pull in that
// module's validation and its dependencies for a few setters.
type specGen struct {
	spec *rspec.Spec
}

func (g *specGen) Spec() *rspec.Spec { return g.spec }

func (g *specGen) process() *rspec.Process {
	if g.spec.Process == nil {
		g.spec.Process = &rspec.Process{}
	}
	return g.spec.Process
}

func (g *specGen) linux() *rspec.Linux {
	if g.spec.Linux == nil {
		g.spec.Linux = &rspec.Linux{}
	}
	return g.spec.Linux
}

func (g *specGen) resources() *rspec.LinuxResources {
	l := g.linux()
	if l.Resources == nil {
		l.Resources = &rspec.LinuxResources{}
	}
	return l.Resources
}

func (g *specGen) cpu() *rspec.LinuxCPU {
	r := g.resources()
	if r.CPU == nil {
		r.CPU = &rspec.LinuxCPU{}
	}
	return r.CPU
}

func (g *specGen) memory() *rspec.LinuxMemory {
	r := g.resources()
	if r.Memory == nil {
		r.Memory = &rspec.LinuxMemory{}
	}
	return r.Memory
}

func (g *specGen) hooks() *rspec.Hooks {
	if g.spec.Hooks == nil {
		g.spec.Hooks = &rspec.Hooks{}
	}
	return g.spec.Hooks
}

func (g *specGen) AddAnnotation(key, value string) {
	if g.spec.Annotations == nil {
		g.spec.Annotations = map[string]string{}
	}
	g.spec.Annotations[key] = value
}

func (g *specGen) RemoveAnnotation(key string) { delete(g.spec.Annotations, key) }

// AddDevice adds a device node, replacing one at the same path.
func (g *specGen) AddDevice(d rspec.LinuxDevice) {
	l := g.linux()
	for i := range l.Devices {
		if l.Devices[i].Path == d.Path {
			l.Devices[i] = d
			return
		}
	}
	l.Devices = append(l.Devices, d)
}

func (g *specGen) RemoveDevice(path string) {
	if g.spec.Linux == nil {
		return
	}
	g.spec.Linux.Devices = slices.DeleteFunc(g.spec.Linux.Devices, func(d rspec.LinuxDevice) bool { return d.Path == path })
}

// namespaceTypes are the namespace names NRI uses, as runtime-tools
// spells them.
var namespaceTypes = map[string]rspec.LinuxNamespaceType{
	"network": rspec.NetworkNamespace, "net": rspec.NetworkNamespace,
	"pid": rspec.PIDNamespace, "mount": rspec.MountNamespace, "mnt": rspec.MountNamespace,
	"ipc": rspec.IPCNamespace, "uts": rspec.UTSNamespace, "user": rspec.UserNamespace,
	"cgroup": rspec.CgroupNamespace, "time": rspec.TimeNamespace,
}

func namespaceType(ns string) (rspec.LinuxNamespaceType, error) {
	if t, ok := namespaceTypes[ns]; ok {
		return t, nil
	}
	if t := rspec.LinuxNamespaceType(ns); slices.Contains([]rspec.LinuxNamespaceType{
		rspec.NetworkNamespace, rspec.MountNamespace, rspec.PIDNamespace, rspec.IPCNamespace,
		rspec.UTSNamespace, rspec.UserNamespace, rspec.CgroupNamespace, rspec.TimeNamespace,
	}, t) {
		return t, nil
	}
	return "", fmt.Errorf("unknown namespace type %q", ns)
}

func (g *specGen) AddOrReplaceLinuxNamespace(ns, path string) error {
	t, err := namespaceType(ns)
	if err != nil {
		return err
	}
	l := g.linux()
	for i := range l.Namespaces {
		if l.Namespaces[i].Type == t {
			l.Namespaces[i].Path = path
			return nil
		}
	}
	l.Namespaces = append(l.Namespaces, rspec.LinuxNamespace{Type: t, Path: path})
	return nil
}

func (g *specGen) RemoveLinuxNamespace(ns string) error {
	t, err := namespaceType(ns)
	if err != nil {
		return err
	}
	if g.spec.Linux != nil {
		g.spec.Linux.Namespaces = slices.DeleteFunc(g.spec.Linux.Namespaces, func(n rspec.LinuxNamespace) bool { return n.Type == t })
	}
	return nil
}

func (g *specGen) AddPreStartHook(h rspec.Hook) {
	hs := g.hooks()
	//lint:ignore SA1019 NRI plugins may still ask for prestart hooks
	hs.Prestart = append(hs.Prestart, h)
}

func (g *specGen) AddPostStartHook(h rspec.Hook) {
	hs := g.hooks()
	hs.Poststart = append(hs.Poststart, h)
}

func (g *specGen) AddPostStopHook(h rspec.Hook) {
	hs := g.hooks()
	hs.Poststop = append(hs.Poststop, h)
}

// AddProcessEnv sets name, replacing its earlier value.
func (g *specGen) AddProcessEnv(name, value string) {
	if name == "" {
		return
	}
	p := g.process()
	for i, kv := range p.Env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			p.Env[i] = name + "=" + value
			return
		}
	}
	p.Env = append(p.Env, name+"="+value)
}

func (g *specGen) ClearProcessEnv() {
	if g.spec.Process != nil {
		g.spec.Process.Env = []string{}
	}
}

func (g *specGen) SetProcessArgs(args []string) { g.process().Args = args }

func (g *specGen) SetProcessOOMScoreAdj(adj int) { g.process().OOMScoreAdj = &adj }

func (g *specGen) AddMount(m rspec.Mount) { g.spec.Mounts = append(g.spec.Mounts, m) }

func (g *specGen) RemoveMount(dest string) {
	g.spec.Mounts = slices.DeleteFunc(g.spec.Mounts, func(m rspec.Mount) bool { return m.Destination == dest })
}

func (g *specGen) ClearMounts() { g.spec.Mounts = []rspec.Mount{} }

func (g *specGen) Mounts() []rspec.Mount { return g.spec.Mounts }

func (g *specGen) AddLinuxSysctl(key, value string) {
	l := g.linux()
	if l.Sysctl == nil {
		l.Sysctl = map[string]string{}
	}
	l.Sysctl[key] = value
}

func (g *specGen) RemoveLinuxSysctl(key string) {
	if g.spec.Linux != nil {
		delete(g.spec.Linux.Sysctl, key)
	}
}

func (g *specGen) SetLinuxCgroupsPath(path string) { g.linux().CgroupsPath = path }

func (g *specGen) SetLinuxRootPropagation(rp string) error {
	switch rp {
	case "", "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable":
	default:
		return fmt.Errorf("rootfs propagation %q: want (r)private, (r)slave, (r)shared or (r)unbindable", rp)
	}
	g.linux().RootfsPropagation = rp
	return nil
}

func (g *specGen) AddLinuxResourcesDevice(allow bool, devType string, major, minor *int64, access string) {
	r := g.resources()
	r.Devices = append(r.Devices, rspec.LinuxDeviceCgroup{Allow: allow, Type: devType, Major: major, Minor: minor, Access: access})
}

// AddLinuxResourcesHugepageLimit sets the limit of a page size, replacing
// its earlier limit.
func (g *specGen) AddLinuxResourcesHugepageLimit(pageSize string, limit uint64) {
	r := g.resources()
	for i := range r.HugepageLimits {
		if r.HugepageLimits[i].Pagesize == pageSize {
			r.HugepageLimits[i].Limit = limit
			return
		}
	}
	r.HugepageLimits = append(r.HugepageLimits, rspec.LinuxHugepageLimit{Pagesize: pageSize, Limit: limit})
}

func (g *specGen) AddLinuxResourcesUnified(key, val string) {
	r := g.resources()
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[key] = val
}

func (g *specGen) SetLinuxResourcesCPUCpus(cpus string)        { g.cpu().Cpus = cpus }
func (g *specGen) SetLinuxResourcesCPUMems(mems string)        { g.cpu().Mems = mems }
func (g *specGen) SetLinuxResourcesCPUPeriod(period uint64)    { g.cpu().Period = &period }
func (g *specGen) SetLinuxResourcesCPUQuota(quota int64)       { g.cpu().Quota = &quota }
func (g *specGen) SetLinuxResourcesCPUShares(shares uint64)    { g.cpu().Shares = &shares }
func (g *specGen) SetLinuxResourcesMemoryLimit(limit int64)    { g.memory().Limit = &limit }
func (g *specGen) SetLinuxResourcesMemorySwap(swap int64)      { g.memory().Swap = &swap }
func (g *specGen) SetLinuxResourcesCPURealtimeRuntime(t int64) { g.cpu().RealtimeRuntime = &t }
func (g *specGen) SetLinuxResourcesCPURealtimePeriod(period uint64) {
	g.cpu().RealtimePeriod = &period
}
