// Package log carries a *slog.Logger in a context, so that the fields the
// gRPC interceptor attaches once (RPC name, object IDs) follow a request into
// every package and into its rollback.
package log

import (
	"context"
	"log/slog"
)

type loggerKey struct{}

// G returns the logger stored in ctx, or slog.Default().
func G(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// WithLogger returns a context that carries l.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// With returns a context whose logger has args attached.
func With(ctx context.Context, args ...any) context.Context {
	return WithLogger(ctx, G(ctx).With(args...))
}
