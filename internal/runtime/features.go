package runtime

import "github.com/podbay/podbay/internal/ocifeatures"

// FeaturesRuntime is a runtime handler that can do more than the baseline:
// recursive read-only mounts, user namespaces. Status reports them per
// handler; a handler that does not implement it supports neither.
type FeaturesRuntime interface {
	Features() ocifeatures.Handler
}
