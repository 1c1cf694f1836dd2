package server

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/apparmor"
	"github.com/podbay/podbay/internal/errdefs"
)

// checkAppArmor makes sure the kernel has the profile spec names: podbay's
// default is loaded on first use (and again after an AppArmor reload has
// dropped it); a localhost profile must be loaded already, and a create
// naming one that is not fails here, with its name, rather than in the
// runtime's init.
func (s *Server) checkAppArmor(ctx context.Context, spec *specs.Spec) error {
	if s.apparmor == nil || spec.Process == nil || spec.Process.ApparmorProfile == "" {
		return nil
	}
	name := spec.Process.ApparmorProfile
	if name == apparmor.DefaultProfile {
		if err := s.apparmor.EnsureDefault(ctx); err != nil {
			return fmt.Errorf("apparmor runtime default: %v: %w", err, errdefs.ErrFailedPrecondition)
		}
		return nil
	}
	ok, err := apparmor.Loaded(name)
	if err != nil {
		return fmt.Errorf("apparmor profiles: %w", err)
	}
	if !ok {
		return fmt.Errorf("apparmor profile %q is not loaded on this node: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}
