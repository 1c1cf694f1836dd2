package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"go.podman.io/image/v5/signature"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
)

// policySource reads the signature policy for each pull, so that an edited
// policy.json, or a new path (SetRegistries), applies without a restart.
//
// With a policy directory (CRI-O's signature_policy_dir), a pull for a pod
// of namespace N reads <dir>/N.json when that file exists, and the node's
// policy otherwise.
type policySource struct {
	mu     sync.Mutex
	path   string // empty: the system default; guarded by mu
	dir    string // per-namespace policies; empty: none; guarded by mu
	warned bool   // the missing file was reported; guarded by mu
}

// namespaceName is a Kubernetes namespace name (a DNS-1123 label).
var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// fileFor returns the policy file a pull for a pod of namespace reads
// ("" for none: the node's). A namespace that is no DNS-1123 label is
// ErrInvalidArgument: it names a file.
func (p *policySource) fileFor(namespace string) (string, error) {
	p.mu.Lock()
	dir := p.dir
	p.mu.Unlock()
	if namespace == "" || dir == "" {
		return p.file(), nil
	}
	if len(namespace) > 63 || !namespaceName.MatchString(namespace) {
		return "", fmt.Errorf("namespace %q is not a DNS-1123 label: %w", namespace, errdefs.ErrInvalidArgument)
	}
	file := filepath.Join(dir, namespace+".json")
	if _, err := os.Stat(file); err == nil {
		return file, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("signature policy %s: %w: %w", file, err, errdefs.ErrFailedPrecondition)
	}
	return p.file(), nil
}

// setDir makes later pulls read per-namespace policies from dir ("":
// none).
func (p *policySource) setDir(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dir = dir
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
	return p.loadFile(ctx, p.file())
}

// loadFile is load of one file; only the node's missing file is warned
// of (a namespace's is used only when it exists).
func (p *policySource) loadFile(ctx context.Context, file string) (*signature.Policy, error) {
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

// context returns a policy context for file; the caller must Destroy it.
func (p *policySource) context(ctx context.Context, file string) (*signature.PolicyContext, error) {
	policy, err := p.loadFile(ctx, file)
	if err != nil {
		return nil, err
	}
	return signature.NewPolicyContext(policy)
}

func acceptAnything() *signature.Policy {
	return &signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}}
}
