package memstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
)

// A store used directly: a node registers and beats; a peer lists the
// record and evicts it only with the epoch and sequence it listed.
func Example() {
	ctx := context.Background()
	s := memstore.New(memstore.Config{})
	const node = "3694776ab31a45709259254a018913ca"

	epoch, _ := s.Register(ctx, node)
	recs, _ := s.List(ctx)
	seen := recs[0] // sequence 0, as a peer saw it

	_ = s.Beat(ctx, node, epoch) // the node beats: sequence 1
	ok, _ := s.Evict(ctx, node, seen.Epoch, seen.Seq)
	fmt.Println("evicted with a stale sequence:", ok)

	recs, _ = s.List(ctx)
	ok, _ = s.Evict(ctx, node, recs[0].Epoch, recs[0].Seq)
	fmt.Println("evicted with the current sequence:", ok)

	err := s.Beat(ctx, node, epoch)
	fmt.Println("the node's next beat:", errors.Is(err, heartbeat.ErrEvicted))
	// Output:
	// evicted with a stale sequence: false
	// evicted with the current sequence: true
	// the node's next beat: true
}

// A node cut off from the store: its calls fail, the others' succeed.
func ExampleStore_SetUnreachable() {
	ctx := context.Background()
	s := memstore.New(memstore.Config{})
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	va, vb := s.For(a), s.For(b)
	ea, _ := va.Register(ctx, a)
	eb, _ := vb.Register(ctx, b)

	s.SetUnreachable(a, true)
	fmt.Println(errors.Is(va.Beat(ctx, a, ea), memstore.ErrUnreachable))
	fmt.Println(vb.Beat(ctx, b, eb))
	// Output:
	// true
	// <nil>
}
