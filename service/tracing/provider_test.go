package tracing_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/service/tracing"
)

func TestNewProvider(t *testing.T) {
	for _, name := range []string{"", tracing.ExporterNone} {
		tp, err := tracing.NewProvider(t.Context(), tracing.ProviderConfig{Exporter: name})
		require.NoError(t, err)
		assert.Nil(t, tp, "%q: tracing off", name)
	}
	_, err := tracing.NewProvider(t.Context(), tracing.ProviderConfig{Exporter: "jaeger"})
	require.ErrorIs(t, err, tracing.ErrUnknownExporter)

	var out bytes.Buffer
	tp, err := tracing.NewProvider(t.Context(), tracing.ProviderConfig{Exporter: tracing.ExporterStdout, Writer: &out, ServiceName: "unit", Node: "n1"})
	require.NoError(t, err)
	ctx, end := tracing.New(tp).Start(t.Context(), bus.SpanInfo{Op: bus.OpSend, Type: "example.v1.Greet", ServiceID: "greeter.n2", Node: "n1"})
	tparent, _ := bus.TraceContextFrom(ctx)
	assert.Len(t, tparent, 55, "the span's trace context, for the message")
	end(nil)
	require.NoError(t, tp.Shutdown(context.Background()))
	assert.Contains(t, out.String(), `"Name":"send example.v1.Greet"`)
	assert.Contains(t, out.String(), `"unit"`)

	tp, err = tracing.NewProvider(t.Context(), tracing.ProviderConfig{Exporter: tracing.ExporterOTLP})
	require.NoError(t, err, "the OTLP exporter connects only when it exports")
	require.NoError(t, tp.Shutdown(context.Background()))
}

func TestNilProviderMakesNoSpans(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := bus.WithTraceContext(t.Context(), parent, "")
	ctx, end := tracing.New(nil).Start(ctx, bus.SpanInfo{Op: bus.OpHandle, Type: "example.v1.Greet"})
	defer end(nil)
	got, _ := bus.TraceContextFrom(ctx)
	assert.Equal(t, parent, got, "the received trace context goes on")
}
