package testimage

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
)

// NodeE2EOptions choose the content of NodeE2EImages.
type NodeE2EOptions struct {
	// StandIn is a host path to podbay-standin (see CritestOptions), run
	// as nginx, nnp and curl. Required.
	StandIn string
	// Agnhost is a host path to Kubernetes' agnhost, built static from the
	// k8s.io/kubernetes module's test/images/agnhost (tools/e2e-node).
	// Required.
	Agnhost string
	// ImagesDir is the k8s.io/kubernetes module's test/images directory:
	// agnhost's porter certificate and the kitten and nautilus pages come
	// from it. Optional: without it those files are left out.
	ImagesDir string
	// PauseBinary is as in DefaultOptions, for registry.k8s.io/pause.
	PauseBinary string
}

// NodeE2EImages are stand-ins for the images Kubernetes v1.37's node e2e
// suite (test/e2e_node with test/e2e/common; names from
// test/utils/image/manifest.go) runs in its NodeConformance and feature
// specs, served under their upstream names behind CritestMirrors
// (k8s/e2e-test-images/busybox:1.37.0-2 for
// registry.k8s.io/e2e-test-images/busybox:1.37.0-2). Build them on busybox
// 1.37.0 built with its defconfig, as the upstream image's is
// (hack/e2e-node.sh builds it from source): Debian 12's busybox 1.35 builds
// lack nmeter (the container lifecycle specs log `nmeter -d0 '%3t'`
// timestamps), and their ash drops environment variables whose names are
// not shell names (data-1=value-1 from a ConfigMap's envFrom, which
// `sh -c env` must print), which busybox 1.37's passes on.
//
//   - e2e-test-images/busybox:1.37.0-2: busybox.
//   - e2e-test-images/agnhost:2.66.1 and :2.55 (AgnhostPrev): busybox and
//     the real /agnhost (entrypoint, CMD pause), /agnhost-2, /uploads,
//     curl (the stand-in's) and a /bin/bash that runs busybox's sh
//     (upstream's Alpine base has both; the specs' scripts are POSIX),
//     porter's localhost.crt and .key, upstream's
//     user-defined-in-image (1000) in group-defined-in-image (50000), and
//     the /etc/os-release of its Alpine base.
//   - e2e-test-images/kitten:1.8 and nautilus:1.8: agnhost with the
//     picture and data.json, CMD test-webserver.
//   - e2e-test-images/nginx:1.27.0-2 and 1.28.0-2: busybox and the nginx
//     stand-in on port 80.
//   - e2e-test-images/nonewprivs:1.4: busybox and a setuid-root
//     /usr/local/bin/nnp, CMD nnp.
//   - e2e-test-images/nonroot:1.5: busybox, USER 1234.
//   - e2e-test-images/ipc-utils:1.4: busybox (its ipcs).
//   - e2e-test-images/glibc-dns-testing:2.1.1 (upstream: Debian with
//     dnsutils): busybox, whose `hostname -f` (the Hostname of Pod specs)
//     resolves through the glibc it is linked with.
//   - pause:3.10.2, as DefaultImages' pause.
//
// Not served (their specs fail to pull offline): perl, node-perf/*,
// resource-consumer, volume/*, apparmor-loader,
// regression-issue-74839, sample-device-plugin, etcd, the digest-pinned
// busybox@sha256:a9155b..., and the invalid and private registries' images.
func NodeE2EImages(opts NodeE2EOptions) ([]Spec, error) {
	if opts.StandIn == "" {
		return nil, fmt.Errorf("node e2e images: no podbay-standin binary")
	}
	if opts.Agnhost == "" {
		return nil, fmt.Errorf("node e2e images: no agnhost binary")
	}
	platforms := []string{"linux/" + runtime.GOARCH}
	e2e := func(name string) string { return "k8s/e2e-test-images/" + name }
	busybox := Config{Env: []string{DefaultPath}, Cmd: []string{"sh"}}
	standIn := func(at string, mode fs.FileMode) File {
		return File{Path: at, HostPath: opts.StandIn, Mode: mode}
	}
	// fromImages is a file of the module's test/images, or nothing.
	fromImages := func(at, rel string) []File {
		if opts.ImagesDir == "" {
			return nil
		}
		return []File{{Path: at, HostPath: filepath.Join(opts.ImagesDir, rel), Mode: 0o644}}
	}

	agnhostFiles := []File{
		{Path: "/agnhost", HostPath: opts.Agnhost, Mode: 0o755},
		{Path: "/agnhost-2", Link: "agnhost", Mode: fs.ModeSymlink | 0o777},
		{Path: "/uploads", Mode: fs.ModeDir | 0o755},
		// Upstream's Alpine base has curl, which specs run inside it.
		standIn("/usr/bin/podbay-standin", 0o755),
		{Path: "/usr/bin/curl", Link: "/usr/bin/podbay-standin", Mode: 0o755},
		// And bash, which specs run scripts with (/bin/bash -c ...): they
		// are POSIX, and busybox's ash runs them.
		{Path: "/bin/bash", Content: []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n"), Mode: 0o755},
		{Path: "/etc/passwd", Content: []byte(withoutTestAccounts(passwd) + "user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh\n")},
		{Path: "/etc/group", Content: []byte(withoutTestAccounts(group) + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
		{Path: "/home/user-defined-in-image", Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000},
		// Upstream's base's os-release, which the ImageVolume specs read
		// from kitten mounted as a volume ("Alpine Linux").
		{Path: "/etc/os-release", Content: []byte(alpineOSRelease), Mode: 0o644},
	}
	agnhostFiles = append(agnhostFiles, fromImages("/localhost.crt", "agnhost/porter/localhost.crt")...)
	agnhostFiles = append(agnhostFiles, fromImages("/localhost.key", "agnhost/porter/localhost.key")...)
	agnhost := func(name string, tags []string, extra []File, cmd string) Spec {
		return Spec{
			Repository: e2e(name),
			Tags:       tags,
			Files:      append(append([]File(nil), agnhostFiles...), extra...),
			Config: Config{
				Env:          []string{DefaultPath},
				Entrypoint:   []string{"/agnhost"},
				Cmd:          []string{cmd},
				ExposedPorts: []string{"80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp"},
			},
			Platforms: platforms,
		}
	}
	picture := func(name string) []File {
		return append(fromImages("/"+name+".jpg", name+"/html/"+name+".jpg"), fromImages("/data.json", name+"/html/data.json")...)
	}

	specs := []Spec{
		{
			Repository: e2e("busybox"),
			Tags:       []string{"1.37.0-2"},
			Config:     busybox,
			Platforms:  platforms,
		},
		agnhost("agnhost", []string{"2.66.1", "2.55"}, nil, "pause"),
		agnhost("kitten", []string{"1.8"}, picture("kitten"), "test-webserver"),
		agnhost("nautilus", []string{"1.8"}, picture("nautilus"), "test-webserver"),
		{
			Repository: e2e("nginx"),
			Tags:       []string{"1.27.0-2", "1.28.0-2"},
			Files: []File{
				standIn("/usr/sbin/nginx", 0o755),
				{Path: "/etc/nginx/conf.d/default.conf", Content: []byte(fmt.Sprintf(nginxConf, 80))},
				{Path: "/var/run", Mode: fs.ModeDir | 0o755},
				{Path: "/var/log/nginx", Mode: fs.ModeDir | 0o755},
				{Path: "/usr/share/nginx/html/index.html", Content: []byte("<title>Welcome to nginx!</title>\n")},
			},
			Config: Config{
				Env:          []string{DefaultPath},
				Cmd:          []string{"nginx", "-g", "daemon off;"},
				ExposedPorts: []string{"80/tcp"},
				StopSignal:   "SIGQUIT",
			},
			Platforms: platforms,
		},
		{
			Repository: e2e("nonewprivs"),
			Tags:       []string{"1.4"},
			Files:      []File{standIn("/usr/local/bin/nnp", fs.ModeSetuid|0o755)},
			Config:     Config{Env: []string{DefaultPath}, Cmd: []string{"nnp"}},
			Platforms:  platforms,
		},
		{
			Repository: e2e("nonroot"),
			Tags:       []string{"1.5"},
			Config:     Config{Env: []string{DefaultPath}, Cmd: []string{"sh"}, User: "1234"},
			Platforms:  platforms,
		},
		{
			Repository: e2e("glibc-dns-testing"),
			Tags:       []string{"2.1.1"},
			Config:     busybox,
			Platforms:  platforms,
		},
		{
			Repository: e2e("ipc-utils"),
			Tags:       []string{"1.4"},
			Config:     busybox,
			Platforms:  platforms,
		},
		pauseSpec("k8s/pause", []string{"3.10.2"}, opts.PauseBinary),
	}
	return specs, nil
}

// alpineOSRelease is the /etc/os-release of Alpine 3.21, agnhost's base.
const alpineOSRelease = `NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.21.3
PRETTY_NAME="Alpine Linux v3.21"
HOME_URL="https://alpinelinux.org/"
BUG_REPORT_URL="https://gitlab.alpinelinux.org/alpine/aports/-/issues"
`
