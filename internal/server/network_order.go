package server

import (
	"context"
	"fmt"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
)

// checkNetworkOrder refuses a pod that asks for network order "after" on
// a handler whose runtime reads the pod's interfaces when it boots
// (requires_network_before_start: gVisor's netstack copies them when the
// sandbox starts, a Kata VM mirrors them into the guest): started first,
// such a sandbox never gets the pod's interface or IP. The handler's
// allow_network_after runs the pod anyway, with a warning logged. A pod
// on the node's network has no pod network to order.
func checkNetworkOrder(ctx context.Context, handler string, rc config.Runtime, pod *podrequest.Pod) error {
	order := pod.NetworkOrder
	if !rc.RequiresNetworkBeforeStart || order != config.OrderAfter || pod.HostNetwork() {
		return nil
	}
	from := "the handler's network_order"
	if pod.NetworkOrderFromAnnotation() {
		from = "annotation " + annotations.NetworkOrder
	}
	if rc.AllowNetworkAfter {
		log.G(ctx).Warn("pod network set up after its sandbox starts on a handler that reads the pod's interfaces when it boots: the sandbox will not have the pod's interface or IP",
			"handler", handler, "order", order, "from", from)
		return nil
	}
	return fmt.Errorf("%w: runtime handler %q requires the pod network before its sandbox starts (requires_network_before_start: its runtime reads the pod's interfaces when it boots), but the pod asks for network order %q (%s); remove the annotation, or set allow_network_after on the handler to run such pods without their network",
		errdefs.ErrFailedPrecondition, handler, order, from)
}
