package bus_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
)

// Greet and Greeting are the payload types of the examples.
type Greet struct {
	Name string `json:"name"`
}

// Greeting is the reply to Greet.
type Greeting struct {
	Text string `json:"text"`
}

// HostAdded is an event broadcast to every node.
type HostAdded struct {
	Host string `json:"host"`
}

func registry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[Greet](reg, "example.v1.Greet")
	message.MustRegister[Greeting](reg, "example.v1.Greeting")
	message.MustRegister[HostAdded](reg, "example.v1.HostAdded")
	message.MustRegister[ResizeVm](reg, "example.v1.ResizeVm")
	return reg
}

// twoNodes opens two buses on one in-memory network.
func twoNodes(ctx context.Context) (a, b *bus.CloudBus, cleanup func()) {
	net := membus.New()
	ta, tb := net.Transport("a"), net.Transport("b")
	a, _ = bus.Open(ctx, bus.Config{Transport: ta, Node: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", Registry: registry()})
	b, _ = bus.Open(ctx, bus.Config{Transport: tb, Node: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", Registry: registry()})
	return a, b, func() {
		a.Close()
		b.Close()
		ta.Close()
		tb.Close()
	}
}

func Example_call() {
	ctx := context.Background()
	a, b, cleanup := twoNodes(ctx)
	defer cleanup()

	// Node b hosts the "greeter" service.
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		if g.Name == "" {
			return Greeting{}, message.ErrBadRequest.WithDetails("name is required")
		}
		return Greeting{Text: "hello, " + g.Name}, nil
	})
	_ = b.Register(ctx, "greeter", mux)
	fmt.Println(busx.Of(b).QueueName(b.LocalID("greeter")))

	// Node a calls it.
	target := bus.ServiceID("greeter", b.Node())
	reply, err := bus.Call[Greeting](ctx, a, target, Greet{Name: "cloud"}, bus.WithTimeout(5*time.Second))
	fmt.Println(reply.Text, err)

	_, err = bus.Call[Greeting](ctx, a, target, Greet{})
	fmt.Println(errors.Is(err, message.ErrBadRequest))
	// Output:
	// cloudbus.message.greeter.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
	// hello, cloud <nil>
	// true
}

func Example_send() {
	ctx := context.Background()
	a, b, cleanup := twoNodes(ctx)
	defer cleanup()

	got := make(chan string, 1)
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (message.Empty, error) {
		got <- g.Name
		return message.Empty{}, nil
	})
	_ = b.Register(ctx, "greeter", mux)

	err := a.Send(ctx, bus.ServiceID("greeter", b.Node()), Greet{Name: "one-way"})
	fmt.Println(err, <-got)

	err = a.Send(ctx, bus.ServiceID("greeter", "cccccccccccccccccccccccccccccccc"), Greet{Name: "nobody"})
	fmt.Println(errors.Is(err, message.ErrNoRoute))
	// Output:
	// <nil> one-way
	// true
}

func Example_broadcast() {
	ctx := context.Background()
	a, b, cleanup := twoNodes(ctx)
	defer cleanup()

	seen := make(chan string, 2)
	for _, n := range []*bus.CloudBus{a, b} {
		node := n.Node()[:1]
		_, _ = bus.Subscribe(n, func(ctx context.Context, ev HostAdded) {
			seen <- node + " saw " + ev.Host
		})
	}
	_ = a.Broadcast(ctx, HostAdded{Host: "host-1"})
	first, second := <-seen, <-seen
	if first > second {
		first, second = second, first
	}
	fmt.Println(first)
	fmt.Println(second)
	// Output:
	// a saw host-1
	// b saw host-1
}

// ResizeVm names the VM it is about (message.Routed): the bus takes the
// resource from the payload, runs the messages about one VM one at a
// time, and refuses one whose envelope names no VM or another.
type ResizeVm struct {
	VM  string `json:"vm"`
	CPU int    `json:"cpu"`
}

// ResourceUUID returns the VM's UUID.
func (m ResizeVm) ResourceUUID() string { return m.VM }

// A handler that sees the request: the resource the message is about,
// its headers, the sender and the node it runs on.
func ExampleHandle() {
	ctx := context.Background()
	a, b, cleanup := twoNodes(ctx)
	defer cleanup()

	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m ResizeVm) (Greeting, error) {
		_, hasDeadline := r.Deadline()
		return Greeting{Text: fmt.Sprintf("vm %s to %d CPUs on %s, from %s, trace %s, deadline %t",
			r.Resource()[:8], m.CPU, r.Node()[:4], r.Source()[:4], r.Header("traceparent"), hasDeadline)}, nil
	})
	_ = b.Register(ctx, "vmInstance", mux)

	vm := "93276316-2D05-4C04-ADAA-B6AB498C9139" // any accepted spelling; the bus makes it canonical
	reply, err := bus.Call[Greeting](ctx, a, b.LocalID("vmInstance"), ResizeVm{VM: vm, CPU: 4}, bus.WithHeader("traceparent", "00-4bf9"))
	fmt.Println(reply.Text, err)

	_, err = bus.Call[Greeting](ctx, a, b.LocalID("vmInstance"), ResizeVm{CPU: 4})
	fmt.Println(errors.Is(err, message.ErrBadRequest))
	// Output:
	// vm 93276316 to 4 CPUs on bbbb, from aaaa, trace 00-4bf9, deadline true <nil>
	// true
}

// ExampleWithDelivery sends calls in the fast delivery mode, in which
// ZStack sends every message: neither persisted nor confirmed. A call
// still gets its reply, or ends at its deadline if the message was lost
// or its queue does not exist; one message can ask for the confirmed
// mode back.
func ExampleWithDelivery() {
	ctx := context.Background()
	net := membus.New()
	ta, tb := net.Transport("a"), net.Transport("b")
	defer ta.Close()
	defer tb.Close()
	a, _ := bus.Open(ctx, bus.Config{Transport: ta, Registry: registry(), Delivery: bus.Fast})
	defer a.Close()
	b, _ := bus.Open(ctx, bus.Config{Transport: tb, Registry: registry()})
	defer b.Close()
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		return Greeting{Text: "hello, " + g.Name}, nil
	})
	_ = b.Register(ctx, "greeter", mux)

	reply, err := bus.Call[Greeting](ctx, a, b.LocalID("greeter"), Greet{Name: "fast"}, bus.WithTimeout(5*time.Second))
	fmt.Println(reply.Text, err)

	nobody := bus.ServiceID("greeter", "cccccccccccccccccccccccccccccccc")
	_, err = bus.Call[Greeting](ctx, a, nobody, Greet{}, bus.WithTimeout(100*time.Millisecond))
	fmt.Println(errors.Is(err, message.ErrTimeout))
	_, err = bus.Call[Greeting](ctx, a, nobody, Greet{}, bus.WithDelivery(bus.Confirmed))
	fmt.Println(errors.Is(err, message.ErrNoRoute))
	// Output:
	// hello, fast <nil>
	// true
	// true
}
