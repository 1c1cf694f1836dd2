// podbay is the operator's command line for podbayd: it lists pods and
// prints a pod's record with its network settings, as `isula inspect` does.
// It speaks the CRI to the daemon's socket, like crictl.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const usage = `usage: podbay [--socket PATH] [--timeout D] COMMAND

commands:
  ps [-a] [-q]    list pods (-a: include not-ready pods; -q: IDs only)
  inspect POD...  print each pod's record, network settings included, as JSON
  pulls [--json] [--watch]
                  list image pulls in flight and finished in the last minute
                  (--watch: again every second until none is in flight)
  version         print the daemon's version
  doctor          check the host and list leaks (podbay doctor -h)
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		var status exitStatus
		if errors.As(err, &status) {
			os.Exit(int(status))
		}
		fmt.Fprintln(os.Stderr, "podbay:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("podbay", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	socket := fs.String("socket", "/run/podbay/podbay.sock", "podbayd's CRI socket")
	timeout := fs.Duration("timeout", 10*time.Second, "RPC timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("no command")
	}
	if fs.Arg(0) == "doctor" {
		return runDoctor(fs.Args()[1:], out)
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "pulls":
		return pulls(conn, *timeout, rest, out)
	case "ps":
		return ps(ctx, client, rest, out)
	case "inspect":
		return inspect(ctx, client, rest, out)
	case "version":
		v, err := client.Version(ctx, &runtimeapi.VersionRequest{})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s (CRI %s)\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
		return nil
	default:
		fs.Usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func ps(ctx context.Context, client runtimeapi.RuntimeServiceClient, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	all := fs.Bool("a", false, "include not-ready pods")
	quiet := fs.Bool("q", false, "print IDs only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	filter := &runtimeapi.PodSandboxFilter{}
	if !*all {
		filter.State = &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	}
	resp, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return err
	}
	if *quiet {
		for _, p := range resp.Items {
			fmt.Fprintln(out, p.Id)
		}
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD ID\tNAME\tNAMESPACE\tSTATE\tIP\tHANDLER\tAGE")
	for _, p := range resp.Items {
		ip := ""
		if st, err := client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Id}); err == nil {
			ip = st.GetStatus().GetNetwork().GetIp()
		}
		state := "Ready"
		if p.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			state = "NotReady"
		}
		age := time.Since(time.Unix(0, p.CreatedAt)).Round(time.Second)
		fmt.Fprintf(w, "%.13s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Id, p.Metadata.GetName(), p.Metadata.GetNamespace(), state, ip, p.RuntimeHandler, age)
	}
	return w.Flush()
}

func inspect(ctx context.Context, client runtimeapi.RuntimeServiceClient, ids []string, out io.Writer) error {
	if len(ids) == 0 {
		return fmt.Errorf("inspect: name at least one pod ID (or unique prefix)")
	}
	var docs []json.RawMessage
	for _, id := range ids {
		resp, err := client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if err != nil {
			return fmt.Errorf("inspect %s: %w", id, err)
		}
		info := resp.GetInfo()["info"]
		if !json.Valid([]byte(info)) {
			return fmt.Errorf("inspect %s: daemon returned no record", id)
		}
		docs = append(docs, json.RawMessage(info))
	}
	b, err := json.MarshalIndent(docs, "", "    ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}
