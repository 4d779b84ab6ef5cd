package bus_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
)

// BenchmarkCall compares a Call over the in-memory bus with the floor of
// any request/reply: a goroutine answering on Go channels, doing the same
// JSON encoding of request and reply. Run both in one go:
//
//	go test ./bus -run '^$' -bench Call -benchmem
func BenchmarkCall(b *testing.B) {
	b.Run("membus", func(b *testing.B) {
		net := membus.New()
		ta, tb := net.Transport("a"), net.Transport("b")
		defer ta.Close()
		defer tb.Close()
		ctx := context.Background()
		client, err := bus.Open(ctx, bus.Config{Transport: ta, Registry: registry()})
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		server, err := bus.Open(ctx, bus.Config{Transport: tb, Registry: registry()})
		if err != nil {
			b.Fatal(err)
		}
		defer server.Close()
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
			return Greeting{Text: "hello, " + g.Name}, nil
		})
		if err := server.Register(ctx, "greeter", mux); err != nil {
			b.Fatal(err)
		}
		target := server.LocalID("greeter")
		b.ReportAllocs()
		for b.Loop() {
			r, err := bus.Call[Greeting](ctx, client, target, Greet{Name: "bench"})
			if err != nil || r.Text != "hello, bench" {
				b.Fatal(r, err)
			}
		}
	})

	b.Run("go-channels+json", func(b *testing.B) {
		type request struct {
			body  []byte
			reply chan []byte
		}
		reqs := make(chan request)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case r := <-reqs:
					var g Greet
					if err := json.Unmarshal(r.body, &g); err != nil {
						panic(err)
					}
					out, _ := json.Marshal(Greeting{Text: "hello, " + g.Name})
					r.reply <- out
				case <-done:
					return
				}
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			body, _ := json.Marshal(Greet{Name: "bench"})
			reply := make(chan []byte, 1)
			reqs <- request{body: body, reply: reply}
			var g Greeting
			if err := json.Unmarshal(<-reply, &g); err != nil || g.Text != "hello, bench" {
				b.Fatal(g, err)
			}
		}
	})
}
