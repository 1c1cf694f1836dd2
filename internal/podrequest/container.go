package podrequest

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/specgen"
)

// Container is a CreateContainer request, as the record, streaming,
// restore and NRI read it.
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
}

// FromContainerConfig returns the container cfg asks for in pod. A
// container may repeat the pod's user namespace options (the kubelet
// does) but not ask for others: that is errdefs.ErrInvalidArgument.
func FromContainerConfig(cfg *runtimeapi.ContainerConfig, pod *Pod) (*Container, error) {
	c := FromStoredContainerConfig(cfg)
	c.UserNS = pod.UserNS
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

// FromStoredContainerConfig converts the config of a record written
// before records held the Container, without validating it (the
// container was accepted when it was made). Its user namespace is
// unknown there and left nil: nothing that reads an old record needs it.
func FromStoredContainerConfig(cfg *runtimeapi.ContainerConfig) *Container {
	return &Container{
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
	}
}
