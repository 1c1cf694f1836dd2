package nri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/adaptation"

	"github.com/podbay/podbay/internal/log"
)

// TestWasmDisabledNotice: NRI's start-up notice that WASM support was left
// out at build time is logged at INFO, not ERROR; NRI's other errors,
// a refused WASM plugin's among them, stay errors.
func TestWasmDisabledNotice(t *testing.T) {
	var buf bytes.Buffer
	ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)))
	var l logger

	l.Errorf(ctx, "failed to initialize WASM support: %v", adaptation.ErrWasmDisabled)
	if out := buf.String(); !strings.Contains(out, "level=INFO") || !strings.Contains(out, "nri_no_wasm") {
		t.Fatalf("WASM notice logged as %q, want an INFO line naming nri_no_wasm", out)
	}
	buf.Reset()

	wrapped := fmt.Errorf("wasm: %w", adaptation.ErrWasmDisabled)
	if !wasmDisabled([]any{"x", wrapped}) {
		t.Error("a wrapped ErrWasmDisabled is not recognized")
	}
	l.Errorf(ctx, "can't load WASM plugin %s: no WASM support", "/opt/nri/plugins/10-x")
	l.Errorf(ctx, "failed: %v", errors.New("boom"))
	if out := buf.String(); strings.Count(out, "level=ERROR") != 2 || strings.Contains(out, "level=INFO") {
		t.Fatalf("other NRI errors logged as %q, want two ERROR lines", out)
	}
}
