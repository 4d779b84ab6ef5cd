// Command counter is a third-party stateless service built on cloudbus, a
// counter per resource UUID: go run ./examples/counter. It starts three
// management nodes in one process (service/servicetest), increments three
// counters through api.portal, kills the node owning the first without a
// goodbye and increments them again: counts intact, served by new owners.
// The service keeps no state: counts live in a store shared by the nodes
// (a database in production); the ring says which node serves each key.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Increment adds one to the counter of Key, a resource UUID.
type Increment struct{ Key string }

// Count is a counter's value after an Increment, and the node that counted.
type Count struct {
	Value int64
	Node  string
}

// Counts is where the counts live, shared by every node.
type Counts interface{ Incr(key string) int64 }

type memCounts struct{ m sync.Map } // key -> *atomic.Int64

func (c *memCounts) Incr(key string) int64 {
	v, _ := c.m.LoadOrStore(key, new(atomic.Int64))
	return v.(*atomic.Int64).Add(1)
}

// counter is the service on every node; api.portal forwards Increment to the key's owner.
type counter struct{ counts Counts }

func (counter) Name() string       { return "counter" }
func (counter) APIMessages() []any { return []any{Increment{}} }
func (c counter) Handle(_ context.Context, r *bus.Request) (any, error) {
	if m, ok := r.Payload.(*Increment); ok {
		return Count{Value: c.counts.Incr(m.Key), Node: r.Bus.Node()}, nil
	}
	return nil, message.ErrUnknownMessage
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg := message.NewRegistry()
	message.MustRegister[Increment](reg, "counter.v1.Increment")
	message.MustRegister[Count](reg, "counter.v1.Count")
	counts := &memCounts{}
	c, err := servicetest.New(ctx, servicetest.Options{Nodes: 3, Registry: reg, Prefix: "counter",
		Services: func(int) []service.Service { return []service.Service{counter{counts}} }})
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := c.NewClient(ctx) // a process that is not a node
	if err != nil {
		return err
	}
	defer cl.Close()
	keys := []string{message.NewUUID(), message.NewUUID(), message.NewUUID()}
	for round := range 3 {
		if round == 2 {
			c.Kill(c.Owner(keys[0])) // no goodbye: the others evict it and take its keys
			if err := c.AwaitConverged(ctx); err != nil {
				return err
			}
			fmt.Fprintln(w, "killed the node owning key 1; live nodes:", len(c.Live()))
		}
		for i, k := range keys {
			got, err := service.CallAPI[Count](ctx, cl, Increment{Key: k}, bus.WithResource(k))
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "key %d = %d, counted by its owner: %t\n", i+1, got.Value, got.Node == c.Owner(k))
		}
	}
	return nil
}
