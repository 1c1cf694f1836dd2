package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/containers/image/v5/signature"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// policySource reads the signature policy for each pull, so that an edited
// policy.json applies without a restart.
type policySource struct {
	path string // empty: the system default
	warn sync.Once
}

func (p *policySource) file() string {
	if p.path != "" {
		return p.path
	}
	return defaultPolicyPath
}

// warnIfMissing logs, once per store, that images are not verified.
func (p *policySource) warnIfMissing(ctx context.Context) {
	if _, err := p.load(ctx); err != nil {
		log.G(ctx).Warn("signature policy unusable; pulls will fail until it is fixed", "policy", p.file(), "err", err)
	}
}

// load returns the policy; a missing file means accept anything (a fresh
// Debian has no /etc/containers/policy.json), an unreadable or invalid one
// is an error rather than a silent fallback.
func (p *policySource) load(ctx context.Context) (*signature.Policy, error) {
	policy, err := signature.NewPolicyFromFile(p.file())
	if errors.Is(err, fs.ErrNotExist) {
		p.warn.Do(func() {
			log.G(ctx).Warn("no signature policy; accepting any image", "policy", p.file())
		})
		return acceptAnything(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("signature policy %s: %w: %w", p.file(), err, errdefs.ErrFailedPrecondition)
	}
	return policy, nil
}

// context returns a policy context; the caller must Destroy it.
func (p *policySource) context(ctx context.Context) (*signature.PolicyContext, error) {
	policy, err := p.load(ctx)
	if err != nil {
		return nil, err
	}
	return signature.NewPolicyContext(policy)
}

func acceptAnything() *signature.Policy {
	return &signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}}
}
