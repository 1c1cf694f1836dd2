package testimage

import (
	"fmt"
	"io/fs"
	"runtime"
	"strings"
)

// Mirror is an upstream registry whose images a local registry serves under
// a repository prefix: registry.k8s.io/pause:3.10 as <addr>/k8s/pause:3.10.
type Mirror struct {
	Registry string // "registry.k8s.io"
	Prefix   string // "k8s"
}

// CritestMirrors are the registries critest (cri-tools v1.37) pulls from,
// and the prefixes CritestImages serves their images under.
func CritestMirrors() []Mirror {
	return []Mirror{
		{Registry: "registry.k8s.io", Prefix: "k8s"},
		{Registry: "k8s.gcr.io", Prefix: "k8sgcr"},
		{Registry: "gcr.io", Prefix: "gcr"},
		{Registry: "public.ecr.aws", Prefix: "ecr"},
		{Registry: "docker.io", Prefix: "docker"},
	}
}

// MirrorsConf returns a registries.conf (v2) that sends every pull from the
// mirrors' registries to the registry at addr, as an air-gapped node is
// configured: each registry gets addr/<prefix> as its mirror (plain HTTP).
// Its location points there too, so that an image the local registry does
// not have fails there instead of being fetched from the internet.
// Unqualified names resolve to docker.io.
func MirrorsConf(addr string, mirrors []Mirror) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Every registry below is served by the local registry at %s.\n", addr)
	b.WriteString("unqualified-search-registries = [\"docker.io\"]\n")
	for _, m := range mirrors {
		local := addr + "/" + m.Prefix
		fmt.Fprintf(&b, "\n[[registry]]\nprefix = %q\nlocation = %q\ninsecure = true\n", m.Registry, local)
		fmt.Fprintf(&b, "\n[[registry.mirror]]\nlocation = %q\ninsecure = true\n", local)
	}
	return b.String()
}

// CritestOptions choose the content of CritestImages.
type CritestOptions struct {
	// StandIn is a host path to podbay-standin, the static multi-call
	// program (cmd/podbay-testimages/standin) the images run as pgrep,
	// ipcs, nginx, httpd and nnp. Required.
	StandIn string
	// PauseBinary is as in DefaultOptions, for registry.k8s.io/pause.
	PauseBinary string
	// Arch is the GOARCH critest runs on, which names the
	// hostnet-nginx-<arch> image and must be one of the multi-arch
	// images' platforms; runtime.GOARCH when empty.
	Arch string
}

// critestPlatforms are the platforms cri-tools builds its multi-arch test
// images for (images/build in cri-tools); the host's gets the real busybox,
// the others the stand-in layer.
var critestPlatforms = []string{"linux/amd64", "linux/arm", "linux/arm64", "linux/ppc64le", "linux/s390x"}

// CritestImages are stand-ins for every image critest v1.37 pulls, served
// under their upstream names behind CritestMirrors (repository
// "gcr/k8s-staging-cri-tools/test-image-tags" for
// gcr.io/k8s-staging-cri-tools/test-image-tags). Build them with a Builder
// on Debian's dynamically linked busybox (the busybox package): its shell,
// like the official busybox image's, looks commands up in PATH, so the
// MaskedPaths spec's masked /bin/ls is what `sh -c ls` runs; the static
// busybox-static shell runs its own ls applet whatever PATH holds.
//
// What each spec does inside them (cri-tools pkg/validate, pkg/benchmark):
//
//   - registry.k8s.io/e2e-test-images/busybox:1.29-2, the default container
//     image: busybox (top, sh, sleep, id, ls, touch, brctl, netstat, pidof,
//     ping, hostname, dd, ...), plus /bin/pgrep (exec timeout: `pgrep sleep`
//     after the timed-out `sleep 4321` was killed) and /bin/ipcs (HostIpc:
//     `ipcs -m` shows the host's segment or not), which Debian's busybox
//     lacks, from podbay-standin.
//   - registry.k8s.io/e2e-test-images/nginx:1.14-2: busybox and the nginx
//     applet on port 80 (port mapping, portforward; HostPID: its PID in
//     /var/run/nginx.pid and `pidof nginx` from a host-PID busybox;
//     ContainerPID/PodPID: "master process" in /proc/1/cmdline or not).
//   - gcr.io/k8s-staging-cri-tools/hostnet-nginx-<arch>: the same, port
//     12003, like upstream's /etc/nginx/conf.d/default.conf.
//   - registry.k8s.io/e2e-test-images/httpd:2.4.39-4: busybox and the httpd
//     applet on port 80; its log names httpd.
//   - registry.k8s.io/e2e-test-images/nonewprivs:1.3: busybox and a
//     setuid-root /usr/local/bin/nnp (the nnp applet) as entrypoint; it
//     prints "Effective uid: 0", or the caller's UID under no_new_privs.
//   - gcr.io/k8s-staging-cri-tools/test-image-*: as upstream's
//     images/build, multi-arch indexes of busybox with an empty marker file
//     named for the image: test-image-latest:latest; test-image-tag:test
//     and :all (two images); test-image-1, -2, -3:latest (three images);
//     test-image-tags:1, :2, :3 (one image); test-image-user-uid (USER
//     1002), -user-username (www-data), -user-uid-group (1003:1004),
//     -user-username-group (www-data:1004); test-image-predefined-group
//     (USER 1000, default-user in group-defined-in-image, GID 50000).
//     test-image-digest is not served: critest pulls it by a digest no
//     rebuild can match.
//   - registry.k8s.io/pause:3.10, as DefaultImages' pause; pause:3.9, the
//     same with a marker file /pause-3.9 (another image: the specs count
//     its tags, and 3.10 is the daemon's sandbox image), served as
//     registry.k8s.io/pause:3.9 and k8s.gcr.io/pause:3.9, one image from
//     two registries (the specs "removing image from one registry should
//     remove all tags from other registries" and the image ID consistency
//     ones).
//   - public.ecr.aws/docker/library/busybox:1.35.0-glibc, 1-uclibc, 1,
//     1-glibc, 1-musl, latest (the image benchmarks) and
//     docker.io/library/busybox:latest: one busybox image.
//
// Busybox-based images share the base layer blob.
func CritestImages(opts CritestOptions) ([]Spec, error) {
	if opts.StandIn == "" {
		return nil, fmt.Errorf("critest images: no podbay-standin binary")
	}
	arch := opts.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	multiArch := append([]string(nil), critestPlatforms...)
	hostPlatform := "linux/" + arch
	found := false
	for _, p := range multiArch {
		found = found || p == hostPlatform
	}
	if !found {
		multiArch = append(multiArch, hostPlatform)
	}

	// served is where the local registry keeps an upstream repository.
	served := func(upstream string) string {
		for _, m := range CritestMirrors() {
			if rest, ok := strings.CutPrefix(upstream, m.Registry+"/"); ok {
				return m.Prefix + "/" + rest
			}
		}
		return upstream // not reached: every name below is behind a mirror
	}
	busybox := Config{Env: []string{DefaultPath}, Cmd: []string{"sh"}}
	withUser := func(user string) Config {
		c := busybox
		c.User = user
		return c
	}
	standIn := func(at string, mode fs.FileMode) File {
		return File{Path: at, HostPath: opts.StandIn, Mode: mode}
	}
	link := func(at, to string) File {
		return File{Path: at, Link: to, Mode: 0o755}
	}
	marker := func(name string) []File {
		return []File{{Path: "/" + name, Content: []byte{}, Mode: 0o644}}
	}
	gcr := func(name string, tags []string, files []File, cfg Config) Spec {
		return Spec{
			Repository: served("gcr.io/k8s-staging-cri-tools/" + name),
			Tags:       tags,
			Files:      files,
			Config:     cfg,
			Platforms:  multiArch,
		}
	}
	// pause39 is the pause image with a marker: not the sandbox image
	// (3.10), whose names would show among its tags.
	pause39 := func(repo string) Spec {
		p := pauseSpec(repo, []string{"3.9"}, opts.PauseBinary)
		p.Files = append(p.Files, marker("pause-3.9")...)
		return p
	}
	nginx := func(repo string, tags []string, port int, platforms []string) Spec {
		return Spec{
			Repository: repo,
			Tags:       tags,
			Files: []File{
				standIn("/usr/sbin/nginx", 0o755),
				{Path: "/etc/nginx/conf.d/default.conf", Content: []byte(fmt.Sprintf(nginxConf, port))},
				{Path: "/var/run", Mode: fs.ModeDir | 0o755},
				{Path: "/var/log/nginx", Mode: fs.ModeDir | 0o755},
			},
			Config: Config{
				Env:          []string{DefaultPath},
				Cmd:          []string{"nginx", "-g", "daemon off;"},
				ExposedPorts: []string{"80/tcp"},
				StopSignal:   "SIGTERM",
			},
			Platforms: platforms,
		}
	}

	specs := []Spec{
		{
			Repository: served("registry.k8s.io/e2e-test-images/busybox"),
			Tags:       []string{"1.29-2"},
			Files: []File{
				standIn("/bin/podbay-standin", 0o755),
				link("/bin/pgrep", "/bin/podbay-standin"),
				link("/bin/ipcs", "/bin/podbay-standin"),
			},
			Config:    busybox,
			Platforms: multiArch,
		},
		nginx(served("registry.k8s.io/e2e-test-images/nginx"), []string{"1.14-2"}, 80, multiArch),
		nginx(served("gcr.io/k8s-staging-cri-tools/hostnet-nginx-"+arch), []string{"latest"}, 12003, []string{hostPlatform}),
		{
			Repository: served("registry.k8s.io/e2e-test-images/httpd"),
			Tags:       []string{"2.4.39-4"},
			Files: []File{
				standIn("/usr/local/apache2/bin/httpd", 0o755),
				{Path: "/usr/local/bin/httpd-foreground", Content: []byte(httpdForeground), Mode: 0o755},
				{Path: "/usr/local/apache2/conf/httpd.conf", Content: []byte("ServerRoot \"/usr/local/apache2\"\nListen 80\n")},
				{Path: "/usr/local/apache2/logs", Mode: fs.ModeDir | 0o755},
			},
			Config: Config{
				Env:          []string{"PATH=/usr/local/apache2/bin:" + strings.TrimPrefix(DefaultPath, "PATH="), "HTTPD_PREFIX=/usr/local/apache2"},
				WorkingDir:   "/usr/local/apache2",
				Cmd:          []string{"httpd-foreground"},
				ExposedPorts: []string{"80/tcp"},
				StopSignal:   "SIGWINCH",
			},
			Platforms: multiArch,
		},
		{
			Repository: served("registry.k8s.io/e2e-test-images/nonewprivs"),
			Tags:       []string{"1.3"},
			// Its own copy: a hard link could not be setuid alone.
			Files:     []File{standIn("/usr/local/bin/nnp", fs.ModeSetuid|0o755)},
			Config:    Config{Env: []string{DefaultPath}, Entrypoint: []string{"/usr/local/bin/nnp"}},
			Platforms: multiArch,
		},
		pauseSpec(served("registry.k8s.io/pause"), []string{"3.10"}, opts.PauseBinary),
		pause39(served("registry.k8s.io/pause")),
		pause39(served("k8s.gcr.io/pause")),

		gcr("test-image-latest", []string{"latest"}, marker("test-image-latest"), busybox),
		gcr("test-image-tag", []string{"test"}, marker("test"), busybox),
		gcr("test-image-tag", []string{"all"}, marker("all"), busybox),
		gcr("test-image-1", []string{"latest"}, marker("test-image-1"), busybox),
		gcr("test-image-2", []string{"latest"}, marker("test-image-2"), busybox),
		gcr("test-image-3", []string{"latest"}, marker("test-image-3"), busybox),
		gcr("test-image-tags", []string{"1", "2", "3"}, marker("same-image"), busybox),
		gcr("test-image-user-uid", []string{"latest"}, nil, withUser("1002")),
		gcr("test-image-user-username", []string{"latest"}, nil, withUser("www-data")),
		gcr("test-image-user-uid-group", []string{"latest"}, nil, withUser("1003:1004")),
		gcr("test-image-user-username-group", []string{"latest"}, nil, withUser("www-data:1004")),
		gcr("test-image-predefined-group", []string{"latest"}, []File{
			// Upstream: adduser -u 1000 -D default-user; addgroup -g 50000
			// group-defined-in-image; addgroup default-user
			// group-defined-in-image. The base's own test accounts (1000,
			// 1001, and group 1100 holding them) would add a group the
			// SupplementalGroupsPolicy specs do not expect: replaced.
			{Path: "/etc/passwd", Content: []byte(withoutTestAccounts(passwd) + "default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n")},
			{Path: "/etc/group", Content: []byte(withoutTestAccounts(group) + "default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")},
			{Path: "/home/default-user", Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000},
		}, withUser("1000")),

		{
			Repository: served("public.ecr.aws/docker/library/busybox"),
			Tags:       []string{"1.35.0-glibc", "1-uclibc", "1", "1-glibc", "1-musl", "latest"},
			Config:     busybox,
			Platforms:  multiArch,
		},
		{
			Repository: served("docker.io/library/busybox"),
			Tags:       []string{"latest"},
			Config:     busybox,
			Platforms:  multiArch,
		},
	}
	return specs, nil
}

// nginxConf is the default site of the nginx stand-in; the nginx applet
// reads the port from its listen line.
const nginxConf = `server {
    listen       %d;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }
}
`

// httpdForeground is the httpd image's CMD script.
const httpdForeground = `#!/bin/sh
set -e

# Apache gets grumpy about PID files pre-existing
rm -f /usr/local/apache2/logs/httpd.pid

exec httpd -DFOREGROUND "$@"
`

// withoutTestAccounts drops the lines of an /etc/passwd or /etc/group
// naming the base layer's test accounts (test, test2, testextra), leaving
// the official busybox image's.
func withoutTestAccounts(s string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		name, _, _ := strings.Cut(line, ":")
		switch name {
		case "test", "test2", "testextra", "":
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}
