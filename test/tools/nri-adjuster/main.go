// nri-adjuster is an NRI plugin for podbay's integration tests: it makes
// one kind of adjustment to every container it sees created, so that the
// tests can show what [nri.default_validator] lets through.
//
//	nri-adjuster -socket-path S -name N -idx 10 -adjust hook|namespace|sysctl|env
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	adjust string
}

// CreateContainer answers every container with the adjustment asked for.
func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	switch p.adjust {
	case "hook":
		adj.AddHooks(&api.Hooks{Prestart: []*api.Hook{{Path: "/bin/true"}}})
	case "namespace":
		adj.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: "/proc/1/ns/net"})
	case "sysctl":
		adj.SetLinuxSysctl("net.ipv4.ip_forward", "1")
	case "env":
		adj.AddEnv("NRI_ADJUSTER", "seen")
	}
	return adj, nil, nil
}

func main() {
	var socketPath, name, idx, adjust string
	flag.StringVar(&socketPath, "socket-path", "", "the NRI socket")
	flag.StringVar(&name, "name", "adjuster", "the plugin's name")
	flag.StringVar(&idx, "idx", "10", "the plugin's index")
	flag.StringVar(&adjust, "adjust", "env", "hook, namespace, sysctl or env")
	flag.Parse()
	s, err := stub.New(&plugin{adjust: adjust}, stub.WithSocketPath(socketPath), stub.WithPluginName(name), stub.WithPluginIdx(idx))
	if err != nil {
		fmt.Fprintln(os.Stderr, "nri-adjuster:", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "nri-adjuster:", err)
		os.Exit(1)
	}
}
