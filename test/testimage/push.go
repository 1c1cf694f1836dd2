package testimage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// pusher writes images straight into a registry handler, in process,
// through the distribution API: monolithic blob uploads, then manifests.
// It bypasses the network, auth and faults. (go-containerregistry's
// pkg/v1/remote would do the same over a transport, but it needs modules
// podbay's go.mod does not list.)
type pusher struct {
	h    http.Handler
	repo string // "test/busybox", without the registry address
}

// serve sends one request to the handler and returns the response.
func (p pusher) serve(ctx context.Context, method, target string, body []byte, contentType string) *http.Response {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req := httptest.NewRequestWithContext(ctx, method, target, r)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, req)
	return rec.Result()
}

// check turns a response other than want into an error.
func check(resp *http.Response, want int, what string) error {
	if resp.StatusCode == want {
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return fmt.Errorf("%s: registry answered %s: %s", what, resp.Status, bytes.TrimSpace(msg))
}

// blob uploads a blob unless the registry has it.
func (p pusher) blob(ctx context.Context, h v1.Hash, open func() (io.ReadCloser, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	resp := p.serve(ctx, http.MethodHead, "/v2/"+p.repo+"/blobs/"+h.String(), nil, "")
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	rc, err := open()
	if err != nil {
		return fmt.Errorf("blob %s: %w", h, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("blob %s: %w", h, err)
	}
	resp = p.serve(ctx, http.MethodPost, "/v2/"+p.repo+"/blobs/uploads/?digest="+h.String(), data, "application/octet-stream")
	return check(resp, http.StatusCreated, "upload blob "+h.String())
}

// manifest stores raw under ref, a tag or a digest.
func (p pusher) manifest(ctx context.Context, ref string, mt types.MediaType, raw []byte) error {
	resp := p.serve(ctx, http.MethodPut, "/v2/"+p.repo+"/manifests/"+ref, raw, string(mt))
	return check(resp, http.StatusCreated, "put manifest "+ref)
}

// image uploads img's layers and config, then its manifest under ref.
func (p pusher) image(ctx context.Context, img v1.Image, ref string) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fmt.Errorf("layer digest: %w", err)
		}
		if err := p.blob(ctx, d, l.Compressed); err != nil {
			return err
		}
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("config digest: %w", err)
	}
	if err := p.blob(ctx, cfgName, func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(cfg)), nil
	}); err != nil {
		return err
	}
	return p.rawManifest(ctx, img, ref)
}

// index uploads every image of idx by digest, then idx under ref. The
// registry refuses an index whose images it does not have.
func (p pusher) index(ctx context.Context, idx v1.ImageIndex, ref string) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("index manifest: %w", err)
	}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("index image %s: %w", desc.Digest, err)
		}
		if err := p.image(ctx, img, desc.Digest.String()); err != nil {
			return err
		}
	}
	return p.rawManifest(ctx, idx, ref)
}

// manifestSource is an image or an index.
type manifestSource interface {
	RawManifest() ([]byte, error)
	MediaType() (types.MediaType, error)
}

func (p pusher) rawManifest(ctx context.Context, m manifestSource, ref string) error {
	raw, err := m.RawManifest()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	mt, err := m.MediaType()
	if err != nil {
		return fmt.Errorf("manifest media type: %w", err)
	}
	return p.manifest(ctx, ref, mt, raw)
}

// push stores a under each tag, or by digest only when there are none.
func (p pusher) push(ctx context.Context, a Artifact, digest v1.Hash, tags []string) error {
	refs := tags
	if len(refs) == 0 {
		refs = []string{digest.String()}
	}
	var src manifestSource = a.Image
	if a.Index != nil {
		src = a.Index
		if err := p.index(ctx, a.Index, refs[0]); err != nil {
			return err
		}
	} else if err := p.image(ctx, a.Image, refs[0]); err != nil {
		return err
	}
	for _, ref := range refs[1:] {
		if err := p.rawManifest(ctx, src, ref); err != nil {
			return err
		}
	}
	return nil
}
