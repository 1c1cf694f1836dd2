package podrequest

import (
	"fmt"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/specgen"
)

// CheckContainerConfig refuses, with errdefs.ErrInvalidArgument, a
// CreateContainer config that is malformed or that the runtime would
// refuse after the container's storage is made; it needs neither the pod
// nor the host. What only the host can tell (a mount source, a device, a
// seccomp profile's file) is the server's to check.
func CheckContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	if err := checkContainerMetadata(cfg); err != nil {
		return err
	}
	if err := checkMounts(cfg.GetMounts()); err != nil {
		return err
	}
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
		// CRI: run_as_group "should only be specified when run_as_user or
		// run_as_username is specified; otherwise, the runtime MUST error".
		return errInvalid("run_as_group is set without run_as_user or run_as_username")
	}
	// What the runtime would refuse at create, after the container's
	// storage is made.
	if err := specgen.CheckProcess(cfg.GetCommand(), cfg.GetArgs(), env(cfg.GetEnvs()), cfg.GetWorkingDir()); err != nil {
		return err
	}
	if _, err := StopSignal(cfg.GetStopSignal()); err != nil {
		return err
	}
	for _, m := range cfg.GetMounts() {
		if err := specgen.CheckMountOptions(m.GetMountOptions()); err != nil {
			return err
		}
	}
	if _, err := requestedCDIDevices(cfg); err != nil {
		return err
	}
	if r := cfg.GetLinux().GetResources(); r != nil {
		if err := specgen.CheckResources(Resources(r)); err != nil {
			return err
		}
	}
	if err := checkLogPath(cfg.GetLogPath()); err != nil {
		return err
	}
	return checkContainerSecurity(cfg)
}

func checkContainerMetadata(cfg *runtimeapi.ContainerConfig) error {
	if cfg == nil {
		return errInvalid("container config is required")
	}
	if cfg.GetMetadata() == nil || cfg.GetMetadata().GetName() == "" {
		return errInvalid("container metadata name is required")
	}
	if n := cfg.GetMetadata().GetName(); len(n) > 253 || strings.ContainsAny(n, "/\x00") {
		return errInvalid(fmt.Sprintf("container name %q is not valid", n))
	}
	if cfg.GetImage().GetImage() == "" {
		return errInvalid("container image is required")
	}
	return nil
}

// checkLogPath accepts a path of a file relative to the pod's log
// directory that conmon can open.
func checkLogPath(lp string) error {
	if strings.ContainsRune(lp, 0) {
		// conmon cannot be started with it (found by TestCRIFuzz).
		return errInvalid(fmt.Sprintf("log path %q contains a NUL byte", lp))
	}
	if filepath.IsAbs(lp) || strings.Contains(lp, "..") {
		return errInvalid(fmt.Sprintf("log path %q must be relative to the pod's log directory", lp))
	}
	if lp != "" && (filepath.Clean(lp) == "." || strings.HasSuffix(lp, "/")) {
		// The log directory itself, or a directory in it: conmon cannot
		// open it as a file and dies (found by TestCRIFuzz).
		return errInvalid(fmt.Sprintf("log path %q must name a file in the pod's log directory", lp))
	}
	for _, name := range strings.Split(lp, "/") {
		// Longer than NAME_MAX, conmon fails to open the log and dies
		// before podbay can move it to its cgroup (found by TestCRIFuzz).
		if len(name) > 255 {
			return errInvalid(fmt.Sprintf("log path %.64q...: a name longer than 255 bytes", lp))
		}
	}
	return nil
}

// checkContainerSecurity refuses what the server refused while it built
// the spec, after the container's storage was made: a host path mount
// with a relative path, a relative Localhost seccomp profile, an
// apparmor_profile of no known form.
func checkContainerSecurity(cfg *runtimeapi.ContainerConfig) error {
	if err := checkHostPathMounts(cfg.GetMounts()); err != nil {
		return err
	}
	sc := cfg.GetLinux().GetSecurityContext()
	if _, err := seccompProfile(sc.GetSeccomp()); err != nil {
		return err
	}
	_, err := appArmorProfile(sc)
	return err
}
