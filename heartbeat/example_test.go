package heartbeat_test

import (
	"context"
	"fmt"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
)

// Two nodes join one store; the second sees both as members.
func ExampleMonitor_Join() {
	ctx := context.Background()
	store := memstore.New(memstore.Config{})
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

	ma, _ := heartbeat.NewMonitor(store, a, heartbeat.TestConfig(), nil, nil)
	_, members, _ := ma.Join(ctx)
	fmt.Println("a sees", len(members), "member")

	mb, _ := heartbeat.NewMonitor(store, b, heartbeat.TestConfig(), nil, nil)
	epoch, members, _ := mb.Join(ctx)
	for _, r := range members {
		fmt.Println("b sees", r.Node, "self:", r.Node == b && r.Epoch == epoch)
	}
	_ = mb.Leave(ctx)
	_ = ma.Leave(ctx)
	// Output:
	// a sees 1 member
	// b sees aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa self: false
	// b sees bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb self: true
}

// A running monitor reports a peer's goodbye as Left.
func ExampleMonitor_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New(memstore.Config{})
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

	mb, _ := heartbeat.NewMonitor(store, b, heartbeat.TestConfig(), nil, nil)
	_, _, _ = mb.Join(ctx)

	events := make(chan heartbeat.Event, 16)
	ma, _ := heartbeat.NewMonitor(store, a, heartbeat.TestConfig(), heartbeat.ListenerFunc(func(e heartbeat.Event) {
		events <- e // hand off: a listener must not block the loop
	}), nil)
	_, _, _ = ma.Join(ctx)
	done := make(chan error, 1)
	go func() { done <- ma.Run(ctx) }()

	_ = mb.Leave(ctx) // b says goodbye
	e := <-events     // a's next round, within one Interval
	fmt.Println(e.Kind, e.Record.Node)

	cancel() // stop a's loop, then say goodbye
	fmt.Println("Run:", <-done)
	fmt.Println("Leave:", ma.Leave(context.Background()))
	// Output:
	// Left bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
	// Run: <nil>
	// Leave: <nil>
}
