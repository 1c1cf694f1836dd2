package podrequest

import (
	"fmt"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/specgen"
)

// Security is a container's security context as the request states it.
type Security struct {
	Privileged     bool     `json:"privileged,omitempty"`
	CapAdd         []string `json:"capAdd,omitempty"`
	CapDrop        []string `json:"capDrop,omitempty"`
	ReadonlyRootfs bool     `json:"readonlyRootfs,omitempty"`
	NoNewPrivs     bool     `json:"noNewPrivs,omitempty"`
	// MaskedPaths and ReadonlyPaths: nil means the defaults, an empty
	// slice means none (an explicit list, even empty, replaces the
	// defaults: the kubelet sends empty lists for procMount Unmasked).
	MaskedPaths   []string `json:"maskedPaths"`
	ReadonlyPaths []string `json:"readonlyPaths"`
	// PIDNamespace and IPCNamespace are the CRI's modes; TargetID is the
	// container whose PID namespace NamespaceTarget joins.
	PIDNamespace specgen.NamespaceMode `json:"pidNamespace,omitempty"`
	IPCNamespace specgen.NamespaceMode `json:"ipcNamespace,omitempty"`
	TargetID     string                `json:"targetID,omitempty"`
	// The user: RunAsUsername, else RunAsUser, replaces the image's.
	RunAsUsername            string  `json:"runAsUsername,omitempty"`
	RunAsUser                *int64  `json:"runAsUser,omitempty"`
	RunAsGroup               *int64  `json:"runAsGroup,omitempty"`
	SupplementalGroups       []int64 `json:"supplementalGroups,omitempty"`
	StrictSupplementalGroups bool    `json:"strictSupplementalGroups,omitempty"`
	Seccomp                  Seccomp `json:"seccomp"`
	// AppArmor is the profile the container runs under.
	AppArmor specgen.AppArmorProfile `json:"appArmor"`
}

// Seccomp is a container's seccomp profile; a Localhost one names the
// node's file (an absolute path), which the server reads.
type Seccomp struct {
	Type         specgen.ProfileType `json:"type"`
	LocalhostRef string              `json:"localhostRef,omitempty"`
}

// security converts sc, leaving out what it cannot convert (a profile
// CheckContainerConfig refuses).
func security(sc *runtimeapi.LinuxContainerSecurityContext) Security {
	ns := sc.GetNamespaceOptions()
	out := Security{
		Privileged:               sc.GetPrivileged(),
		CapAdd:                   sc.GetCapabilities().GetAddCapabilities(),
		CapDrop:                  sc.GetCapabilities().GetDropCapabilities(),
		ReadonlyRootfs:           sc.GetReadonlyRootfs(),
		NoNewPrivs:               sc.GetNoNewPrivs(),
		PIDNamespace:             specgen.NamespaceMode(ns.GetPid()),
		IPCNamespace:             specgen.NamespaceMode(ns.GetIpc()),
		RunAsUsername:            sc.GetRunAsUsername(),
		RunAsUser:                int64Ptr(sc.GetRunAsUser()),
		RunAsGroup:               int64Ptr(sc.GetRunAsGroup()),
		SupplementalGroups:       sc.GetSupplementalGroups(),
		StrictSupplementalGroups: sc.GetSupplementalGroupsPolicy() == runtimeapi.SupplementalGroupsPolicy_Strict,
	}
	if out.PIDNamespace == specgen.NamespaceTarget {
		out.TargetID = ns.GetTargetId()
	}
	if len(sc.GetMaskedPaths()) > 0 || len(sc.GetReadonlyPaths()) > 0 {
		// The caller's lists replace the defaults (the kubelet sends the
		// default ones for procMount Default). Empty lists, which proto3
		// carries as none, are procMount Unmasked only in a pod with a
		// user namespace (FromContainerConfig).
		out.MaskedPaths = append([]string{}, sc.GetMaskedPaths()...)
		out.ReadonlyPaths = append([]string{}, sc.GetReadonlyPaths()...)
	}
	out.Seccomp, _ = seccompProfile(sc.GetSeccomp())
	out.AppArmor, _ = appArmorProfile(sc)
	return out
}

// seccompProfile maps the CRI profile. No profile is Unconfined, as
// Kubernetes means it: RuntimeDefault is the enum's zero value, so the
// nil check must come first. A Localhost profile must name an absolute
// path.
func seccompProfile(p *runtimeapi.SecurityProfile) (Seccomp, error) {
	if p == nil {
		return Seccomp{Type: specgen.ProfileUnconfined}, nil
	}
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault:
		return Seccomp{Type: specgen.ProfileRuntimeDefault}, nil
	case runtimeapi.SecurityProfile_Localhost:
		path := p.GetLocalhostRef()
		if !filepath.IsAbs(path) {
			return Seccomp{}, errInvalid(fmt.Sprintf("seccomp profile %q must be an absolute path", path))
		}
		return Seccomp{Type: specgen.ProfileLocalhost, LocalhostRef: path}, nil
	}
	return Seccomp{Type: specgen.ProfileUnconfined}, nil
}

// appArmorProfile is the container's AppArmor profile: the apparmor
// field, else the deprecated apparmor_profile ("runtime/default",
// "unconfined", "localhost/<name>"), else, as containerd and CRI-O do, the
// runtime default (kubernetes#51746): a pod that names none is confined
// where the host has AppArmor.
func appArmorProfile(sc *runtimeapi.LinuxContainerSecurityContext) (specgen.AppArmorProfile, error) {
	p := sc.GetApparmor()
	if p == nil {
		//lint:ignore SA1019 the deprecated field is what older kubelets send
		switch name := sc.GetApparmorProfile(); {
		case name == "" || name == "runtime/default":
			return specgen.AppArmorProfile{Type: specgen.ProfileRuntimeDefault}, nil
		case name == "unconfined":
			return specgen.AppArmorProfile{Type: specgen.ProfileUnconfined}, nil
		case strings.HasPrefix(name, "localhost/"):
			return specgen.AppArmorProfile{Type: specgen.ProfileLocalhost, Localhost: strings.TrimPrefix(name, "localhost/")}, nil
		default:
			return specgen.AppArmorProfile{}, fmt.Errorf("apparmor_profile %q: want runtime/default, unconfined or localhost/<name>: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault:
		return specgen.AppArmorProfile{Type: specgen.ProfileRuntimeDefault}, nil
	case runtimeapi.SecurityProfile_Localhost:
		return specgen.AppArmorProfile{Type: specgen.ProfileLocalhost, Localhost: strings.TrimPrefix(p.GetLocalhostRef(), "localhost/")}, nil
	}
	return specgen.AppArmorProfile{Type: specgen.ProfileUnconfined}, nil
}

// errInvalid is an InvalidArgument error with msg, as the server words
// its own.
func errInvalid(msg string) error { return fmt.Errorf("%s: %w", msg, errdefs.ErrInvalidArgument) }
