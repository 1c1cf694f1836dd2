package podrequest

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/specgen"
)

// Mount is one CRI mount: a host path, or an image volume (KEP-4639)
// when Image is set.
type Mount struct {
	ContainerPath     string   `json:"containerPath"`
	HostPath          string   `json:"hostPath,omitempty"`
	Readonly          bool     `json:"readonly,omitempty"`
	RecursiveReadOnly bool     `json:"recursiveReadOnly,omitempty"`
	SelinuxRelabel    bool     `json:"selinuxRelabel,omitempty"`
	Options           []string `json:"options,omitempty"`
	// Propagation is the CRI's name (PROPAGATION_PRIVATE, …), as a
	// container record keeps it.
	Propagation string `json:"propagation,omitempty"`
	// Image is an image volume's image as the request names it (PullImage's
	// image_ref); ImageSubPath the directory of it to mount.
	Image        string `json:"image,omitempty"`
	ImageSubPath string `json:"imageSubPath,omitempty"`
}

// IsImageVolume reports whether m mounts an image.
func (m Mount) IsImageVolume() bool { return m.Image != "" }

// SpecPropagation is m's propagation as specgen names it.
func (m Mount) SpecPropagation() specgen.Propagation {
	switch runtimeapi.MountPropagation(runtimeapi.MountPropagation_value[m.Propagation]) {
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		return specgen.PropagationHostToContainer
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		return specgen.PropagationBidirectional
	}
	return specgen.PropagationPrivate
}

// Device is one CRI device, a host path the server looks up.
type Device struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"`
	Permissions   string `json:"permissions,omitempty"`
}

func mounts(ms []*runtimeapi.Mount) []Mount {
	var out []Mount
	for _, m := range ms {
		out = append(out, Mount{
			ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), Readonly: m.GetReadonly(),
			RecursiveReadOnly: m.GetRecursiveReadOnly(), SelinuxRelabel: m.GetSelinuxRelabel(),
			Options: m.GetMountOptions(), Propagation: m.GetPropagation().String(),
			Image: m.GetImage().GetImage(), ImageSubPath: m.GetImageSubPath(),
		})
	}
	return out
}

func devices(ds []*runtimeapi.Device) []Device {
	var out []Device
	for _, d := range ds {
		out = append(out, Device{HostPath: d.GetHostPath(), ContainerPath: d.GetContainerPath(), Permissions: d.GetPermissions()})
	}
	return out
}

// checkMounts checks what can be checked of the mounts without the host:
// image volumes (KEP-4639) and the paths of host path mounts, which must
// be absolute.
func checkMounts(ms []*runtimeapi.Mount) error {
	for _, m := range ms {
		sub := m.GetImageSubPath()
		if m.GetImage().GetImage() == "" {
			if sub != "" {
				return errInvalid(fmt.Sprintf("mount at %q: image_sub_path %q without an image", m.GetContainerPath(), sub))
			}
			continue
		}
		if m.GetHostPath() != "" {
			return errInvalid(fmt.Sprintf("mount at %q: host_path and image are mutually exclusive", m.GetContainerPath()))
		}
		if !path.IsAbs(m.GetContainerPath()) {
			return errInvalid(fmt.Sprintf("image volume %s: container path %q must be absolute", m.GetImage().GetImage(), m.GetContainerPath()))
		}
		if err := checkImageSubPath(sub); err != nil {
			return err
		}
	}
	return nil
}

// checkHostPathMounts refuses a host path mount whose paths are not
// absolute.
func checkHostPathMounts(ms []*runtimeapi.Mount) error {
	for _, m := range ms {
		if m.GetImage().GetImage() != "" {
			continue
		}
		if !filepath.IsAbs(m.GetHostPath()) || !filepath.IsAbs(m.GetContainerPath()) {
			return errInvalid(fmt.Sprintf("mount %s:%s: paths must be absolute", m.GetHostPath(), m.GetContainerPath()))
		}
	}
	return nil
}

// checkImageSubPath accepts what the kubelet does: a relative path with no
// ".." in it.
func checkImageSubPath(sub string) error {
	switch {
	case sub == "":
		return nil
	case strings.ContainsRune(sub, 0):
		return errInvalid(fmt.Sprintf("image_sub_path %q contains a NUL byte", sub))
	case path.IsAbs(sub):
		return errInvalid(fmt.Sprintf("image_sub_path %q must be relative", sub))
	case slices.Contains(strings.Split(sub, "/"), ".."):
		return errInvalid(fmt.Sprintf("image_sub_path %q must not contain '..'", sub))
	}
	return nil
}
