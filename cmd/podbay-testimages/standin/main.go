// Command standin is podbay-standin, the multi-call program of podbay's
// critest stand-in images (see test/testimage/standin): hard-linked as
// pgrep, ipcs, nginx, httpd and nnp, it runs the applet its name says.
// Build it static, as the images have no C library:
//
//	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/podbay-standin ./cmd/podbay-testimages/standin
package main

import (
	"os"
	"syscall"

	"github.com/podbay/podbay/test/testimage/standin"
)

func main() {
	os.Exit(standin.Main(standin.Env{
		Args:   os.Args,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Exec: func(argv []string) error {
			// /proc/self/exe names the link the binary was run through
			// (/usr/sbin/nginx), so the process keeps that name.
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return syscall.Exec(exe, argv, os.Environ())
		},
	}))
}
