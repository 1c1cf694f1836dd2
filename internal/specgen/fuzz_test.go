package specgen

import (
	"encoding/json"
	"errors"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
)

// The fuzz targets describe a pod or a container as text, one directive a
// line ("<key> <fields>", fields split on single spaces), so that seeds stay
// readable and the mutator, working on bytes, still produces most
// directives intact. Unknown keys and unparsable numbers are ignored. The
// server always passes the same three sandbox files; so do the targets.

func fuzzFiles() []File {
	return []File{
		{Source: "/var/lib/podbay/sandboxes/sb/resolv.conf", Dest: "/etc/resolv.conf"},
		{Source: "/var/lib/podbay/sandboxes/sb/hostname", Dest: "/etc/hostname"},
		{Source: "/var/lib/podbay/sandboxes/sb/hosts", Dest: "/etc/hosts"},
	}
}

// directives splits text into (key, fields) pairs.
func directives(text string) [][]string {
	var out [][]string
	for _, line := range strings.Split(text, "\n") {
		key, rest, _ := strings.Cut(line, " ")
		out = append(out, append([]string{key}, strings.Split(rest, " ")...))
	}
	return out
}

func field(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

func intField(f []string, i int) (int64, bool) {
	n, err := strconv.ParseInt(field(f, i), 10, 64)
	return n, err == nil
}

func uintField(f []string, i int) uint64 {
	n, _ := strconv.ParseUint(field(f, i), 10, 64)
	return n
}

func restField(f []string) string { return strings.Join(f[1:], " ") }

// sandboxFromText reads a Sandbox. Directives: id, name, namespace, uid,
// logdir, rootfs, netns, hostname, cgroups, arg (one argument a line),
// sysctl KEY VALUE, oom N, minoom N, user N, group N, supgroup N,
// privileged, hostnet, hostpid, hostipc, cap NAME, resources SHARES QUOTA
// PERIOD MEMORY, annotation KEY VALUE.
func sandboxFromText(text string) Sandbox {
	sb := Sandbox{Files: fuzzFiles()}
	for _, f := range directives(text) {
		switch f[0] {
		case "id":
			sb.ID = restField(f)
		case "name":
			sb.Name = restField(f)
		case "namespace":
			sb.Namespace = restField(f)
		case "uid":
			sb.UID = restField(f)
		case "logdir":
			sb.LogDir = restField(f)
		case "rootfs":
			sb.RootfsPath = restField(f)
		case "netns":
			sb.NetNSPath = restField(f)
		case "hostname":
			sb.Hostname = restField(f)
		case "cgroups":
			sb.CgroupsPath = restField(f)
		case "arg":
			sb.Args = append(sb.Args, restField(f))
		case "sysctl":
			if sb.Sysctls == nil {
				sb.Sysctls = map[string]string{}
			}
			sb.Sysctls[field(f, 1)] = field(f, 2)
		case "oom":
			if n, ok := intField(f, 1); ok {
				v := int(n)
				sb.OOMScoreAdj = &v
			}
		case "minoom":
			if n, ok := intField(f, 1); ok {
				v := int(n)
				sb.MinOOMScoreAdj = &v
			}
		case "user":
			if n, ok := intField(f, 1); ok {
				sb.RunAsUser = &n
			}
		case "group":
			if n, ok := intField(f, 1); ok {
				sb.RunAsGroup = &n
			}
		case "supgroup":
			if n, ok := intField(f, 1); ok {
				sb.SupplementalGroups = append(sb.SupplementalGroups, n)
			}
		case "privileged":
			sb.Privileged = true
		case "hostnet":
			sb.HostNetwork = true
		case "hostpid":
			sb.HostPID = true
		case "hostipc":
			sb.HostIPC = true
		case "cap":
			sb.Capabilities = append(sb.Capabilities, field(f, 1))
		case "resources":
			sb.HasResources = true
			sb.CPUShares = uintField(f, 1)
			sb.CPUQuota, _ = intField(f, 2)
			sb.CPUPeriod = uintField(f, 3)
			sb.MemoryLimit, _ = intField(f, 4)
		case "annotation":
			if sb.Annotations == nil {
				sb.Annotations = map[string]string{}
			}
			sb.Annotations[field(f, 1)] = field(f, 2)
		}
	}
	return sb
}

// containerFromText reads a Container and the Host it is built for.
// Directives: id, name, rootfs, image NAME, entrypoint ARG, cmd ARG,
// imageenv K=V, imagedir, command ARG, arg ARG, env KEY VALUE (the key may
// hold '='), workdir, tty, hostname; sandbox ID, sbname, sbnamespace,
// sbuid, netns, hostnet, pid N, cgroupparent, shm PATH, sbprivileged;
// mount CTR HOST [ro] [PROPAGATION]; device PATH TYPE MAJOR MINOR [PERMS]
// [MODE]; privileged, capadd, capdrop, readonly, nonewprivs, seccomp
// unconfined|default|localhost, seccompjson DOC (the Localhost profile),
// apparmor unconfined|default|localhost [NAME], masked PATH, readonlypath
// PATH, unmasked (empty lists), sysctl KEY VALUE, pidmode N, targetpid N,
// ipcmode N; cpu SHARES QUOTA PERIOD [CPUS] [MEMS], memory LIMIT [SWAP],
// hugepage SIZE LIMIT, oom N, pids N, unified KEY VALUE; host: cgroupv2,
// swap, hugetlb, apparmor [DEFAULT], hostcap NAME, minoom N, hostdevice
// (as device).
func containerFromText(text string) (Container, Host) {
	c := Container{Files: fuzzFiles()}
	var host Host
	for _, f := range directives(text) {
		switch f[0] {
		case "id":
			c.ID = restField(f)
		case "name":
			c.Name = restField(f)
		case "rootfs":
			c.RootfsPath = restField(f)
		case "image":
			c.Image.Name = restField(f)
		case "entrypoint":
			c.Image.Entrypoint = append(c.Image.Entrypoint, restField(f))
		case "cmd":
			c.Image.Cmd = append(c.Image.Cmd, restField(f))
		case "imageenv":
			c.Image.Env = append(c.Image.Env, restField(f))
		case "imagedir":
			c.Image.WorkingDir = restField(f)
		case "command":
			c.Command = append(c.Command, restField(f))
		case "arg":
			c.Args = append(c.Args, restField(f))
		case "env":
			c.Env = append(c.Env, KeyValue{Key: field(f, 1), Value: strings.Join(f[min(2, len(f)):], " ")})
		case "workdir":
			c.WorkingDir = restField(f)
		case "tty":
			c.Tty = true
		case "hostname":
			c.Hostname = restField(f)
		case "sandbox":
			c.Sandbox.ID = restField(f)
		case "sbname":
			c.Sandbox.Name = restField(f)
		case "sbnamespace":
			c.Sandbox.Namespace = restField(f)
		case "sbuid":
			c.Sandbox.UID = restField(f)
		case "netns":
			c.Sandbox.NetNSPath = restField(f)
		case "hostnet":
			c.Sandbox.HostNetwork = true
		case "pid":
			if n, ok := intField(f, 1); ok {
				c.Sandbox.PID = int(n)
			}
		case "cgroupparent":
			c.Sandbox.CgroupParent = restField(f)
		case "shm":
			c.Sandbox.ShmPath = restField(f)
		case "sbprivileged":
			c.Sandbox.Privileged = true
		case "mount":
			m := Mount{ContainerPath: field(f, 1), HostPath: field(f, 2)}
			for _, o := range f[min(3, len(f)):] {
				if o == "ro" {
					m.Readonly = true
				} else {
					m.Propagation = Propagation(o)
				}
			}
			c.Mounts = append(c.Mounts, m)
		case "device":
			c.Devices = append(c.Devices, deviceFromFields(f))
		case "hostdevice":
			// The host's devices come from one listing of /dev: unique.
			d := deviceFromFields(f)
			if !slices.ContainsFunc(host.Devices, func(h Device) bool { return path.Clean(h.ContainerPath) == path.Clean(d.ContainerPath) }) {
				host.Devices = append(host.Devices, d)
			}
		case "privileged":
			c.Security.Privileged = true
		case "capadd":
			c.Security.CapAdd = append(c.Security.CapAdd, restField(f))
		case "capdrop":
			c.Security.CapDrop = append(c.Security.CapDrop, restField(f))
		case "readonly":
			c.Security.ReadonlyRootfs = true
		case "nonewprivs":
			c.Security.NoNewPrivs = true
		case "seccomp":
			c.Security.Seccomp.Type = profileType(field(f, 1))
		case "seccompjson":
			c.Security.Seccomp.Localhost = []byte(restField(f))
		case "apparmor":
			c.Security.AppArmor = AppArmorProfile{Type: profileType(field(f, 1)), Localhost: field(f, 2)}
		case "masked":
			c.Security.MaskedPaths = append(c.Security.MaskedPaths, restField(f))
		case "readonlypath":
			c.Security.ReadonlyPaths = append(c.Security.ReadonlyPaths, restField(f))
		case "unmasked":
			c.Security.MaskedPaths, c.Security.ReadonlyPaths = []string{}, []string{}
		case "sysctl":
			if c.Security.Sysctls == nil {
				c.Security.Sysctls = map[string]string{}
			}
			c.Security.Sysctls[field(f, 1)] = field(f, 2)
		case "pidmode":
			if n, ok := intField(f, 1); ok {
				c.Security.Namespaces.Pid = NamespaceMode(n)
			}
		case "targetpid":
			if n, ok := intField(f, 1); ok {
				c.Security.Namespaces.TargetPID = int(n)
			}
		case "ipcmode":
			if n, ok := intField(f, 1); ok {
				c.Security.Namespaces.Ipc = NamespaceMode(n)
			}
		case "cpu":
			c.Resources.CPUShares = uintField(f, 1)
			c.Resources.CPUQuota, _ = intField(f, 2)
			c.Resources.CPUPeriod = uintField(f, 3)
			c.Resources.CpusetCpus, c.Resources.CpusetMems = field(f, 4), field(f, 5)
		case "memory":
			c.Resources.MemoryLimit, _ = intField(f, 1)
			c.Resources.MemorySwapLimit, _ = intField(f, 2)
		case "hugepage":
			if c.Resources.HugepageLimits == nil {
				c.Resources.HugepageLimits = map[string]uint64{}
			}
			c.Resources.HugepageLimits[field(f, 1)] = uintField(f, 2)
		case "oom":
			if n, ok := intField(f, 1); ok {
				c.Resources.OOMScoreAdj = int(n)
			}
		case "pids":
			c.Resources.PidsLimit, _ = intField(f, 1)
		case "unified":
			if c.Resources.Unified == nil {
				c.Resources.Unified = map[string]string{}
			}
			c.Resources.Unified[field(f, 1)] = field(f, 2)
		case "cgroupv2":
			host.CgroupV2 = true
		case "swap":
			host.SwapControl = true
		case "hugetlb":
			host.Hugetlb = true
		case "hostapparmor":
			host.AppArmor, host.AppArmorDefaultProfile = true, field(f, 1)
		case "hostcap":
			host.Capabilities = append(host.Capabilities, field(f, 1))
		case "minoom":
			if n, ok := intField(f, 1); ok {
				v := int(n)
				host.MinOOMScoreAdj = &v
			}
		}
	}
	return c, host
}

func deviceFromFields(f []string) Device {
	d := Device{ContainerPath: field(f, 1), Type: field(f, 2), Permissions: field(f, 5)}
	d.Major, _ = intField(f, 3)
	d.Minor, _ = intField(f, 4)
	mode, _ := strconv.ParseUint(field(f, 6), 8, 32)
	d.FileMode = os.FileMode(mode)
	return d
}

func profileType(s string) ProfileType {
	switch s {
	case "default":
		return ProfileRuntimeDefault
	case "localhost":
		return ProfileLocalhost
	case "unconfined", "":
		return ProfileUnconfined
	}
	n, _ := strconv.Atoi(s)
	return ProfileType(n)
}

// classified reports whether err carries one of the classes a bad request
// maps to: the server returns these errors to the kubelet, and an
// unclassified one would reach it as codes.Unknown.
func classified(err error) bool {
	return errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrFailedPrecondition)
}

// checkNamespaces checks that no namespace type appears twice and that
// every type is one the OCI spec knows.
func checkNamespaces(t *testing.T, ns []specs.LinuxNamespace) map[specs.LinuxNamespaceType]specs.LinuxNamespace {
	t.Helper()
	known := []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.MountNamespace,
		specs.IPCNamespace, specs.UTSNamespace, specs.UserNamespace, specs.CgroupNamespace, specs.TimeNamespace}
	byType := map[specs.LinuxNamespaceType]specs.LinuxNamespace{}
	for _, n := range ns {
		if !slices.Contains(known, n.Type) {
			t.Fatalf("unknown namespace type %q", n.Type)
		}
		if _, dup := byType[n.Type]; dup {
			t.Fatalf("namespace %s twice: %v", n.Type, ns)
		}
		byType[n.Type] = n
	}
	if _, ok := byType[specs.MountNamespace]; !ok {
		t.Fatalf("no mount namespace: %v", ns)
	}
	return byType
}

// checkMounts checks that destinations are absolute, clean and unique, and
// with ordered (setMounts promises it) that a parent comes before its
// children.
func checkMounts(t *testing.T, mounts []specs.Mount, ordered bool) map[string]specs.Mount {
	t.Helper()
	byDest := map[string]specs.Mount{}
	depth := 0
	for _, m := range mounts {
		d := m.Destination
		if !path.IsAbs(d) || path.Clean(d) != d {
			t.Fatalf("mount destination %q is not a clean absolute path", d)
		}
		if _, dup := byDest[d]; dup {
			t.Fatalf("two mounts at %s: %+v", d, mounts)
		}
		byDest[d] = m
		if md := mountDepth(d); ordered && md < depth {
			t.Fatalf("mount %s after a deeper one: %+v", d, mounts)
		} else {
			depth = md
		}
	}
	return byDest
}

func checkCapabilities(t *testing.T, c *specs.LinuxCapabilities, allowed []string) {
	t.Helper()
	if c == nil {
		t.Fatal("no capabilities")
	}
	if !slices.IsSorted(c.Bounding) || !slices.Equal(c.Bounding, c.Effective) || !slices.Equal(c.Bounding, c.Permitted) {
		t.Fatalf("capability sets differ or are unsorted: %+v", c)
	}
	for _, cp := range c.Bounding {
		if !slices.Contains(allowed, cp) {
			t.Fatalf("capability %s is neither known nor the host's", cp)
		}
	}
}

// FuzzSandboxSpec: SandboxSpec never panics, and either refuses the
// sandbox with an error or returns a spec that runs the given args in the
// given rootfs, with each namespace once, the network one at the sandbox key
// unless the pod uses the host's, unique mount destinations, an OOM score
// no lower than the floor, and the annotations VM runtimes read.
func FuzzSandboxSpec(f *testing.F) {
	for _, s := range []string{
		"id sb1\nname web\nnamespace default\nuid u1\nrootfs /rootfs\narg /pause\nnetns /var/run/netns/podbay-sb1\nhostname web",
		"id sb1\nrootfs /r\narg /pause\nhostnet\nhostpid\nhostipc\nhostname ignored",
		"id sb1\nrootfs /r\narg /pause\nnetns /n\nprivileged\ncap CAP_SYS_ADMIN\ncap CAP_CHOWN",
		"id sb1\nrootfs /r\narg /pause\nnetns /n\noom -1000\nminoom -500\nuser 1000\ngroup 1000\nsupgroup 5",
		"id sb1\nrootfs /r\narg /pause\nnetns /n\nresources 1024 50000 100000 268435456\nsysctl net.ipv4.ip_forward 1",
		"id sb1\nrootfs /r\narg /pause\nnetns /n\nannotation io.kubernetes.cri.sandbox-id spoofed",
		"id sb1\nrootfs /r\narg /pause",
		"id sb1\nrootfs /r\narg /pause\nnetns /n\nuser -1\nsupgroup 4294967296",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		sb := sandboxFromText(text)
		s, err := SandboxSpec(sb)
		if err != nil {
			if s != nil {
				t.Fatalf("spec and error: %v", err)
			}
			return
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("spec does not marshal: %v", err)
		}
		if len(s.Process.Args) == 0 || !slices.Equal(s.Process.Args, sb.Args) {
			t.Fatalf("args %q, want %q", s.Process.Args, sb.Args)
		}
		if s.Root == nil || s.Root.Path != sb.RootfsPath || !s.Root.Readonly {
			t.Fatalf("root %+v, want %s read-only", s.Root, sb.RootfsPath)
		}
		ns := checkNamespaces(t, s.Linux.Namespaces)
		netns, hasNet := ns[specs.NetworkNamespace]
		_, hasUTS := ns[specs.UTSNamespace]
		_, hasPID := ns[specs.PIDNamespace]
		_, hasIPC := ns[specs.IPCNamespace]
		switch {
		case hasNet == sb.HostNetwork, hasUTS == sb.HostNetwork, hasPID == sb.HostPID, hasIPC == sb.HostIPC:
			t.Fatalf("namespaces %v for host network %v, pid %v, ipc %v", s.Linux.Namespaces, sb.HostNetwork, sb.HostPID, sb.HostIPC)
		case hasNet && netns.Path != sb.NetNSPath:
			t.Fatalf("network namespace %q, want the sandbox key %q", netns.Path, sb.NetNSPath)
		case sb.HostNetwork && s.Hostname != "":
			t.Fatalf("hostname %q without a UTS namespace", s.Hostname)
		case len(s.Hostname) > maxHostname:
			t.Fatalf("hostname of %d bytes", len(s.Hostname))
		}
		if err := CheckSysctls(s.Linux.Sysctl, SysctlScope{HostNetwork: sb.HostNetwork, HostIPC: sb.HostIPC}); err != nil {
			t.Fatalf("spec has a sysctl runc refuses: %v", err)
		}
		checkMounts(t, s.Mounts, false)
		if sb.Privileged {
			checkCapabilities(t, s.Process.Capabilities, append(slices.Clone(knownCapabilities), sb.Capabilities...))
		} else {
			checkCapabilities(t, s.Process.Capabilities, defaultCapabilities)
		}
		if o := s.Process.OOMScoreAdj; o == nil || (sb.MinOOMScoreAdj != nil && *o < *sb.MinOOMScoreAdj) {
			t.Fatalf("oom_score_adj %v below the floor %v", o, sb.MinOOMScoreAdj)
		}
		for _, id := range append([]uint32{s.Process.User.UID, s.Process.User.GID}, s.Process.User.AdditionalGids...) {
			if id > maxID {
				t.Fatalf("user %+v has an id outside [0, %d]", s.Process.User, maxID)
			}
		}
		for k, want := range map[string]string{
			annotations.ContainerType: annotations.ContainerTypeSandbox, annotations.SandboxID: sb.ID,
			annotations.SandboxName: sb.Name, annotations.SandboxNamespace: sb.Namespace,
			annotations.SandboxUID: sb.UID, annotations.SandboxLogDir: sb.LogDir,
		} {
			if got := s.Annotations[k]; got != want {
				t.Fatalf("annotation %s = %q, want %q", k, got, want)
			}
		}
	})
}

// FuzzContainerSpec: ContainerSpec never panics; it refuses a container
// with an invalid-argument or failed-precondition error (never an
// unclassified one, which would reach the kubelet as Unknown), or returns
// a spec that runs the container's command, sets every CRI environment
// variable to its last value, joins the sandbox key, has unique mount
// destinations ordered parents first with every CRI mount in place, unique
// devices with every requested one, an OOM score in [-1000, 1000] and no
// lower than the host's floor, and the annotations VM runtimes read.
func FuzzContainerSpec(f *testing.F) {
	base := "id c1\nname app\nrootfs /rootfs\nsandbox sb1\nsbname web\nsbnamespace default\nsbuid u1\n" +
		"netns /var/run/netns/podbay-sb1\npid 4242\ncgroupparent /podbay/pod\nimage busybox\ncmd sh\nhostname web\n"
	for _, s := range []string{
		base,
		base + "command sh\ncommand -c\narg echo hi\nenv A 1\nenv A 2\nenv B=C x\nimageenv PATH\nimageenv A=0\nworkdir /w\ntty",
		base + "mount /data /host/data ro rshared\nmount data/../logs /host/logs rslave\nmount /etc/hosts /h\nmount /dev /hostdev\nshm /run/shm",
		base + "mount /a /x\nmount /a/ /y\nmount / /z\nmount /b relative\nmount /c /c bogus",
		base + "device /dev/fuse c 10 229 rw 666\ndevice /dev/fuse c 10 229\ndevice / c 1 1\ndevice /dev/x p 1 1 rwx",
		base + "sbprivileged\nprivileged\nhostdevice /dev/null c 1 3 rwm 666\ndevice /dev/null c 1 3\nhostcap CAP_CHOWN\nhostcap CAP_SYS_ADMIN",
		base + "capadd ALL\ncapdrop net_raw\ncapadd sys_admin\ncapdrop bogus",
		base + "capdrop ALL\ncapadd NET_ADMIN\nreadonly\nnonewprivs\nunmasked\nseccomp default",
		base + "seccomp localhost\nseccompjson {\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"}]}",
		base + "seccomp localhost\nseccompjson {\"defaultAction\":\"SCMP_ACT_NOPE\"}",
		base + "apparmor localhost my-profile\nhostapparmor default-prof",
		base + "apparmor default\nhostapparmor podbay-default",
		base + "hostnet\nipcmode 2\npidmode 2\nsysctl net.core.somaxconn 1024\nsysctl kernel.shmmax 1",
		base + "pidmode 3\ntargetpid 77\nipcmode 1",
		base + "cpu 1024 50000 100000 0-1 0\nmemory 268435456 536870912\nswap\nhugepage 2MB 1048576\nhugetlb\npids 100\noom 1001",
		base + "unified memory.high 1000\ncgroupv2\noom -1000\nminoom -999",
		"id c1\nrootfs /r\nsandbox sb1\nhostnet\nipcmode 2\npidmode 1\ncommand /bin/true",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, host := containerFromText(text)
		s, err := ContainerSpec(c, host)
		if err != nil {
			if s != nil {
				t.Fatalf("spec and error: %v", err)
			}
			if !classified(err) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("spec does not marshal: %v", err)
		}
		checkContainerSpec(t, c, host, s)
	})
}

func checkContainerSpec(t *testing.T, c Container, host Host, s *specs.Spec) {
	t.Helper()
	p := s.Process
	if len(p.Args) == 0 || p.Args[0] == "" {
		t.Fatalf("no program: args %q", p.Args)
	}
	// What runc refuses at create.
	if !path.IsAbs(p.Cwd) {
		t.Fatalf("cwd %q is not absolute", p.Cwd)
	}
	for _, a := range append(slices.Clone(p.Args), append(p.Env, p.Cwd)...) {
		if strings.ContainsRune(a, 0) {
			t.Fatalf("NUL in process field %q", a)
		}
	}
	if len(c.Command) > 0 && !slices.Equal(p.Args, append(slices.Clone(c.Command), c.Args...)) {
		t.Fatalf("args %q, want command %q and args %q", p.Args, c.Command, c.Args)
	}
	if len(c.Args) > 0 && !slices.Equal(p.Args[len(p.Args)-len(c.Args):], c.Args) {
		t.Fatalf("args %q do not end with the container's %q", p.Args, c.Args)
	}
	env := map[string]string{}
	for _, e := range p.Env {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			t.Fatalf("environment entry %q is not KEY=VALUE", e)
		}
		if _, dup := env[k]; dup {
			t.Fatalf("environment variable %s twice: %q", k, p.Env)
		}
		env[k] = v
	}
	want := map[string]string{}
	for _, kv := range c.Env {
		want[kv.Key] = kv.Value
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Fatalf("environment %s=%q, want %q: %q", k, got, v, p.Env)
		}
	}
	if s.Root == nil || s.Root.Path != c.RootfsPath || s.Root.Readonly != c.Security.ReadonlyRootfs {
		t.Fatalf("root %+v for rootfs %s read-only %v", s.Root, c.RootfsPath, c.Security.ReadonlyRootfs)
	}

	ns := checkNamespaces(t, s.Linux.Namespaces)
	netns, hasNet := ns[specs.NetworkNamespace]
	if hasNet == c.Sandbox.HostNetwork || (hasNet && netns.Path != c.Sandbox.NetNSPath) {
		t.Fatalf("namespaces %v for host network %v, sandbox key %q", s.Linux.Namespaces, c.Sandbox.HostNetwork, c.Sandbox.NetNSPath)
	}

	mounts := checkMounts(t, s.Mounts, true)
	for _, m := range c.Mounts {
		d := path.Clean("/" + m.ContainerPath)
		got, ok := mounts[d]
		if !ok || got.Source != m.HostPath || slices.Contains(got.Options, "ro") != m.Readonly {
			t.Fatalf("CRI mount %+v: spec has %+v", m, got)
		}
	}

	paths := map[string]bool{}
	for _, d := range s.Linux.Devices {
		if paths[d.Path] {
			t.Fatalf("device %s twice", d.Path)
		}
		paths[d.Path] = true
	}
	for _, d := range c.Devices {
		if !paths[path.Clean(d.ContainerPath)] {
			t.Fatalf("requested device %s missing", d.ContainerPath)
		}
	}

	if o := p.OOMScoreAdj; o == nil || *o < -1000 || *o > 1000 || (host.MinOOMScoreAdj != nil && *o < *host.MinOOMScoreAdj) {
		t.Fatalf("oom_score_adj %v outside [-1000, 1000] or below the floor %v", o, host.MinOOMScoreAdj)
	}
	checkCapabilities(t, p.Capabilities, append(slices.Clone(knownCapabilities), host.Capabilities...))
	if c.Security.Privileged && (s.Linux.Seccomp != nil || s.Linux.MaskedPaths != nil) {
		t.Fatal("privileged container with seccomp or masked paths")
	}
	if c.Sandbox.HostNetwork {
		for k := range s.Linux.Sysctl {
			if strings.HasPrefix(k, "net.") {
				t.Fatalf("sysctl %s in a host-network container", k)
			}
		}
	}
	for k, want := range map[string]string{
		annotations.ContainerType: annotations.ContainerTypeContainer, annotations.SandboxID: c.Sandbox.ID,
		annotations.ContainerName: c.Name, annotations.ImageName: c.Image.Name,
	} {
		if got := s.Annotations[k]; got != want {
			t.Fatalf("annotation %s = %q, want %q", k, got, want)
		}
	}
}
