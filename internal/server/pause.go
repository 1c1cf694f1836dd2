package server

import (
	"context"

	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
)

// pauseImage returns the pause image the configuration in effect names
// (a reload may change it: new pods use the new one), pulled or made when
// absent (podsandbox.PauseImages).
func (s *Server) pauseImage(ctx context.Context) (*image.Image, error) {
	return s.pause.Get(ctx, s.current().Config().PauseImage)
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
