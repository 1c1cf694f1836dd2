package server

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/ocifeatures"
)

// features is what handler supports beyond the baseline. An oci handler
// found it out when it was set up (`<runtime> features` and the kernel's
// version); a vm handler reports nothing: containerd 2.x asks its shim
// (`shim -info`), which containerd 1.6's containerd-shim-runc-v2 and
// Kata's shim do not answer, and inside a VM the guest's kernel and
// agent, not the host's runtime, would make the mounts.
func (l *liveConfig) features(handler string) ocifeatures.Handler {
	return l.capabilities(handler).HandlerFeatures()
}

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
func checkRecursiveReadOnly(cur *liveConfig, handler string, m *runtimeapi.Mount) error {
	if !m.GetRecursiveReadOnly() || cur.features(handler).RecursiveReadOnlyMounts {
		return nil
	}
	return fmt.Errorf("mount %s:%s: recursive read-only mounts are not supported by runtime handler %q (it needs a runtime that lists the \"rro\" mount option and kernel 5.12 or newer): %w",
		m.GetHostPath(), m.GetContainerPath(), handler, errdefs.ErrInvalidArgument)
}
