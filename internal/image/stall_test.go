package image

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestStallWatchdog(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		events []types.ProgressEvent // one every timeout/2
		fires  bool
	}{
		{"nothing arrives", nil, true},
		{"steady progress, then a stall mid-blob", []types.ProgressEvent{
			types.ProgressEventNewArtifact, types.ProgressEventRead, types.ProgressEventRead}, true},
		{"all blobs done: committing is not a stall", []types.ProgressEvent{
			types.ProgressEventNewArtifact, types.ProgressEventRead, types.ProgressEventDone}, false},
		{"a later blob re-arms it", []types.ProgressEvent{
			types.ProgressEventNewArtifact, types.ProgressEventDone, types.ProgressEventNewArtifact}, true},
		{"one of two blobs done", []types.ProgressEvent{
			types.ProgressEventNewArtifact, types.ProgressEventNewArtifact, types.ProgressEventDone}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, w, stop := withStallWatchdog(context.Background(), "example.com/x:1", timeout)
			defer stop()
			for _, ev := range tc.events {
				time.Sleep(timeout / 2)
				if ctx.Err() != nil {
					t.Fatalf("fired while progress arrived every %v", timeout/2)
				}
				w.observe(ev)
			}
			time.Sleep(3 * timeout)
			var stall *ProgressTimeoutError
			fired := errors.As(context.Cause(ctx), &stall)
			if fired != tc.fires {
				t.Fatalf("fired %v, want %v (cause %v)", fired, tc.fires, context.Cause(ctx))
			}
			if fired && (!errors.Is(stall, errdefs.ErrUnavailable) || stall.Ref != "example.com/x:1") {
				t.Errorf("cause %#v: want a classified error naming the reference", stall)
			}
		})
	}
}
