package nri

import (
	"context"
	"fmt"
	"log/slog"

	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/podbay/podbay/internal/log"
)

// logger sends NRI's own log lines (plugins starting, registering,
// failing) to podbay's log, marked component=nri.
type logger struct{}

func (logger) emit(ctx context.Context, level slog.Level, format string, args []any) {
	l := log.G(ctx)
	if l.Enabled(ctx, level) {
		l.Log(ctx, level, fmt.Sprintf(format, args...), "component", "nri")
	}
}

func (l logger) Debugf(ctx context.Context, format string, args ...any) {
	l.emit(ctx, slog.LevelDebug, format, args)
}

func (l logger) Infof(ctx context.Context, format string, args ...any) {
	l.emit(ctx, slog.LevelInfo, format, args)
}

func (l logger) Warnf(ctx context.Context, format string, args ...any) {
	l.emit(ctx, slog.LevelWarn, format, args)
}

func (l logger) Errorf(ctx context.Context, format string, args ...any) {
	// podbayd is built with nri_no_wasm: NRI reports the missing WASM
	// support as an error at every start; it is the build's choice (a
	// WASM plugin found is still refused with an error).
	if wasmDisabled(args) {
		l.emit(ctx, slog.LevelInfo, "WASM plugins are not compiled in (build tag nri_no_wasm)", nil)
		return
	}
	l.emit(ctx, slog.LevelError, format, args)
}

var _ nrilog.Logger = logger{}
