package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/server"
)

// tracingFlushTimeout bounds the flush of the spans still queued when the
// daemon stops: an unreachable collector must not hold up a shutdown.
const tracingFlushTimeout = 5 * time.Second

// newTracerProvider sets up the OTLP/gRPC exporter of cfg. It returns nil
// (the server then makes no spans at all) when tracing is off, and
// otherwise the provider and a closer that flushes the queued spans and
// stops the exporter, bounded by tracingFlushTimeout.
//
// The exporter connects lazily: a collector that is down does not keep
// podbayd from starting; its spans are dropped, with a warning.
func newTracerProvider(ctx context.Context, cfg config.Tracing) (trace.TracerProvider, func() error, error) {
	if !cfg.Enabled() {
		return nil, nil, nil
	}
	// Without insecure, TLS with the system's roots, or the CA that
	// OTEL_EXPORTER_OTLP_CERTIFICATE names; the exporter also reads
	// OTEL_EXPORTER_OTLP_HEADERS.
	insecure := cfg.Insecure != nil && *cfg.Insecure
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint)}
	if insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", cfg.Endpoint, err)
	}
	res, err := resource.New(ctx,
		resource.WithHost(),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(server.Version)),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRate))),
	)
	// The SDK reports export failures (a collector that is down) here;
	// by default it would print them to stderr outside the daemon's log.
	logger := log.G(ctx)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing", "err", err)
	}))
	logger.Info("tracing on", "endpoint", cfg.Endpoint, "insecure", insecure, "sampling_rate", cfg.SamplingRate, "service_name", cfg.ServiceName)
	closer := func() error {
		fctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(fctx); err != nil {
			// The daemon's closers' errors are not returned: say it here.
			logger.Warn("tracing: spans not flushed", "err", err)
			return err
		}
		return nil
	}
	return tp, closer, nil
}
