package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status reports whether the runtime and the pod network are ready. The
// network is not ready while no CNI configuration loads; the kubelet then
// keeps the node NotReady instead of starting pods that cannot get an IP.
func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	networkCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := s.network.Status(ctx); err != nil {
		networkCond.Status = false
		networkCond.Reason = "NetworkPluginNotReady"
		networkCond.Message = err.Error()
	}
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeCond, networkCond}},
	}
	// A reload publishes its configuration before its result: read in
	// this order, the result shown is never newer than the configuration.
	last := s.LastReload()
	cur := s.current()
	for _, name := range cur.Config().RuntimeNames() {
		if _, ok := cur.Runtimes()[name]; !ok {
			continue
		}
		h := &runtimeapi.RuntimeHandler{Name: name, Features: handlerFeatures(cur.Features(name))}
		resp.RuntimeHandlers = append(resp.RuntimeHandlers, h)
		if name == cur.Config().DefaultRuntime {
			// The kubelet reads the default handler under the empty name.
			resp.RuntimeHandlers = append(resp.RuntimeHandlers, &runtimeapi.RuntimeHandler{Name: "", Features: h.Features})
		}
	}
	// Supplemental groups follow the pod's policy (Merge: the image's
	// /etc/group memberships too; Strict: only the ones asked for), and
	// ContainerStatus reports the resulting identity.
	// Bind mounts take the mount_options of specgen.MountOptionsAllowed.
	// A user-namespaced pod may use the host's network (on a handler that
	// supports user namespaces): its /sys is the host's, bound read-only.
	resp.Features = &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, MountOptions: true, UserNamespacesHostNetwork: true}
	if req.GetVerbose() {
		info, err := s.statusInfo(ctx, cur, last)
		if err != nil {
			return nil, err
		}
		resp.Info = info
	}
	return resp, nil
}
