package podsandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
)

// pausePullTimeout bounds a pull of the pause image, so a node that cannot
// reach its registry falls back to the built-in pause image in time.
const pausePullTimeout = time.Minute

// PauseStore is the image store as the pause image needs it.
type PauseStore interface {
	Status(ctx context.Context, ref string) (*image.Image, error)
	Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error)
	ImportFromFiles(ctx context.Context, ref string, files []image.File, cfg image.ImageConfig) (*image.Image, error)
}

// PauseImages keep the pause image of the process kinds at hand. One at a
// time is looked up, pulled or made.
type PauseImages struct {
	store PauseStore
	// binary is podbay's own static pause program ("" if none), from
	// which the default pause image is made on a node that cannot pull
	// it.
	binary string
	mu     sync.Mutex
}

// NewPauseImages are the pause images of store, made from binary when
// the default one cannot be pulled.
func NewPauseImages(store PauseStore, binary string) *PauseImages {
	return &PauseImages{store: store, binary: binary}
}

// Get returns the pause image ref, pulling it when absent. When the
// default pause image can be neither found nor pulled (an offline node),
// it is made from podbay's own static pause program, so pods still run.
func (p *PauseImages) Get(ctx context.Context, ref string) (*image.Image, error) {
	ctx = log.With(ctx, "image", ref)
	p.mu.Lock()
	defer p.mu.Unlock()
	img, err := p.store.Status(ctx, ref)
	if err == nil {
		return img, nil
	}
	if !errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("look up pause image %s: %w", ref, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pausePullTimeout)
	img, pullErr := p.store.Pull(pctx, ref, nil)
	cancel()
	if pullErr == nil {
		return img, nil
	}
	if ref != config.DefaultPauseImage || p.binary == "" {
		return nil, fmt.Errorf("pull pause image %s: %w", ref, pullErr)
	}
	log.G(ctx).Warn("pause image cannot be pulled; making it from the built-in pause program", "err", pullErr)
	img, err = p.store.ImportFromFiles(ctx, ref,
		[]image.File{{Path: "/pause", Source: p.binary, Mode: 0o755}},
		image.ImageConfig{Entrypoint: []string{"/pause"}})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("make pause image %s: %w", ref, err), pullErr)
	}
	return img, nil
}
