package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"go.podman.io/image/v5/signature"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// policySource reads the signature policy for each pull, so that an edited
// policy.json, or a new path (SetRegistries), applies without a restart.
type policySource struct {
	mu     sync.Mutex
	path   string // empty: the system default; guarded by mu
	warned bool   // the missing file was reported; guarded by mu
}

func (p *policySource) file() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.path != "" {
		return p.path
	}
	return defaultPolicyPath
}

// setPath makes later pulls read path.
func (p *policySource) setPath(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if path != p.path {
		p.path, p.warned = path, false
	}
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
	file := p.file()
	policy, err := signature.NewPolicyFromFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		p.mu.Lock()
		warn := !p.warned
		p.warned = true
		p.mu.Unlock()
		if warn {
			log.G(ctx).Warn("no signature policy; accepting any image", "policy", file)
		}
		return acceptAnything(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("signature policy %s: %w: %w", file, err, errdefs.ErrFailedPrecondition)
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
