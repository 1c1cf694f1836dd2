package shim

import (
	"encoding/json"
	"fmt"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs under which containerd's typeurl registers the runtime spec
// types; shims decode an exec's process and an update's resources by them
// (Kata through typeurl, runc-v2 reads the JSON value directly). The Anys
// are built here rather than through typeurl's global registry, which
// panics when two packages register the same type.
const (
	processURL   = "types.containerd.io/opencontainers/runtime-spec/1/Process"
	resourcesURL = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources"
)

// RuncOptions returns the options of containerd-shim-runc-v2
// (containerd.runc.v1.Options): binaryName is the runc binary ("" means
// "runc" in the shim's PATH), root the directory runc keeps its state in
// ("" means the shim's default, /run/containerd/runc/<namespace>).
func RuncOptions(binaryName, root string) (*anypb.Any, error) {
	return protoAny(&runcoptions.Options{BinaryName: binaryName, Root: root})
}

// ConfigPathOptions returns the options containerd sends Kata's and
// gVisor's shims (runtimeoptions.v1.Options): path is the runtime's
// configuration file, typeURL what its content is (containerd's TypeUrl
// option; "io.containerd.runsc.v1.options" for a runsc.toml, "" for Kata).
func ConfigPathOptions(path, typeURL string) (*anypb.Any, error) {
	return protoAny(&runtimeoptions.Options{TypeUrl: typeURL, ConfigPath: path})
}

// protoAny packs m as containerd's typeurl.MarshalAny does: the type URL
// is the message's full name, without anypb's "type.googleapis.com/"
// prefix, which the shims' typeurl does not resolve.
func protoAny(m proto.Message) (*anypb.Any, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", proto.MessageName(m), err)
	}
	return &anypb.Any{TypeUrl: string(proto.MessageName(m)), Value: data}, nil
}

// jsonAny packs v as typeurl does a registered non-proto type: its JSON
// under url.
func jsonAny(url string, v any) (*anypb.Any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: url, Value: data}, nil
}

func processAny(p *specs.Process) (*anypb.Any, error) { return jsonAny(processURL, p) }

// SystemdRuncOptions is RuncOptions for the systemd cgroup driver:
// SystemdCgroup makes the shim run runc with --systemd-cgroup, as
// containerd's SystemdCgroup = true.
func SystemdRuncOptions(binaryName, root string) (*anypb.Any, error) {
	return protoAny(&runcoptions.Options{BinaryName: binaryName, Root: root, SystemdCgroup: true})
}
