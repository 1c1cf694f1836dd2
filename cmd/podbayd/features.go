package main

import (
	"context"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/ocifeatures"
)

// detectFeatures asks the OCI runtime at path (`<path> features`) and the
// kernel what handler name supports beyond the baseline, once, when the
// handler is set up. A runtime that cannot tell (crun 1.8 has no features
// command) supports nothing more.
func detectFeatures(name, path string) ocifeatures.Handler {
	ctx := context.Background()
	f, err := ocifeatures.Detect(ctx, path)
	if err != nil {
		log.G(ctx).Info("runtime handler reports no optional features", "handler", name, "reason", err)
		f = ocifeatures.Handler{}
	} else {
		log.G(ctx).Info("runtime handler features", "handler", name,
			"recursive_read_only_mounts", f.RecursiveReadOnlyMounts, "user_namespaces", f.UserNamespaces)
	}
	if v, err := ocifeatures.QuerySpecVersion(ctx, path); err != nil {
		log.G(ctx).Info("runtime handler tells no runtime-spec version; bundles declare podbay's", "handler", name, "reason", err)
	} else {
		f.SpecVersion = v
	}
	return f
}

// shimRuntimeSpecVersion is the runtime-spec version of the OCI runtime a
// runc shim of vm handler name runs: bin, or runc from the PATH (the
// shim's default). "" when it does not tell.
func shimRuntimeSpecVersion(name, bin string) string {
	ctx := context.Background()
	if bin == "" {
		p, err := config.LookPath("runc")
		if err != nil {
			return ""
		}
		bin = p
	}
	v, err := ocifeatures.QuerySpecVersion(ctx, bin)
	if err != nil {
		log.G(ctx).Info("the shim's runtime tells no runtime-spec version; bundles declare podbay's", "handler", name, "runtime", bin, "reason", err)
		return ""
	}
	return v
}
