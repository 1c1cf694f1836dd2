package nri

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

func baseSpec() *rspec.Spec {
	shares := uint64(1024)
	return &rspec.Spec{
		Annotations: map[string]string{"keep": "1", "drop": "1"},
		Process:     &rspec.Process{Args: []string{"sleep", "1"}, Env: []string{"PATH=/bin", "OLD=1"}},
		Mounts:      []rspec.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}, {Destination: "/old", Source: "/host/old", Type: "bind"}},
		Linux: &rspec.Linux{
			Resources: &rspec.LinuxResources{CPU: &rspec.LinuxCPU{Shares: &shares}},
			Devices:   []rspec.LinuxDevice{{Path: "/dev/old", Type: "c", Major: 1, Minor: 5}},
		},
	}
}

func TestAdjust(t *testing.T) {
	tests := []struct {
		name   string
		adjust func(a *api.ContainerAdjustment)
		check  func(t *testing.T, s *rspec.Spec)
	}{
		{"annotations", func(a *api.ContainerAdjustment) {
			a.AddAnnotation("added", "v")
			a.RemoveAnnotation("drop")
		}, func(t *testing.T, s *rspec.Spec) {
			if s.Annotations["added"] != "v" || s.Annotations["keep"] != "1" || s.Annotations["drop"] != "" {
				t.Errorf("annotations = %v", s.Annotations)
			}
		}},
		{"env", func(a *api.ContainerAdjustment) {
			a.AddEnv("NEW", "x")
			a.RemoveEnv("OLD")
		}, func(t *testing.T, s *rspec.Spec) {
			if !slices.Contains(s.Process.Env, "NEW=x") || slices.Contains(s.Process.Env, "OLD=1") || !slices.Contains(s.Process.Env, "PATH=/bin") {
				t.Errorf("env = %v", s.Process.Env)
			}
		}},
		{"args", func(a *api.ContainerAdjustment) { a.SetArgs([]string{"/bin/true"}) }, func(t *testing.T, s *rspec.Spec) {
			if !slices.Equal(s.Process.Args, []string{"/bin/true"}) {
				t.Errorf("args = %v", s.Process.Args)
			}
		}},
		{"mounts", func(a *api.ContainerAdjustment) {
			a.AddMount(&api.Mount{Destination: "/new", Source: "/host/new", Type: "bind", Options: []string{"rbind", "ro"}})
			a.RemoveMount("/old")
		}, func(t *testing.T, s *rspec.Spec) {
			var dests []string
			for _, m := range s.Mounts {
				dests = append(dests, m.Destination)
			}
			if !slices.Contains(dests, "/new") || slices.Contains(dests, "/old") || !slices.Contains(dests, "/proc") {
				t.Errorf("mounts = %v", dests)
			}
		}},
		{"devices", func(a *api.ContainerAdjustment) {
			a.AddDevice(&api.LinuxDevice{Path: "/dev/nri", Type: "c", Major: 1, Minor: 3, FileMode: api.FileMode(0o666)})
			a.RemoveDevice("/dev/old")
		}, func(t *testing.T, s *rspec.Spec) {
			if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/nri" {
				t.Errorf("devices = %v", s.Linux.Devices)
			}
			allowed := false
			for _, d := range s.Linux.Resources.Devices {
				if d.Allow && d.Type == "c" && d.Major != nil && *d.Major == 1 && d.Minor != nil && *d.Minor == 3 {
					allowed = true
				}
			}
			if !allowed {
				t.Errorf("device cgroup rules = %v: /dev/nri not allowed", s.Linux.Resources.Devices)
			}
		}},
		{"resources", func(a *api.ContainerAdjustment) {
			a.SetLinuxMemoryLimit(128 << 20)
			a.SetLinuxCPUShares(256)
			a.SetLinuxCPUSetCPUs("0")
		}, func(t *testing.T, s *rspec.Spec) {
			r := s.Linux.Resources
			if *r.Memory.Limit != 128<<20 || *r.CPU.Shares != 256 || r.CPU.Cpus != "0" {
				t.Errorf("resources = %+v %+v", r.Memory, r.CPU)
			}
		}},
		{"hooks", func(a *api.ContainerAdjustment) {
			a.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{{Path: "/bin/hook", Args: []string{"hook", "create"}}}})
		}, func(t *testing.T, s *rspec.Spec) {
			if s.Hooks == nil || len(s.Hooks.CreateRuntime) != 1 || s.Hooks.CreateRuntime[0].Path != "/bin/hook" {
				t.Errorf("hooks = %+v", s.Hooks)
			}
		}},
		{"rlimits", func(a *api.ContainerAdjustment) { a.AddRlimit("RLIMIT_NOFILE", 4096, 1024) }, func(t *testing.T, s *rspec.Spec) {
			if len(s.Process.Rlimits) != 1 || s.Process.Rlimits[0] != (rspec.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}) {
				t.Errorf("rlimits = %v", s.Process.Rlimits)
			}
		}},
		{"oom score and sysctl", func(a *api.ContainerAdjustment) {
			score := 100
			a.SetLinuxOomScoreAdj(&score)
			a.SetLinuxSysctl("net.core.somaxconn", "1024")
		}, func(t *testing.T, s *rspec.Spec) {
			if s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != 100 || s.Linux.Sysctl["net.core.somaxconn"] != "1024" {
				t.Errorf("oom %v sysctl %v", s.Process.OOMScoreAdj, s.Linux.Sysctl)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := baseSpec()
			adj := &api.ContainerAdjustment{}
			tt.adjust(adj)
			if err := Adjust(spec, adj, nil); err != nil {
				t.Fatalf("Adjust: %v", err)
			}
			tt.check(t, spec)
		})
	}
}

func TestAdjustRefuses(t *testing.T) {
	for name, adjust := range map[string]func(a *api.ContainerAdjustment){
		"CDI device":     func(a *api.ContainerAdjustment) { a.AddCDIDevice(&api.CDIDevice{Name: "vendor.com/gpu=0"}) },
		"tiny memory":    func(a *api.ContainerAdjustment) { a.SetLinuxMemoryLimit(1 << 20) },
		"cpu shares":     func(a *api.ContainerAdjustment) { a.SetLinuxCPUShares(1) },
		"namespace type": func(a *api.ContainerAdjustment) { a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "bogus"}) },

		// rshared needs a shared root propagation, which the spec lacks.
		"shared mount": func(a *api.ContainerAdjustment) {
			a.AddMount(&api.Mount{Destination: "/x", Source: "/y", Type: "bind", Options: []string{"rbind", "rshared"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			adj := &api.ContainerAdjustment{}
			adjust(adj)
			err := Adjust(baseSpec(), adj, nil)
			if err == nil {
				t.Fatal("Adjust accepted it")
			}
			if name == "CDI device" && !strings.Contains(err.Error(), "CDI") {
				t.Errorf("error %q does not name CDI", err)
			}
		})
	}
	if err := Adjust(baseSpec(), nil, nil); err != nil {
		t.Errorf("nil adjustment: %v", err)
	}
}

// A plugin may neither set nor remove an annotation in a reserved
// namespace: runc acts on org.systemd.property.* and org.criu.config, and
// VM runtimes trust io.kubernetes.cri.* and io.kubernetes.cri-o.* to tell
// a sandbox from its containers. Other keys pass.
func TestAdjustRefusesReservedAnnotations(t *testing.T) {
	for _, tc := range []struct {
		key    string
		remove bool
	}{
		{"org.systemd.property.ExecStartPre", false},
		{"org.criu.config", false},
		{"io.kubernetes.cri.container-type", false},
		{"io.kubernetes.cri-o.ContainerType", false},
		{"run.oci.keep_original_groups", false},
		{"io.kubernetes.cri.sandbox-id", true},
	} {
		adj := &api.ContainerAdjustment{}
		if tc.remove {
			adj.RemoveAnnotation(tc.key)
		} else {
			adj.AddAnnotation(tc.key, "x")
		}
		spec := baseSpec()
		spec.Annotations = map[string]string{"io.kubernetes.cri.sandbox-id": "sb"}
		err := Adjust(spec, adj, nil)
		if err == nil || !strings.Contains(err.Error(), "reserved") || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s (remove %v): error %v, want a refusal naming the reserved key", tc.key, tc.remove, err)
		}
		if _, set := spec.Annotations[tc.key]; set != (tc.key == "io.kubernetes.cri.sandbox-id") {
			t.Errorf("%s: the refused adjustment changed the spec: %v", tc.key, spec.Annotations)
		}
	}
	adj := &api.ContainerAdjustment{}
	adj.AddAnnotation("example.com/team", "a")
	adj.AddAnnotation("io.katacontainers.config.hypervisor.default_vcpus", "2")
	spec := baseSpec()
	if err := Adjust(spec, adj, nil); err != nil || spec.Annotations["example.com/team"] != "a" {
		t.Errorf("an ordinary annotation: %v, %v", err, spec.Annotations)
	}
}

// A plugin's CDI devices go to the injector the daemon gives (its
// cdi_spec_dirs registry), and its refusal fails the adjustment.
func TestAdjustInjectsCDIDevices(t *testing.T) {
	adj := &api.ContainerAdjustment{}
	adj.AddCDIDevice(&api.CDIDevice{Name: "vendor.com/gpu=0"})
	var got []string
	inject := func(spec *rspec.Spec, devices []string) error {
		got = append(got, devices...)
		spec.Process.Env = append(spec.Process.Env, "GPU=0")
		return nil
	}
	spec := baseSpec()
	if err := Adjust(spec, adj, inject); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"vendor.com/gpu=0"}) || !slices.Contains(spec.Process.Env, "GPU=0") {
		t.Errorf("injected %q, env %q", got, spec.Process.Env)
	}
	refuse := func(*rspec.Spec, []string) error { return errors.New("unresolvable CDI devices vendor.com/gpu=0") }
	if err := Adjust(baseSpec(), adj, refuse); err == nil || !strings.Contains(err.Error(), "vendor.com/gpu=0") {
		t.Errorf("refused injection: %v", err)
	}
}
