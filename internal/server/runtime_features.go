package server

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/live"
	"github.com/podbay/podbay/internal/ocifeatures"
	"github.com/podbay/podbay/internal/podrequest"
)

// handlerFeatures is the CRI form of a handler's features.
func handlerFeatures(f ocifeatures.Handler) *runtimeapi.RuntimeHandlerFeatures {
	return &runtimeapi.RuntimeHandlerFeatures{
		RecursiveReadOnlyMounts: f.RecursiveReadOnlyMounts,
		UserNamespaces:          f.UserNamespaces,
	}
}

// checkRecursiveReadOnly refuses a recursive read-only mount on a handler
// that cannot make one. The mount's own rules (read-only, private
// propagation) are specgen's.
func checkRecursiveReadOnly(cur *live.Config, handler string, m podrequest.Mount) error {
	if !m.RecursiveReadOnly || cur.Features(handler).RecursiveReadOnlyMounts {
		return nil
	}
	return fmt.Errorf("mount %s:%s: recursive read-only mounts are not supported by runtime handler %q (it needs a runtime that lists the \"rro\" mount option and kernel 5.12 or newer): %w",
		m.HostPath, m.ContainerPath, handler, errdefs.ErrInvalidArgument)
}
