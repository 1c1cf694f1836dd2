package specgen

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// ProfileType is the kind of a seccomp or AppArmor profile. The zero value
// is Unconfined, which is what an absent CRI profile means.
type ProfileType int

// Profile types.
const (
	ProfileUnconfined ProfileType = iota
	ProfileRuntimeDefault
	ProfileLocalhost
)

// SeccompProfile is a container's seccomp profile.
type SeccompProfile struct {
	Type ProfileType
	// Localhost is the content of the Localhost profile, which the caller
	// reads from the node: an OCI LinuxSeccomp document, or a profile in
	// Docker's format (which extends it with archMap, includes and
	// excludes).
	Localhost []byte
}

// AppArmorProfile is a container's AppArmor profile.
type AppArmorProfile struct {
	Type ProfileType
	// Localhost is the name of a profile loaded on the node.
	Localhost string
}

// capabilities applies add and drop to the default set, with containerd's
// order: add ALL (all of current, see Host.Capabilities), drop ALL, add the
// named, drop the named.
func capabilities(add, drop, current []string) (*specs.LinuxCapabilities, error) {
	set := map[string]bool{}
	for _, c := range defaultCapabilities {
		set[c] = true
	}
	addNames, addAll, err := capabilityNames(add)
	if err != nil {
		return nil, err
	}
	dropNames, dropAll, err := capabilityNames(drop)
	if err != nil {
		return nil, err
	}
	if addAll {
		for _, c := range allCapabilities(current).Bounding {
			set[c] = true
		}
	}
	if dropAll {
		clear(set)
	}
	for _, c := range addNames {
		set[c] = true
	}
	for _, c := range dropNames {
		delete(set, c)
	}
	caps := make([]string, 0, len(set))
	for c := range set {
		caps = append(caps, c)
	}
	return capabilitySet(caps), nil
}

// capabilityNames normalises CRI capability names ("net_admin",
// "CAP_NET_ADMIN") to their OCI form and reports whether "ALL" was among
// them.
func capabilityNames(names []string) (caps []string, all bool, err error) {
	for _, n := range names {
		c := strings.ToUpper(strings.TrimSpace(n))
		if c == "ALL" {
			all = true
			continue
		}
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		if !slices.Contains(knownCapabilities, c) {
			return nil, false, fmt.Errorf("unknown capability %q: %w", n, errdefs.ErrInvalidArgument)
		}
		caps = append(caps, c)
	}
	return caps, all, nil
}

// appArmorProfile is the process's AppArmor profile, following containerd:
// nothing without AppArmor on the host (a Localhost profile is then an
// error, since the container would silently run without it), nothing for
// privileged containers asking for the runtime default.
func appArmorProfile(p AppArmorProfile, privileged bool, host Host) (string, error) {
	switch p.Type {
	case ProfileUnconfined:
		return "", nil
	case ProfileRuntimeDefault:
		if !host.AppArmor || privileged {
			return "", nil
		}
		return host.AppArmorDefaultProfile, nil
	case ProfileLocalhost:
		if !host.AppArmor {
			return "", fmt.Errorf("apparmor profile %q: apparmor is not enabled on this host: %w", p.Localhost, errdefs.ErrInvalidArgument)
		}
		name := strings.TrimPrefix(p.Localhost, "localhost/")
		if name == "" {
			return "", fmt.Errorf("localhost apparmor profile without a name: %w", errdefs.ErrInvalidArgument)
		}
		return name, nil
	}
	return "", fmt.Errorf("apparmor profile type %d: %w", p.Type, errdefs.ErrInvalidArgument)
}

// seccompProfile builds the seccomp filter of an unprivileged container.
// s must carry the container's final capabilities: Docker-format profiles,
// the default one included, have rules that depend on them.
func seccompProfile(p SeccompProfile, s *specs.Spec) (*specs.LinuxSeccomp, error) {
	switch p.Type {
	case ProfileUnconfined:
		return nil, nil
	case ProfileRuntimeDefault:
		sc, err := seccomp.GetDefaultProfile(s)
		if err != nil {
			return nil, fmt.Errorf("default seccomp profile: %w", err)
		}
		return sc, nil
	case ProfileLocalhost:
		return localhostSeccomp(p.Localhost, s)
	}
	return nil, fmt.Errorf("seccomp profile type %d: %w", p.Type, errdefs.ErrInvalidArgument)
}

// localhostSeccomp parses and checks a Localhost profile. The parser
// accepts both OCI and Docker documents but not their meaning, so the
// actions and operators are checked here: runc would otherwise fail at
// start, far from the cause.
func localhostSeccomp(content []byte, s *specs.Spec) (*specs.LinuxSeccomp, error) {
	if len(bytes.TrimSpace(content)) == 0 {
		return nil, fmt.Errorf("localhost seccomp profile is empty: %w", errdefs.ErrInvalidArgument)
	}
	sc, err := seccomp.LoadProfile(string(content), s)
	if err != nil {
		return nil, fmt.Errorf("localhost seccomp profile: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if sc == nil || sc.DefaultAction == "" {
		return nil, fmt.Errorf("localhost seccomp profile has no defaultAction: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkSeccomp(sc); err != nil {
		return nil, fmt.Errorf("localhost seccomp profile: %w", err)
	}
	return sc, nil
}

var seccompActions = []specs.LinuxSeccompAction{
	specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap, specs.ActErrno,
	specs.ActTrace, specs.ActAllow, specs.ActLog, specs.ActNotify,
}

var seccompOperators = []specs.LinuxSeccompOperator{
	specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
	specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
}

func checkSeccomp(sc *specs.LinuxSeccomp) error {
	if !slices.Contains(seccompActions, sc.DefaultAction) {
		return fmt.Errorf("unknown defaultAction %q: %w", sc.DefaultAction, errdefs.ErrInvalidArgument)
	}
	for i, call := range sc.Syscalls {
		if len(call.Names) == 0 || slices.Contains(call.Names, "") {
			return fmt.Errorf("syscall rule %d: empty syscall name: %w", i, errdefs.ErrInvalidArgument)
		}
		if !slices.Contains(seccompActions, call.Action) {
			return fmt.Errorf("syscall rule %d (%s): unknown action %q: %w", i, call.Names[0], call.Action, errdefs.ErrInvalidArgument)
		}
		for _, a := range call.Args {
			if !slices.Contains(seccompOperators, a.Op) {
				return fmt.Errorf("syscall rule %d (%s): unknown operator %q: %w", i, call.Names[0], a.Op, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}
