package oci

import "github.com/podbay/podbay/internal/ocifeatures"

// Features returns what the handler supports beyond the baseline
// (Config.Features, found by the daemon when it set the handler up).
func (r *Runtime) Features() ocifeatures.Handler { return r.cfg.Features }
