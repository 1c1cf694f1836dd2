package podrequest

import (
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/cdi"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/signal"
	"github.com/podbay/podbay/internal/specgen"
)

// Container is a CreateContainer request, as the record, streaming,
// restore and NRI read it, and as the container's spec is built from.
type Container struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Attempt uint32 `json:"attempt"`
	// Image is the image as the request named it; UserImage as the user
	// wrote it.
	Image     string            `json:"image"`
	UserImage string            `json:"userImage,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Annotations are the container's, as the kubelet sent them.
	Annotations map[string]string `json:"annotations,omitempty"`
	// LogPath is relative to the pod's log directory ("" = no log).
	LogPath   string `json:"logPath,omitempty"`
	Tty       bool   `json:"tty,omitempty"`
	Stdin     bool   `json:"stdin,omitempty"`
	StdinOnce bool   `json:"stdinOnce,omitempty"`
	// UserNS is the pod's user namespace, which the container joins; nil:
	// the host's.
	UserNS *specgen.UserNamespace `json:"userNS,omitempty"`

	// Command overrides the image's ENTRYPOINT and Args its CMD.
	Command    []string           `json:"command,omitempty"`
	Args       []string           `json:"args,omitempty"`
	Env        []specgen.KeyValue `json:"env,omitempty"`
	WorkingDir string             `json:"workingDir,omitempty"`
	// StopSignal is the signal's name ("" = the image's, else SIGTERM).
	StopSignal string `json:"stopSignal,omitempty"`
	// Mounts are the CRI mounts in the request's order: host paths (not
	// yet resolved) and image volumes.
	Mounts  []Mount  `json:"mounts,omitempty"`
	Devices []Device `json:"devices,omitempty"`
	// CDIDevices are the qualified CDI device names the container asks
	// for, by the CRI field and by cdi.k8s.io/ annotations.
	CDIDevices []string `json:"cdiDevices,omitempty"`
	// Resources are the container's limits; nil when the kubelet sent
	// none.
	Resources *specgen.Resources `json:"resources,omitempty"`
	Security  Security           `json:"security"`
}

// FromContainerConfig returns the container cfg asks for in pod; cfg has
// passed CheckContainerConfig. A container may repeat the pod's user
// namespace options (the kubelet does) but not ask for others: that is
// errdefs.ErrInvalidArgument.
func FromContainerConfig(cfg *runtimeapi.ContainerConfig, pod *Pod) (*Container, error) {
	c := ContainerOf(cfg)
	c.UserNS = pod.UserNS
	if c.UserNS != nil && c.Security.MaskedPaths == nil && c.Security.ReadonlyPaths == nil {
		// procMount Unmasked: the kubelet sends empty lists, which arrive
		// as none, and allows it only with hostUsers: false. A container
		// of the host's user namespace without lists keeps the defaults,
		// masked.
		c.Security.MaskedPaths, c.Security.ReadonlyPaths = []string{}, []string{}
	}
	if own := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); own != nil {
		mine, err := UserNamespace(own)
		if err != nil {
			return nil, err
		}
		if (mine == nil) != (pod.UserNS == nil) || (mine != nil && *mine != *pod.UserNS) {
			return nil, fmt.Errorf("container user namespace options differ from the pod's: a container joins its pod's user namespace: %w", errdefs.ErrInvalidArgument)
		}
	}
	return c, nil
}

// ContainerOf converts cfg without validating it: the config of a record
// written before records held the Container (the container was accepted
// when it was made), or a RestorePod's config compared with its
// checkpoint. Its user namespace is unknown there and left nil, and a
// part it cannot derive is left out.
func ContainerOf(cfg *runtimeapi.ContainerConfig) *Container {
	c := &Container{
		Version:     Version,
		Name:        cfg.GetMetadata().GetName(),
		Attempt:     cfg.GetMetadata().GetAttempt(),
		Image:       cfg.GetImage().GetImage(),
		UserImage:   cfg.GetImage().GetUserSpecifiedImage(),
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		LogPath:     cfg.GetLogPath(),
		Tty:         cfg.GetTty(),
		Stdin:       cfg.GetStdin(),
		StdinOnce:   cfg.GetStdinOnce(),
		Command:     cfg.GetCommand(),
		Args:        cfg.GetArgs(),
		Env:         env(cfg.GetEnvs()),
		WorkingDir:  cfg.GetWorkingDir(),
		Mounts:      mounts(cfg.GetMounts()),
		Devices:     devices(cfg.GetDevices()),
		Resources:   ResourcesOf(cfg.GetLinux().GetResources()),
		Security:    security(cfg.GetLinux().GetSecurityContext()),
	}
	c.StopSignal, _ = StopSignal(cfg.GetStopSignal())
	c.CDIDevices, _ = requestedCDIDevices(cfg)
	return c
}

// Spec is specgen's description of the container, with what the request
// says; the caller adds what the daemon made or looked up on the host
// (ID, sandbox, image, rootfs, user, mounts, devices, files, allowed
// annotations, seccomp profile content, the PID namespace's target).
func (c *Container) Spec(pod *Pod) specgen.Container {
	desc := specgen.Container{
		Name:       c.Name,
		Command:    c.Command,
		Args:       c.Args,
		Env:        c.Env,
		WorkingDir: c.WorkingDir,
		Tty:        c.Tty,
		Hostname:   pod.Hostname,
		Security: specgen.Security{
			Privileged:     c.Security.Privileged,
			CapAdd:         c.Security.CapAdd,
			CapDrop:        c.Security.CapDrop,
			ReadonlyRootfs: c.Security.ReadonlyRootfs,
			NoNewPrivs:     c.Security.NoNewPrivs,
			Seccomp:        specgen.SeccompProfile{Type: c.Security.Seccomp.Type},
			AppArmor:       c.Security.AppArmor,
			MaskedPaths:    c.Security.MaskedPaths,
			ReadonlyPaths:  c.Security.ReadonlyPaths,
			Sysctls:        pod.Sysctls,
			Namespaces:     specgen.NamespaceOptions{Pid: c.Security.PIDNamespace, Ipc: c.Security.IPCNamespace},
		},
	}
	desc.Sandbox.Privileged = pod.Security.Privileged
	desc.Sandbox.UserNS = c.UserNS
	if c.Resources != nil {
		desc.Resources = *c.Resources
	}
	return desc
}

// User is what ResolveUser needs to pick the container's identity, with
// imageUser the image config's User.
func (c *Container) User(imageUser string) specgen.UserRequest {
	return specgen.UserRequest{
		ImageUser:                imageUser,
		RunAsUsername:            c.Security.RunAsUsername,
		RunAsUser:                c.Security.RunAsUser,
		RunAsGroup:               c.Security.RunAsGroup,
		SupplementalGroups:       c.Security.SupplementalGroups,
		StrictSupplementalGroups: c.Security.StrictSupplementalGroups,
	}
}

// HasBindMounts reports whether the request mounts anything (the OCI
// hooks' hasBindMounts condition).
func (c *Container) HasBindMounts() bool { return len(c.Mounts) > 0 }

// env translates a CRI container's environment.
func env(kvs []*runtimeapi.KeyValue) []specgen.KeyValue {
	var out []specgen.KeyValue
	for _, kv := range kvs {
		out = append(out, specgen.KeyValue{Key: kv.GetKey(), Value: string(kv.GetValue())})
	}
	return out
}

// requestedCDIDevices are the CDI devices cfg asks for, by the CRI field
// and by cdi.k8s.io/ annotations; a malformed name is an InvalidArgument
// error.
func requestedCDIDevices(cfg *runtimeapi.ContainerConfig) ([]string, error) {
	var names []string
	for _, d := range cfg.GetCDIDevices() {
		names = append(names, d.GetName())
	}
	return cdi.Requested(names, cfg.GetAnnotations())
}

// StopSignal translates ContainerConfig.stop_signal into the name a
// container record keeps ("" for RUNTIME_DEFAULT: the image's, else
// SIGTERM). An enum value this cri-api does not know is refused.
func StopSignal(sig runtimeapi.Signal) (string, error) {
	if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return "", nil
	}
	name, ok := runtimeapi.Signal_name[int32(sig)]
	if !ok {
		return "", errInvalid(fmt.Sprintf("stop_signal %d is not a signal this runtime knows", int32(sig)))
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	// Linux's aliases, which Go's signal table names by the canonical name.
	switch name {
	case "SIGIOT":
		name = "SIGABRT"
	case "SIGPOLL":
		name = "SIGIO"
	case "SIGCLD":
		name = "SIGCHLD"
	}
	if n, ok := strings.CutPrefix(name, "SIGRTMINPLUS"); ok {
		name = "SIGRTMIN+" + n
	} else if n, ok := strings.CutPrefix(name, "SIGRTMAXMINUS"); ok {
		name = "SIGRTMAX-" + n
	}
	if _, err := signal.Parse(name); err != nil {
		return "", errInvalid(fmt.Sprintf("stop_signal %s is not a Linux signal", sig))
	}
	return name, nil
}
