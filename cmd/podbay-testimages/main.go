// podbay-testimages serves podbay's test images from an in-process registry,
// so that images can be pulled with no internet: it builds the default image
// set (test/testimage.DefaultImages) from the host's static busybox,
// pushes it to a registry on --listen, prints one line per image reference
// it serves, and serves until SIGINT or SIGTERM.
//
// The registry speaks plain HTTP. Clients must treat it as insecure, which
// containers/image (and so podbayd and crictl through it) does for a
// registries.conf entry with insecure = true:
//
//	podbay-testimages --listen 127.0.0.1:5000 &
//	crictl pull 127.0.0.1:5000/test/busybox:latest
//
// With --critest it serves stand-ins for the images critest pulls instead
// (test/testimage.CritestImages), under their upstream names behind a
// prefix per registry (k8s/e2e-test-images/busybox:1.29-2 for
// registry.k8s.io/e2e-test-images/busybox:1.29-2), and --registries-conf
// writes the registries.conf that mirrors those registries to it. Those
// images want Debian's dynamically linked busybox (the busybox package;
// see CritestImages) and podbay-standin, built static:
//
//	CGO_ENABLED=0 go build -o bin/podbay-standin ./cmd/podbay-testimages/standin
//	podbay-testimages --critest --listen 127.0.0.1:0 --busybox DIR/bin/busybox \
//		--standin bin/podbay-standin --pause-binary bin/podbay-pause --registries-conf registries.conf
//
// With --node-e2e it serves stand-ins for the images of Kubernetes' node e2e
// suite instead (test/testimage.NodeE2EImages), the same way; they want
// busybox 1.37.0 built from source and Kubernetes' agnhost, built static
// (hack/e2e-node.sh builds both):
//
//	podbay-testimages --node-e2e --listen 127.0.0.1:0 --busybox DIR/bin/busybox \
//		--standin bin/podbay-standin --agnhost AGNHOST --k8s-images-dir K8S/test/images \
//		--pause-binary bin/podbay-pause --registries-conf registries.conf
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/podbay/podbay/internal/atomicfile"
	"github.com/podbay/podbay/test/testimage"
)

const usage = `usage: podbay-testimages [flags]

Builds podbay's test images from the host's static busybox, serves them from
a registry on --listen (plain HTTP), prints one line per image reference
("<reference> <digest>"), and serves until SIGINT or SIGTERM. With --list,
prints the same lines without serving. With --critest, serves critest's
images (and --registries-conf writes the mirrors configuration for them).

flags:
`

type options struct {
	listen      string
	prefix      string
	list        bool
	busybox     string
	pauseBinary string
	username    string
	password    string
	verbose     bool

	critest        bool
	standIn        string
	registriesConf string

	nodeE2E   bool
	agnhost   string
	imagesDir string

	extra []extraImage // --image
}

// extraImage is an --image: REPOSITORY:TAG=LAYER.tar.gz[,LAYER.tar.gz...],
// served after the default set, its layers on top of the busybox layer.
type extraImage struct {
	repository, tag string
	layers          []string
}

type extraImages []extraImage

func (l *extraImages) String() string { return fmt.Sprint(len(*l), " images") }

func (l *extraImages) Set(v string) error {
	ref, files, ok := strings.Cut(v, "=")
	repo, tag, okTag := strings.Cut(ref, ":")
	if !ok || !okTag || repo == "" || tag == "" || files == "" {
		return fmt.Errorf("want REPOSITORY:TAG=LAYER.tar.gz[,LAYER.tar.gz...], got %q", v)
	}
	*l = append(*l, extraImage{repository: repo, tag: tag, layers: strings.Split(files, ",")})
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podbay-testimages:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("podbay-testimages", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:5000", "`address` to serve on (port 0: any free port)")
	fs.StringVar(&o.prefix, "prefix", "test", "repository `prefix`: \"test\" serves test/busybox, ...")
	fs.BoolVar(&o.list, "list", false, "print the references it would serve, and exit")
	fs.StringVar(&o.busybox, "busybox", testimage.DefaultBusybox, "busybox `binary` to build the images from (static; a dynamically linked one brings its libraries)")
	fs.StringVar(&o.pauseBinary, "pause-binary", "", "static `program` for the pause image's /pause (such as bin/podbay-pause); default: a busybox shell")
	fs.StringVar(&o.username, "username", "", "require HTTP basic auth with this `user`")
	fs.StringVar(&o.password, "password", "", "the basic-auth `password` (with --username)")
	fs.BoolVar(&o.verbose, "v", false, "log every request to stderr")
	fs.BoolVar(&o.critest, "critest", false, "serve stand-ins for critest's images under their upstream names (k8s/..., gcr/..., ecr/..., docker/...) instead of the default set; --prefix is ignored")
	fs.StringVar(&o.standIn, "standin", "", "static podbay-standin `binary` for the critest or node e2e images (with --critest or --node-e2e)")
	fs.StringVar(&o.registriesConf, "registries-conf", "", "with --critest or --node-e2e, write a registries.conf mirroring the upstream registries to this registry into `file` once serving")
	fs.BoolVar(&o.nodeE2E, "node-e2e", false, "serve stand-ins for the images of Kubernetes' node e2e suite under their upstream names instead of the default set (needs --standin and --agnhost)")
	fs.StringVar(&o.agnhost, "agnhost", "", "static agnhost `binary` (with --node-e2e)")
	fs.StringVar(&o.imagesDir, "k8s-images-dir", "", "the k8s.io/kubernetes module's test/images `dir`, for agnhost's certificate and the kitten and nautilus pages (with --node-e2e)")
	fs.Var((*extraImages)(&o.extra), "image", "also serve `REPOSITORY:TAG=LAYER.tar.gz[,...]`: the busybox layer and these gzip-compressed tar layers, as given (repeatable; with the default set)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if len(o.extra) > 0 && (o.critest || o.nodeE2E) {
		return o, errors.New("--image goes with the default set, not --critest or --node-e2e")
	}
	if o.password != "" && o.username == "" {
		return o, errors.New("--password needs --username")
	}
	if o.critest && o.nodeE2E {
		return o, errors.New("--critest and --node-e2e exclude each other")
	}
	if o.critest && o.standIn == "" {
		return o, errors.New("--critest needs --standin")
	}
	if o.nodeE2E && (o.standIn == "" || o.agnhost == "") {
		return o, errors.New("--node-e2e needs --standin and --agnhost")
	}
	if !o.critest && !o.nodeE2E && (o.standIn != "" || o.registriesConf != "") {
		return o, errors.New("--standin and --registries-conf go with --critest or --node-e2e")
	}
	if !o.nodeE2E && (o.agnhost != "" || o.imagesDir != "") {
		return o, errors.New("--agnhost and --k8s-images-dir go with --node-e2e")
	}
	return o, nil
}

// imageSet returns the specs to serve.
func imageSet(ctx context.Context, o options, stderr io.Writer) ([]testimage.Spec, error) {
	if !o.critest && !o.nodeE2E {
		specs := testimage.DefaultImages(testimage.DefaultOptions{Prefix: o.prefix, PauseBinary: o.pauseBinary})
		for _, e := range o.extra {
			spec := testimage.Spec{Repository: e.repository, Tags: []string{e.tag}}
			for _, f := range e.layers {
				gz, err := os.ReadFile(f)
				if err != nil {
					return nil, fmt.Errorf("--image %s:%s: %w", e.repository, e.tag, err)
				}
				spec.CompressedLayers = append(spec.CompressedLayers, gz)
			}
			specs = append(specs, spec)
		}
		return specs, nil
	}
	prefers, err := testimage.ShellPrefersApplets(ctx, o.busybox)
	if err != nil {
		return nil, err
	}
	if prefers {
		fmt.Fprintf(stderr, "podbay-testimages: warning: the shell of %s runs its own applets before PATH (busybox-static); critest's MaskedPaths spec will fail with these images: use Debian's busybox package\n", o.busybox)
	}
	if o.nodeE2E {
		return testimage.NodeE2EImages(testimage.NodeE2EOptions{StandIn: o.standIn, Agnhost: o.agnhost, ImagesDir: o.imagesDir, PauseBinary: o.pauseBinary})
	}
	return testimage.CritestImages(testimage.CritestOptions{StandIn: o.standIn, PauseBinary: o.pauseBinary})
}

// run serves until ctx ends, writing the references to stdout and progress
// to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	specs, err := imageSet(ctx, o, stderr)
	if err != nil {
		return err
	}
	builder := testimage.NewBuilder(o.busybox)

	if o.list {
		for _, spec := range specs {
			a, err := builder.Build(ctx, spec)
			if err != nil {
				return err
			}
			d, err := a.Digest()
			if err != nil {
				return fmt.Errorf("image %s: %w", spec.Repository, err)
			}
			for _, ref := range spec.References(o.listen) {
				fmt.Fprintln(stdout, ref, d)
			}
		}
		return nil
	}

	var logger *slog.Logger
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	reg, err := testimage.Start(ctx, testimage.Options{
		Addr:     o.listen,
		Builder:  builder,
		Username: o.username,
		Password: o.password,
		Logger:   logger,
	})
	if err != nil {
		return err
	}
	for _, spec := range specs {
		d, err := reg.Push(ctx, spec)
		if err != nil {
			_ = reg.Close()
			return err
		}
		for _, ref := range spec.References(reg.Addr()) {
			fmt.Fprintln(stdout, ref, d)
		}
	}
	if o.registriesConf != "" {
		conf := testimage.MirrorsConf(reg.Addr(), testimage.CritestMirrors())
		if err := atomicfile.WriteFile(o.registriesConf, []byte(conf), 0o644); err != nil {
			_ = reg.Close()
			return fmt.Errorf("write %s: %w", o.registriesConf, err)
		}
	}
	fmt.Fprintf(stderr, "podbay-testimages: serving %d images on http://%s until SIGINT or SIGTERM\n", len(specs), reg.Addr())
	<-ctx.Done()
	if err := reg.Close(); err != nil {
		return fmt.Errorf("close registry: %w", err)
	}
	return nil
}
