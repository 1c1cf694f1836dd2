package testimage

import "path"

// DefaultOptions choose the names and content of DefaultImages.
type DefaultOptions struct {
	// Prefix goes before every repository name: "test" gives
	// "test/busybox". Empty gives "busybox".
	Prefix string
	// PauseBinary, when set, is a host path to a static program that the
	// pause image runs as /pause (such as podbay-pause). Empty: the pause
	// image runs a busybox shell that sleeps until SIGTERM or SIGINT.
	PauseBinary string
}

// pauseScript sleeps until SIGTERM or SIGINT and then exits 0, as the pause
// program does. The trap runs while the shell waits, which a plain
// foreground sleep would not allow. The sleep is started through busybox
// because the pause image has no applet links.
const pauseScript = `trap 'exit 0' TERM INT; /bin/busybox sleep 2147483647 & wait`

// DefaultImages is the image set the integration tests and
// podbay-testimages serve. Repository names below are without the prefix.
//
//   - busybox:latest and busybox:1.36 (one image, two tags): BusyboxLayer,
//     Env DefaultPath, Cmd ["sh"], OCI media types.
//   - busybox-docker:latest: the same content with Docker v2 schema 2
//     media types (so a different manifest digest, the same layer).
//   - user-uid:latest: busybox with User "1000:1000".
//   - user-name:latest: busybox with User "www-data" (uid 33, resolved from
//     the image's /etc/passwd).
//   - config:latest: busybox with Env (PATH, GREETING, EMPTY=), WorkingDir
//     /srv/app (holding hello.txt, "hello from the image\n"), Entrypoint
//     ["/bin/echo", "entrypoint"], Cmd ["cmd"] (so the default command
//     prints "entrypoint cmd"), Volumes /data and /cache, Labels,
//     ExposedPorts 8080/tcp and 53/udp, StopSignal SIGUSR1.
//   - multiarch:latest: an index for linux/amd64, linux/arm64 and
//     linux/arm/v7; the host's platform gets real busybox, the others a
//     stand-in layer.
//   - pause:latest and pause:3.10: one small layer, no shell links; see
//     DefaultOptions.PauseBinary.
//
// Busybox images share one base layer blob.
func DefaultImages(opts DefaultOptions) []Spec {
	repo := func(name string) string { return path.Join(opts.Prefix, name) }
	busyboxConfig := Config{Env: []string{DefaultPath}, Cmd: []string{"sh"}}
	withUser := func(user string) Config {
		c := busyboxConfig
		c.User = user
		return c
	}

	pause := pauseSpec(repo("pause"), []string{"latest", "3.10"}, opts.PauseBinary)

	return []Spec{
		{
			Repository: repo("busybox"),
			Tags:       []string{"latest", "1.36"},
			Config:     busyboxConfig,
		},
		{
			Repository: repo("busybox-docker"),
			Tags:       []string{"latest"},
			Config:     busyboxConfig,
			Format:     DockerV2,
		},
		{
			Repository: repo("user-uid"),
			Tags:       []string{"latest"},
			Config:     withUser("1000:1000"),
		},
		{
			Repository: repo("user-name"),
			Tags:       []string{"latest"},
			Config:     withUser("www-data"),
		},
		{
			Repository: repo("config"),
			Tags:       []string{"latest"},
			Files: []File{
				{Path: "/srv/app/hello.txt", Content: []byte("hello from the image\n")},
			},
			Config: Config{
				Env:          []string{DefaultPath, "GREETING=hello world", "EMPTY="},
				WorkingDir:   "/srv/app",
				Entrypoint:   []string{"/bin/echo", "entrypoint"},
				Cmd:          []string{"cmd"},
				Volumes:      []string{"/data", "/cache"},
				Labels:       map[string]string{"io.podbay.test": "config", "org.opencontainers.image.title": "podbay test config image"},
				ExposedPorts: []string{"8080/tcp", "53/udp"},
				StopSignal:   "SIGUSR1",
			},
		},
		{
			Repository: repo("multiarch"),
			Tags:       []string{"latest"},
			Config:     busyboxConfig,
			Platforms:  []string{"linux/amd64", "linux/arm64", "linux/arm/v7"},
		},
		pause,
	}
}

// pauseSpec is the pause image: podbay-pause at /pause when pauseBinary is
// set, else a busybox shell that sleeps until SIGTERM or SIGINT.
func pauseSpec(repo string, tags []string, pauseBinary string) Spec {
	pause := Spec{
		Repository: repo,
		Tags:       tags,
		Base:       BaseBusyboxBinary,
		Config: Config{
			Entrypoint: []string{"/bin/busybox", "sh", "-c", pauseScript},
			StopSignal: "SIGTERM",
		},
	}
	if pauseBinary != "" {
		pause.Base = BaseScratch
		pause.Files = []File{{Path: "/pause", HostPath: pauseBinary, Mode: 0o755}}
		pause.Config.Entrypoint = []string{"/pause"}
	}
	return pause
}
