package server

import (
	"context"
	"time"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/sandbox"
)

// releaseMasqueradeIfIdle removes podbay's masquerade rules on a clean
// stop when no sandbox record holds an attached network: pods that keep
// running across the stop (or whose DEL is still owed) keep their egress,
// and the next start installs the rules again when it loads the config.
func (s *Server) releaseMasqueradeIfIdle(ctx context.Context) {
	// Bounded on its own: the shutdown's deadline may be spent already.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	recs, err := loadRecords[sandbox.Record](ctx, s.db, sandboxBucket, sandbox.RecordVersion,
		func(r sandbox.Record) string { return r.ID })
	if err != nil {
		log.G(ctx).Warn("keeping the pod network's masquerade: cannot read the sandbox records", "err", err)
		return
	}
	for _, r := range recs {
		if r.Network == sandbox.NetworkAttached {
			return
		}
	}
	if err := s.network.ReleaseMasquerade(ctx); err != nil {
		log.G(ctx).Warn("remove the pod network's masquerade", "err", err)
	}
}
