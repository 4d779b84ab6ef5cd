//go:build !race

package bus_test

import (
	"context"
	"testing"

	"github.com/cloudbus-go/cloudbus/bus"
)

// callAllocsMax bounds the allocations of one Call over membus, both
// sides counted (45 here, 48 in BenchmarkCall/membus) since envelopes are encoded
// by hand and a handler's context is made lazily (56 before; 108 before
// the hot path was first trimmed). The race detector's instrumentation
// allocates more, so the test runs without it.
const callAllocsMax = 48

func TestCallAllocs(t *testing.T) {
	ctx := context.Background()
	client, server, cleanup := twoNodes(ctx)
	defer cleanup()
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		return Greeting{Text: g.Name}, nil
	})
	if err := server.Register(ctx, "greeter", mux); err != nil {
		t.Fatal(err)
	}
	target := server.LocalID("greeter")
	call := func() {
		if r, err := bus.Call[Greeting](ctx, client, target, Greet{Name: "x"}); err != nil || r.Text != "x" {
			t.Fatal(r, err)
		}
	}
	call() // warm: workers started, queues' arrays grown
	if n := testing.AllocsPerRun(200, call); n > callAllocsMax {
		t.Errorf("a membus Call allocates %.0f times, want at most %d: profile it with go test ./bus -run '^$' -bench 'Call/membus' -memprofile mem.out", n, callAllocsMax)
	} else {
		t.Logf("a membus Call allocates %.0f times (at most %d)", n, callAllocsMax)
	}
}
