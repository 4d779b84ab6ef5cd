package tracing_test

import (
	"context"
	"log"

	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/tracing"
)

// A node that exports its spans over OTLP/HTTP: the program's -trace
// flag names the exporter.
func Example() {
	ctx := context.Background()
	exporter := "otlp" // e.g. the value of a -trace flag: none, stdout or otlp
	tp, err := tracing.NewProvider(ctx, tracing.ProviderConfig{Exporter: exporter, ServiceName: "volume"})
	if err != nil {
		log.Fatal(err)
	}
	cfg := service.Config{ /* Node, Transport, Store, Services... */ }
	if tp != nil {
		defer tp.Shutdown(context.Background()) // flushes the last spans
		cfg.Tracer = tracing.New(tp)
	}
	_ = cfg // service.NewNode(cfg)
}
