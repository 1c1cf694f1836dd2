// podbay-pause is the process of every podbay sandbox container: it holds
// the pod's namespaces open, reaps zombies when it is the pod's PID 1, and
// exits on SIGINT or SIGTERM. It is built statically so it runs from a root
// filesystem that holds nothing else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("podbay-pause\n")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			os.Exit(0)
		}
	}
}

// reap collects every exited child, so processes re-parented to the pod's
// PID 1 do not stay zombies.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
