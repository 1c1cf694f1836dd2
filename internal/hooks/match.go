package hooks

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Container is what a hook's conditions are matched against.
type Container struct {
	// Annotations are the container's and its pod's CRI annotations.
	Annotations map[string]string
	// HasBindMounts: the client asked host paths to be mounted.
	HasBindMounts bool
	// Spec is the container's OCI spec; commands match its
	// process.args[0].
	Spec *specs.Spec
}

// Match reports whether the hook applies to c: every condition set
// matches (for a 0.1.0 file, any one does).
func (h *Config) Match(c Container) bool {
	var results []bool
	if h.always != nil {
		results = append(results, *h.always)
	}
	if h.hasBindMounts != nil {
		results = append(results, *h.hasBindMounts && c.HasBindMounts)
	}
	for _, cond := range h.annotations {
		results = append(results, matchAnnotation(cond, c.Annotations))
	}
	if len(h.commands) > 0 {
		results = append(results, h.matchCommand(c.Spec))
	}
	if len(results) == 0 {
		return false
	}
	for _, r := range results {
		if r && h.anyOf {
			return true
		}
		if !r && !h.anyOf {
			return false
		}
	}
	return !h.anyOf
}

// matchAnnotation: some annotation's key matches the key pattern and its
// value the value pattern.
func matchAnnotation(cond annotationCond, annotations map[string]string) bool {
	for k, v := range annotations {
		if cond.key.MatchString(k) && cond.value.MatchString(v) {
			return true
		}
	}
	return false
}

func (h *Config) matchCommand(spec *specs.Spec) bool {
	if spec == nil || spec.Process == nil || len(spec.Process.Args) == 0 {
		return false
	}
	for _, re := range h.commands {
		if re.MatchString(spec.Process.Args[0]) {
			return true
		}
	}
	return false
}

// inject adds the hook to spec for each of its stages. "prestart" is
// injected as createRuntime, as containers/common does: the runtime spec
// deprecates prestart and runs createRuntime hooks at the same point, in
// the runtime's namespace.
func (h *Config) inject(spec *specs.Spec) {
	if spec.Hooks == nil {
		spec.Hooks = &specs.Hooks{}
	}
	hs := spec.Hooks
	for _, stage := range h.Stages {
		hook := cloneHook(h.Hook)
		switch stage {
		case "prestart", "createRuntime":
			hs.CreateRuntime = append(hs.CreateRuntime, hook)
		case "createContainer":
			hs.CreateContainer = append(hs.CreateContainer, hook)
		case "startContainer":
			hs.StartContainer = append(hs.StartContainer, hook)
		case "poststart":
			hs.Poststart = append(hs.Poststart, hook)
		case "poststop":
			hs.Poststop = append(hs.Poststop, hook)
		}
	}
}

// cloneHook copies h so that no two specs share its slices.
func cloneHook(h specs.Hook) specs.Hook {
	h.Args = append([]string(nil), h.Args...)
	h.Env = append([]string(nil), h.Env...)
	if h.Timeout != nil {
		t := *h.Timeout
		h.Timeout = &t
	}
	return h
}
