package server

import "github.com/podbay/podbay/internal/annotations"

// containerAnnotations are the annotations of a container's spec: the
// pod's and then the container's own that the handler's allow-lists pass
// (annotations.Allowed). podbay's own keys are written over them by
// specgen.
func (s *Server) containerAnnotations(handler string, pod, ctr map[string]string) map[string]string {
	rc := s.current().Config().Runtimes[handler]
	out := annotations.Allowed(rc.PodAnnotations, pod)
	for k, v := range annotations.Allowed(rc.ContainerAnnotations, ctr) {
		out[k] = v
	}
	return out
}
