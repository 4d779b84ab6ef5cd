package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// BenchmarkCall measures the adapter's overhead: one Call between two
// buses, without an Observer ("bare") and with one Metrics observing
// each bus ("metrics"), on the in-memory bus and on RabbitMQ (skipped
// without CLOUDBUS_AMQP_URL). Run them side by side:
//
//	go test ./service/metrics -run '^$' -bench Call -count 5
func BenchmarkCall(b *testing.B) {
	b.Run("membus", func(b *testing.B) {
		net := membus.New()
		benchCalls(b, func(b *testing.B, name string) driver.Transport { return net.Transport(name) })
	})
	b.Run("amqpbus", func(b *testing.B) {
		url := testenv.AMQPURL(b)
		benchCalls(b, func(b *testing.B, name string) driver.Transport {
			tr, err := amqpbus.Dial(context.Background(), amqpbus.Config{URL: url, ConnectionName: "cloudbus-metrics-bench " + name})
			if err != nil {
				b.Fatal(err)
			}
			return tr
		})
	})
}

func benchCalls(b *testing.B, transport func(*testing.B, string) driver.Transport) {
	for _, observed := range []bool{false, true} {
		name := "bare"
		if observed {
			name = "metrics"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			prefix := "metrics-bench-" + message.NewUUID()[:8]
			var buses []*bus.CloudBus
			for _, side := range []string{"client", "server"} {
				tr := transport(b, prefix+"-"+side)
				cfg := bus.Config{Transport: tr, Prefix: prefix, Registry: registry()}
				if observed {
					m, err := metrics.New(metrics.Config{Transport: tr})
					if err != nil {
						b.Fatal(err)
					}
					cfg.Observer = m
				}
				bb, err := bus.Open(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				buses = append(buses, bb)
				defer func() {
					_ = bb.Close()
					for _, id := range busx.Of(bb).Services() {
						_ = tr.DeleteQueue(ctx, busx.Of(bb).QueueName(id))
					}
					_ = tr.DeleteQueue(ctx, bb.DeadLetterQueue())
					_ = tr.Close()
				}()
			}
			client, server := buses[0], buses[1]
			if err := server.Register(ctx, service1, vmMux()); err != nil {
				b.Fatal(err)
			}
			target := server.LocalID(service1)
			req := StartVm{VM: message.NewUUID()}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bus.Call[Started](ctx, client, target, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkObserve measures one observation of an existing series, the
// adapter's whole cost on the message path, from two goroutines at once:
//
//	go test ./service/metrics -run '^$' -bench Observe
func BenchmarkObserve(b *testing.B) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range []struct {
		name string
		obs  bus.Observation
	}{
		{"call", bus.Observation{Op: bus.OpCall, ServiceID: service1 + "." + message.NewUUID(), Type: startType, Duration: time.Millisecond}},
		{"handle", bus.Observation{Op: bus.OpHandle, ServiceID: service1 + "." + message.NewUUID(), Type: startType, Duration: time.Millisecond, Queued: time.Microsecond}},
		{"failed", bus.Observation{Op: bus.OpCall, ServiceID: service1, Type: startType, Err: message.ErrNotFound}},
	} {
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m.Observe(o.obs)
				}
			})
		})
	}
}
