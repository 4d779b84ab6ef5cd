package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The exporters [NewProvider] knows, for a flag's value.
const (
	// ExporterNone makes no provider: tracing off.
	ExporterNone = "none"
	// ExporterStdout writes each span as JSON to ProviderConfig.Writer.
	ExporterStdout = "stdout"
	// ExporterOTLP sends spans over OTLP/HTTP to the collector the
	// standard OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT)
	// variables name; default http://localhost:4318.
	ExporterOTLP = "otlp"
)

// ErrUnknownExporter is returned for an exporter name NewProvider does
// not know; nothing was started.
var ErrUnknownExporter = errors.New("tracing: unknown exporter (want none, stdout or otlp)")

// ProviderConfig configures [NewProvider]. The zero value makes no
// provider.
type ProviderConfig struct {
	// Exporter is ExporterNone (or ""), ExporterStdout or ExporterOTLP.
	Exporter string
	// ServiceName is the service.name resource attribute. Default
	// "cloudbus".
	ServiceName string
	// Node, optional, is the node's UUID, the service.instance.id
	// resource attribute.
	Node string
	// Writer receives ExporterStdout's spans. Default os.Stdout.
	Writer io.Writer
}

// NewProvider returns an SDK tracer provider exporting in batches to
// cfg.Exporter, or nil for ExporterNone. Pass it to [New]; its Shutdown
// flushes the spans not yet exported, and the caller calls it when the
// program ends.
func NewProvider(ctx context.Context, cfg ProviderConfig) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Exporter {
	case "", ExporterNone:
		return nil, nil
	case ExporterStdout:
		w := cfg.Writer
		if w == nil {
			w = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	case ExporterOTLP:
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownExporter, cfg.Exporter)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: start the %s exporter: %w", cfg.Exporter, err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "cloudbus"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if cfg.Node != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.Node))
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	), nil
}
