package server

import (
	"path"
	"strings"
)

// passThrough returns the annotations whose keys match one of the
// handler's patterns (containerd's pod_annotations and
// container_annotations): what the runtime is allowed to see of what the
// pod asked for. Patterns are path.Match globs, except that "*" also
// matches "/" (annotation keys are "prefix/name"), so "*" is every key.
func passThrough(patterns []string, annotations map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range annotations {
		key := strings.ReplaceAll(k, "/", "\x00")
		for _, p := range patterns {
			if ok, _ := path.Match(strings.ReplaceAll(p, "/", "\x00"), key); ok {
				out[k] = v
				break
			}
		}
	}
	return out
}

// containerAnnotations are the annotations of a container's spec: the
// pod's and then the container's own that the handler passes through.
func (s *Server) containerAnnotations(handler string, pod, ctr map[string]string) map[string]string {
	rc := s.current().cfg.Runtimes[handler]
	out := passThrough(rc.PodAnnotations, pod)
	for k, v := range passThrough(rc.ContainerAnnotations, ctr) {
		out[k] = v
	}
	return out
}
