package image

import (
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
)

// copyEvents returns the channel copy.Image is to report to: each of its
// events updates p's layers and then goes on to events. stop closes it,
// once copy.Image returned, and waits for the last event to be passed on.
// copy.Image reports each blob's bytes as it downloads it (every
// progressInterval) and its end; it unpacks the layers when it commits
// the image, which it does not report: a downloaded layer is staged
// until the pull ends.
func (p *trackedPull) copyEvents(events chan types.ProgressProperties) (in chan types.ProgressProperties, stop func()) {
	if p == nil {
		return events, func() {}
	}
	p.copyEngine()
	ch := make(chan types.ProgressProperties)
	done := make(chan struct{})
	go func() {
		defer close(done)
		layers := map[string]*layerTrack{}
		for ev := range ch {
			p.copyEvent(layers, ev)
			events <- ev
		}
	}()
	return ch, func() {
		close(ch)
		<-done
	}
}

// copyEvent applies one of copy.Image's events to the layer it is about;
// layers holds them by digest. The config blob is not a layer.
func (p *trackedPull) copyEvent(layers map[string]*layerTrack, ev types.ProgressProperties) {
	switch ev.Artifact.MediaType {
	case imgspecv1.MediaTypeImageConfig, manifest.DockerV2Schema2ConfigMediaType:
		return
	}
	key := ev.Artifact.Digest.String()
	l := layers[key]
	if l == nil {
		// copy.Image stops an image of more layers (tooDeep); past that
		// many, nothing more is tracked.
		if len(layers) > maxImageLayers {
			return
		}
		l = p.newLayer(key, ev.Artifact.MediaType, ev.Artifact.Size)
		layers[key] = l
		p.mu.Lock()
		p.layers = append(p.layers, l)
		p.mu.Unlock()
	}
	switch ev.Event {
	case types.ProgressEventNewArtifact:
		l.begin()
	case types.ProgressEventRead:
		l.fetchedTo(int(ev.OffsetUpdate), int64(ev.Offset))
	case types.ProgressEventDone:
		l.fetchedTo(int(ev.OffsetUpdate), int64(ev.Offset))
		l.staged(nil)
	case types.ProgressEventSkipped:
		l.state.Store(int32(stateExists))
	}
}
