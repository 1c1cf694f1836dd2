// podbay-testimages serves podbay's test images from an in-process registry,
// so that images can be pulled with no internet: it builds the default image
// set (internal/testimage.DefaultImages) from the host's static busybox,
// pushes it to a registry on --listen, prints one line per image reference
// it serves, and serves until SIGINT or SIGTERM.
//
// The registry speaks plain HTTP. Clients must treat it as insecure, which
// containers/image (and so podbayd and crictl through it) does for a
// registries.conf entry with insecure = true:
//
//	podbay-testimages --listen 127.0.0.1:5000 &
//	crictl pull 127.0.0.1:5000/test/busybox:latest
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
	"syscall"

	"github.com/podbay/podbay/internal/testimage"
)

const usage = `usage: podbay-testimages [flags]

Builds podbay's test images from the host's static busybox, serves them from
a registry on --listen (plain HTTP), prints one line per image reference
("<reference> <digest>"), and serves until SIGINT or SIGTERM. With --list,
prints the same lines without serving.

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
	fs.StringVar(&o.busybox, "busybox", testimage.DefaultBusybox, "static busybox `binary` to build the images from")
	fs.StringVar(&o.pauseBinary, "pause-binary", "", "static `program` for the pause image's /pause (such as bin/podbay-pause); default: a busybox shell")
	fs.StringVar(&o.username, "username", "", "require HTTP basic auth with this `user`")
	fs.StringVar(&o.password, "password", "", "the basic-auth `password` (with --username)")
	fs.BoolVar(&o.verbose, "v", false, "log every request to stderr")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.password != "" && o.username == "" {
		return o, errors.New("--password needs --username")
	}
	return o, nil
}

// run serves until ctx ends, writing the references to stdout and progress
// to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	specs := testimage.DefaultImages(testimage.DefaultOptions{Prefix: o.prefix, PauseBinary: o.pauseBinary})
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
	fmt.Fprintf(stderr, "podbay-testimages: serving %d images on http://%s until SIGINT or SIGTERM\n", len(specs), reg.Addr())
	<-ctx.Done()
	if err := reg.Close(); err != nil {
		return fmt.Errorf("close registry: %w", err)
	}
	return nil
}
