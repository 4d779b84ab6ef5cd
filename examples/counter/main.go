// Command counter is a stateless service built on cloudbus, a counter per resource UUID: go run
// ./examples/counter. Three nodes count keys through api.portal; one dies; the others take over.
package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// Increment adds one to the counter of Key, a resource UUID.
type Increment struct{ Key string }

// ResourceUUID names the resource: every sender routes Increment to the key's owner.
func (m Increment) ResourceUUID() string { return m.Key }

// Count is a counter's value after an Increment, and the node that counted.
type Count struct {
	Value int64
	Node  string
}

// Counts is where the counts live, shared by every node (a database in production).
type Counts struct {
	sync.Mutex
	m    map[string]int64
	done map[string]Count // by message ID: what each Increment answered (a table in production)
}

// Increment is the handler of every node's counter service; the bus runs it on the key's owner.
// Delivery is at least once: a message whose node died before it settled runs again with the
// same ID (api.portal forwards it again), so an Increment already counted answers as it did.
func (c *Counts) Increment(_ context.Context, r *bus.Request, _ Increment) (Count, error) {
	c.Lock()
	defer c.Unlock()
	if got, ok := c.done[r.ID()]; ok {
		return got, nil
	}
	c.m[r.Resource()]++
	got := Count{Value: c.m[r.Resource()], Node: r.Node()}
	if c.done == nil {
		c.done = map[string]Count{}
	}
	c.done[r.ID()] = got
	return got, nil
}

// Service returns a node's counter service; api.portal forwards Increment to the key's owner.
func (c *Counts) Service() service.Service {
	mux := bus.NewMux()
	bus.Handle(mux, c.Increment)
	return service.API("counter", mux)
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg := message.NewRegistry()
	message.MustRegister[Increment](reg, "counter.v1.Increment")
	message.MustRegister[Count](reg, "counter.v1.Count")
	net, store, counts := membus.New(), memstore.New(memstore.Config{}), &Counts{m: map[string]int64{}}
	var nodes []*service.Node
	hb := heartbeat.TestConfig()             // fast beats for a demo...
	hb.EvictAfter, hb.Lease = time.Second, 0 // ...and an eviction a loaded machine's stall does not trigger
	for range 3 {                            // in production: one node per process, on RabbitMQ and a database
		id := message.NewUUID()
		n, err := service.StartNode(ctx, service.Config{Node: id, Prefix: "counter", Transport: net.Transport(id), OwnTransport: true,
			Store: store.For(id), Registry: reg, Heartbeat: hb, Services: []service.Service{counts.Service()}})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	cl, err := service.NewClient(ctx, service.ClientConfig{Transport: net.Transport("client"), Prefix: "counter", Registry: reg, OwnTransport: true})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	keys := []string{message.NewUUID(), message.NewUUID(), message.NewUUID()}
	for round := range 3 {
		if round == 2 { // the owner of key 1 crashes: no goodbye, no more beats
			dead, _ := nodes[0].Owner(keys[0])
			net.Kill(dead)
			store.SetUnreachable(dead, true)
			nodes = slices.DeleteFunc(nodes, func(n *service.Node) bool { return n.UUID() == dead })
		}
		if err := nodes[0].AwaitConverged(ctx); err != nil { // every ring copy holds the live nodes
			log.Fatal(err)
		}
		fmt.Printf("round %d, %d live nodes\n", round+1, len(nodes[0].Members()))
		for i, k := range keys {
			got, err := service.Call[Count](ctx, cl, Increment{Key: k})
			if err != nil {
				log.Fatal(err)
			}
			owner, _ := nodes[0].Owner(k)
			fmt.Printf("key %d = %d, counted by its owner: %t\n", i+1, got.Value, got.Node == owner)
		}
	}
}
