package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
)

// pausePullTimeout bounds a pull of the pause image, so a node that cannot
// reach its registry falls back to the built-in pause image in time.
const pausePullTimeout = time.Minute

// pauseImage returns the pause image, pulling it when absent. When the
// default pause image can be neither found nor pulled (an offline node),
// podbay makes it from its own static pause program, so pods still run.
func (s *Server) pauseImage(ctx context.Context) (*image.Image, error) {
	// A reload may change the pause image: new pods use the new one.
	ref := s.current().Config().PauseImage
	ctx = log.With(ctx, "image", ref)
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	img, err := s.images.Status(ctx, ref)
	if err == nil {
		return img, nil
	}
	if !errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("look up pause image %s: %w", ref, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pausePullTimeout)
	img, pullErr := s.images.Pull(pctx, ref, nil)
	cancel()
	if pullErr == nil {
		return img, nil
	}
	if ref != config.DefaultPauseImage || s.pauseBinary == "" {
		return nil, fmt.Errorf("pull pause image %s: %w", ref, pullErr)
	}
	log.G(ctx).Warn("pause image cannot be pulled; making it from the built-in pause program", "err", pullErr)
	img, err = s.images.ImportFromFiles(ctx, ref,
		[]image.File{{Path: "/pause", Source: s.pauseBinary, Mode: 0o755}},
		image.ImageConfig{Entrypoint: []string{"/pause"}})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("make pause image %s: %w", ref, err), pullErr)
	}
	return img, nil
}

// WarmPauseImage makes sure the pause image is present, so the first pod
// does not wait for it. Failures are logged; RunPodSandbox tries again.
func (s *Server) WarmPauseImage() {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx := s.ctx
		if img, err := s.pauseImage(ctx); err != nil {
			if s.ctx.Err() == nil {
				log.G(ctx).Error("prepare pause image", "err", err)
			}
		} else {
			log.G(ctx).Info("pause image ready", "image", s.current().Config().PauseImage, "id", img.ID)
		}
	}()
}
