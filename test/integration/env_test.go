package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// startTimeout bounds how long podbayd may take to serve after start:
// 30s, or PODBAY_ITEST_START_TIMEOUT (a Go duration; an emulated guest
// needs minutes).
var startTimeout = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PODBAY_ITEST_START_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}()

const (
	// exitTimeout bounds how long podbayd may take to exit after SIGTERM.
	exitTimeout = 30 * time.Second
)

// envOptions changes how an env's daemon is configured.
type envOptions struct {
	// emptyCNIConfDir starts the daemon with no network configuration;
	// writeCNIConfig adds it later.
	emptyCNIConfDir bool
	// runcNetworkOrder is the runc handler's network_order ("" = not set).
	runcNetworkOrder string
	// extraRuntimes adds handlers that run the same failure-injecting
	// wrapper as runc.
	extraRuntimes map[string]handlerOptions
	// registries is a registries.conf.d drop-in (registries.conf TOML)
	// layered over the env's own registries.conf, which blocks
	// registry.k8s.io and docker.io so that no daemon reaches past
	// loopback. An entry with the same prefix replaces the blocked one.
	registries string
	// pluginTimeout, runtimeTimeout (every handler's) and
	// pullProgressTimeout set the daemon's fault timeouts, as Go duration
	// strings; "" leaves the default.
	pluginTimeout, runtimeTimeout, pullProgressTimeout string
	// daemon is the podbayd binary to run, by its name in binDir ("" =
	// podbayd, built with the failpoints tag).
	daemon string
	// topConfig is TOML inserted among the daemon's top-level keys
	// (before its first table); tablesConfig is TOML appended after its
	// last table. Both verbatim.
	topConfig, tablesConfig string
	// cgroupDriver is the daemon's cgroup_driver; "" is the suite's
	// (PODBAY_TEST_CGROUP_DRIVER).
	cgroupDriver string
	// logLevelFromFile starts the daemon without --log-level, so that
	// the file's log_level (debug) decides, and a reload can change it.
	logLevelFromFile bool
	// podbayMasquerade writes the env's conflist in the shape of podbay's
	// default network: the bridge plugin's ipMasq off and the pods'
	// egress masqueraded by the daemon's own rules (podbayMasquerade).
	podbayMasquerade bool
	// nriConfig is TOML added to the env's [nri] table, which puts the
	// NRI socket and plugin directories in the env's dir (nriSocket,
	// nri-plugins, nri-conf.d), so that no daemon takes the host's.
	nriConfig string
	// noIPMasq turns the bridge plugin's ipMasq off (see gvisor_test.go).
	noIPMasq bool
	// imageConfig is TOML added to the env's [image] table.
	imageConfig string
}

// handlerOptions configure one runtime handler of an env.
type handlerOptions struct {
	order string // network_order; "" = not set
	typ   string // "oci" or "vm"; "" = the suite's (suiteRuntimeType)
	// defaultAnnotations leaves pod_annotations and
	// container_annotations unset (none pass); annotations sets both to
	// its patterns; else the env lets every annotation outside the
	// reserved and opt-in namespaces through ("*"), so that both suites
	// see the same specs.
	defaultAnnotations bool
	annotations        []string
	// runtime is the OCI runtime binary the handler runs ("" = the
	// env's failure-injecting wrapper of the host's runc): path of an
	// oci handler, runtime_path of a vm one.
	runtime string
	// extra is TOML added to the handler's table.
	extra string
}

// suiteRuntimeType is the type of the env's "runc" handler, and of every
// handler that names none: PODBAY_TEST_RUNTIME_TYPE, "oci" (conmon + the
// runc wrapper) unless it says "vm" (containerd-shim-runc-v2 driving the
// same wrapper over the shim v2 API, as Kata would be driven).
var suiteRuntimeType = func() string {
	if os.Getenv("PODBAY_TEST_RUNTIME_TYPE") == "vm" {
		return "vm"
	}
	return "oci"
}()

// shimPath is the shim v2 binary the vm handlers run.
func shimPath() string {
	if p, err := exec.LookPath("containerd-shim-runc-v2"); err == nil {
		return p
	}
	return "/usr/bin/containerd-shim-runc-v2"
}

// offlineRegistries is every env's registries.conf: nothing is pulled from
// the internet, and the default pause image is made from the built-in
// pause program.
const offlineRegistries = `unqualified-search-registries = []

[[registry]]
prefix = "registry.k8s.io"
location = "registry.k8s.io"
blocked = true

[[registry]]
prefix = "docker.io"
location = "docker.io"
blocked = true
`

// acceptAnyPolicy is the env's signature policy, so that a host's
// /etc/containers/policy.json does not decide what the tests may pull.
const acceptAnyPolicy = `{"default": [{"type": "insecureAcceptAnything"}]}
`

// env is one podbayd with its own directories, CNI network, bridge, subnet,
// cgroup parent and runtime wrapper, so that its leaks can be told apart
// from anything else on the host.
type env struct {
	t    *testing.T
	opts envOptions

	dir         string // everything the env owns lives here
	sock        string
	rootDir     string
	stateDir    string
	configPath  string
	logPath     string
	confDir     string // CNI configuration
	ipamDir     string // host-local dataDir
	cacheDir    string // libcni cache
	cniCtlDir   string // podbay-failcni controlDir
	runtimePath string // copy of podbay-failruntime
	podLogDir   string
	// netnsDir is the daemon's netns_dir: the env's own, so that daemons
	// of test processes running at once never reclaim each other's
	// namespaces, and each leak check sees only its own.
	netnsDir string

	storageRoot    string // containers/storage graph root
	runRoot        string // containers/storage run root
	registriesConf string
	registriesDir  string // registries.conf.d
	policyPath     string

	netName    string
	bridge     string
	subnet     *net.IPNet
	cgroupRoot string // default_cgroup_parent, e.g. /pbt-abc123 or pbtabc123.slice
	// cgroupDriver is the daemon's cgroup_driver ("": unset);
	// systemdCgroup whether it resolves to systemd.
	cgroupDriver  string
	systemdCgroup bool
	metricsAddr   string

	// Host state before the env started: not this env's to report.
	netnsBefore  map[string]bool
	mountsBefore map[string]bool
	// ownMounts are file systems a test mounted for the env (mountSmallFS):
	// exempt from the leak check and unmounted before the env dir is
	// removed.
	ownMounts []string

	mu      sync.Mutex
	cmd     *exec.Cmd     // guarded by mu
	exited  chan struct{} // closed when cmd has been waited for; guarded by mu
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient
	seenIDs map[string]bool // sandbox IDs this env has been told about; guarded by mu
	// runscRootDir is runsc's root in the gVisor tests.
	runscRootDir string
}

// newEnv prepares an env; the daemon is started with env.start. Cleanup stops
// the daemon, fails the test on any leak, and removes what the env made.
func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	requireRoot(t)
	driver := envCgroupDriver(t, opts)
	dir, err := os.MkdirTemp("", "pb")
	if err != nil {
		t.Fatal(err)
	}
	suffix := randString(6)
	e := &env{
		t:             t,
		opts:          opts,
		dir:           dir,
		sock:          filepath.Join(dir, "pb.sock"),
		rootDir:       filepath.Join(dir, "root"),
		stateDir:      filepath.Join(dir, "state"),
		configPath:    filepath.Join(dir, "podbayd.toml"),
		logPath:       filepath.Join(dir, "podbayd.log"),
		confDir:       filepath.Join(dir, "net.d"),
		ipamDir:       filepath.Join(dir, "ipam"),
		cacheDir:      filepath.Join(dir, "cnicache"),
		cniCtlDir:     filepath.Join(dir, "cnictl"),
		runtimePath:   filepath.Join(dir, "runtime", "failruntime"),
		podLogDir:     filepath.Join(dir, "podlogs"),
		netnsDir:      filepath.Join(dir, "netns"),
		netName:       "pbt-" + suffix,
		bridge:        "pbt" + suffix,
		cgroupRoot:    envCgroupRoot(suffix, isSystemd(driver)),
		cgroupDriver:  driver,
		systemdCgroup: isSystemd(driver),
		seenIDs:       map[string]bool{},
	}
	e.storageRoot = filepath.Join(e.rootDir, "storage")
	e.runRoot = filepath.Join(e.stateDir, "storage")
	e.registriesConf = filepath.Join(dir, "registries.conf")
	e.registriesDir = filepath.Join(dir, "registries.conf.d")
	e.policyPath = filepath.Join(dir, "policy.json")
	if len(e.sock) >= 100 {
		t.Fatalf("socket path %q too long", e.sock)
	}
	e.netnsBefore = e.netnsEntries(t)
	e.mountsBefore = map[string]bool{}
	for _, m := range mountPoints(t) {
		e.mountsBefore[m] = true
	}
	t.Cleanup(e.cleanup)

	for _, d := range []string{e.netnsDir, e.rootDir, e.stateDir, e.confDir, e.ipamDir, e.cacheDir, e.cniCtlDir, filepath.Dir(e.runtimePath), e.podLogDir, e.registriesDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(bin("podbay-failruntime"), e.runtimePath, 0o755); err != nil {
		t.Fatal(err)
	}
	e.setSuiteOCIRuntime(t)
	e.subnet = pickSubnet(t)
	e.metricsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	if !opts.emptyCNIConfDir {
		e.writeCNIConfig()
	}
	files := map[string]string{e.registriesConf: offlineRegistries, e.policyPath: acceptAnyPolicy}
	if opts.registries != "" {
		files[filepath.Join(e.registriesDir, "50-test.conf")] = opts.registries
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.configPath, []byte(e.daemonConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) daemonConfig() string {
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		conmon = "/usr/bin/conmon"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listen = %q\n", e.sock)
	fmt.Fprintf(&b, "root = %q\n", e.rootDir)
	fmt.Fprintf(&b, "state = %q\n", e.stateDir)
	fmt.Fprintf(&b, "netns_dir = %q\n", e.netnsDir)
	fmt.Fprintf(&b, "log_level = \"debug\"\n")
	fmt.Fprintf(&b, "metrics_address = %q\n", e.metricsAddr)
	fmt.Fprintf(&b, "conmon = %q\n", conmon)
	fmt.Fprintf(&b, "pause_binary = %q\n", bin("podbay-pause"))
	fmt.Fprintf(&b, "default_runtime = \"runc\"\n")
	fmt.Fprintf(&b, "default_cgroup_parent = %q\n", e.cgroupRoot)
	b.WriteString(e.cgroupDriverConfig())
	if e.opts.topConfig != "" {
		fmt.Fprintf(&b, "%s\n", e.opts.topConfig)
	}
	fmt.Fprintf(&b, "\n[network]\n")
	fmt.Fprintf(&b, "conf_dir = %q\n", e.confDir)
	fmt.Fprintf(&b, "plugin_dirs = [\"/usr/lib/cni\", %q]\n", binDir)
	fmt.Fprintf(&b, "cache_dir = %q\n", e.cacheDir)
	fmt.Fprintf(&b, "write_default_config = false\n")
	if e.opts.pluginTimeout != "" {
		fmt.Fprintf(&b, "plugin_timeout = %q\n", e.opts.pluginTimeout)
	}
	fmt.Fprintf(&b, "\n[image]\n")
	fmt.Fprintf(&b, "storage_root = %q\n", e.storageRoot)
	fmt.Fprintf(&b, "run_root = %q\n", e.runRoot)
	fmt.Fprintf(&b, "registries_conf = %q\n", e.registriesConf)
	fmt.Fprintf(&b, "registries_conf_dir = %q\n", e.registriesDir)
	fmt.Fprintf(&b, "signature_policy = %q\n", e.policyPath)
	if e.opts.pullProgressTimeout != "" {
		fmt.Fprintf(&b, "pull_progress_timeout = %q\n", e.opts.pullProgressTimeout)
	}
	if e.opts.imageConfig != "" {
		fmt.Fprintf(&b, "%s\n", e.opts.imageConfig)
	}
	fmt.Fprintf(&b, "\n[nri]\nsocket_path = %q\nplugin_path = %q\nplugin_config_path = %q\n%s\n",
		e.nriSocket(), filepath.Join(e.dir, "nri-plugins"), filepath.Join(e.dir, "nri-conf.d"), e.opts.nriConfig)
	runtimes := map[string]handlerOptions{"runc": {order: e.opts.runcNetworkOrder}}
	for name, h := range e.opts.extraRuntimes {
		runtimes[name] = h
	}
	for _, name := range sortedKeys(runtimes) {
		h := runtimes[name]
		fmt.Fprintf(&b, "\n[runtimes.%s]\n", name)
		if h.typ == "" {
			h.typ = suiteRuntimeType
		}
		if h.typ == "vm" {
			if _, err := os.Stat(shimPath()); err != nil {
				e.t.Fatalf("a vm handler needs containerd-shim-runc-v2 (Debian package containerd; make deps-test installs it): %v", err)
			}
			// The shim runs the same wrapper as the oci handlers, with its
			// runc state kept inside the env.
			fmt.Fprintf(&b, "type = \"vm\"\npath = %q\n", shimPath())
			fmt.Fprintf(&b, "runtime_path = %q\n", cmp.Or(h.runtime, e.runtimePath))
			fmt.Fprintf(&b, "runtime_root = %q\n", filepath.Join(e.stateDir, "shim-runc", name))
		} else {
			fmt.Fprintf(&b, "path = %q\n", cmp.Or(h.runtime, e.runtimePath))
		}
		switch {
		case h.annotations != nil:
			fmt.Fprintf(&b, "pod_annotations = %s\ncontainer_annotations = %s\n", tomlStrings(h.annotations), tomlStrings(h.annotations))
		case !h.defaultAnnotations:
			fmt.Fprintf(&b, "pod_annotations = [\"*\"]\ncontainer_annotations = [\"*\"]\n")
		}
		if h.order != "" {
			fmt.Fprintf(&b, "network_order = %q\n", h.order)
		}
		if e.opts.runtimeTimeout != "" {
			fmt.Fprintf(&b, "timeout = %q\n", e.opts.runtimeTimeout)
		}
		if h.extra != "" {
			fmt.Fprintf(&b, "%s\n", h.extra)
		}
	}
	if e.opts.tablesConfig != "" {
		fmt.Fprintf(&b, "\n%s\n", e.opts.tablesConfig)
	}
	return b.String()
}

// cniConfig is the env's conflist: bridge + host-local, portmap, bandwidth
// (as in podbay's default network), and podbay-failcni last, which declares
// the capabilities no plugin before it takes so that it records them.
func (e *env) cniConfig() []byte {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       e.netName,
		"plugins": []any{
			map[string]any{
				"type":      "bridge",
				"bridge":    e.bridge,
				"isGateway": true,
				"ipMasq":    !e.opts.noIPMasq && !e.opts.podbayMasquerade,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": e.ipamDir,
					"ranges":  [][]map[string]string{{{"subnet": e.subnet.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
				"snat":         true,
			},
			map[string]any{
				"type":         "bandwidth",
				"capabilities": map[string]bool{"bandwidth": true},
			},
			map[string]any{
				"type":         "podbay-failcni",
				"controlDir":   e.cniCtlDir,
				"capabilities": map[string]bool{"dns": true, "bandwidth": true},
			},
		},
	}
	if e.opts.podbayMasquerade {
		conf["generatedBy"] = "podbay"
		conf["podbayMasquerade"] = true
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// writeCNIConfig drops the conflist into the conf dir atomically, as an
// operator's configuration management would.
func (e *env) writeCNIConfig() {
	e.t.Helper()
	tmp := filepath.Join(e.dir, "10-podbay-test.conflist.tmp")
	if err := os.WriteFile(tmp, e.cniConfig(), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, e.conflistPath()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) conflistPath() string { return filepath.Join(e.confDir, "10-podbay-test.conflist") }

// cleanup runs at the end of the test: remove what a failed test left, stop
// the daemon, report leaks as test failures, then clear them so that the
// next test starts clean.
func (e *env) cleanup() {
	t := e.t
	if t.Failed() && e.running() {
		e.removeAllPods()
	}
	if err := e.terminate(); err != nil {
		t.Error(err)
	}
	leaks := settle(settleTime, func() []leak { return e.findLeaks(nil) })
	for _, l := range leaks {
		t.Errorf("leak at the end of the test: %s", l)
	}
	e.stopEnvSlice()
	e.forceClean(leaks)
	e.checkDaemonLog(t)
	if t.Failed() {
		t.Logf("podbayd log (%s), last lines:\n%s", e.logPath, e.logTail(150))
		t.Logf("podbay-failcni calls:\n%s", fileTail(filepath.Join(e.cniCtlDir, "calls.log"), 40))
	}
	if os.Getenv("PODBAY_ITEST_KEEP") == "1" {
		t.Logf("keeping %s", e.dir)
		return
	}
	e.unmountOwn()
	if under := mountsUnder(t, e.dir); len(under) > 0 {
		t.Errorf("not removing %s: still mounted: %v", e.dir, under)
		return
	}
	if err := os.RemoveAll(e.dir); err != nil {
		t.Errorf("remove env dir: %v", err)
	}
}

// removeAllPods is the best-effort cleanup of a failed test.
func (e *env) removeAllPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := e.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		e.t.Logf("cleanup: list pods: %v", err)
		return
	}
	for _, p := range resp.Items {
		if _, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			e.t.Logf("cleanup: stop %s: %v", p.Id, err)
		}
		if _, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			e.t.Logf("cleanup: remove %s: %v", p.Id, err)
		}
	}
}
