package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// fenced is a service named "fenced" whose Touch handler waits until
// released, then writes through a memfence with the claim the node gave
// it.
type fenced struct {
	*bus.Mux
	f       atomic.Pointer[memfence.Fence]
	started chan struct{} // closed by the first handler
	release chan struct{} // handlers wait on it
}

func (s *fenced) Name() string { return "fenced" }

func newFenced() *fenced {
	s := &fenced{Mux: bus.NewMux(), started: make(chan struct{}), release: make(chan struct{})}
	var once atomic.Bool
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, m Touch) (Touched, error) {
		if once.CompareAndSwap(false, true) {
			close(s.started)
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return Touched{}, ctx.Err()
		}
		return memfence.Run(ctx, s.f.Load(), fence.For(ctx, r), func(context.Context, fence.Token) (Touched, func(), error) {
			return Touched{Node: "written"}, func() {}, nil
		})
	})
	return s
}

// TestStaleClaimSaysWhatTheNodeKnows: a handler whose node's lease
// expired while it ran has its fenced write refused; the fence, reading
// the heartbeat store, sees only a stale beat, and the node adds what it
// knows: its lease expired. The caller gets both in not_owner's details.
func TestStaleClaimSaysWhatTheNodeKnows(t *testing.T) {
	svc := newFenced()
	reg := registry()
	// One node: no peer evicts it, so its lease stays expired, and the
	// reply reaches the caller.
	c := servicetest.Start(t, servicetest.Options{
		Nodes: 1, Registry: reg,
		Services:  func(int, nodekit.Env) []service.Service { return []service.Service{svc} },
		Heartbeat: heartbeat.Config{Interval: 50 * time.Millisecond, Lease: 200 * time.Millisecond, EvictAfter: 10 * time.Second},
	})
	svc.f.Store(memfence.New(c.Store(), memfence.Config{MaxAge: 150 * time.Millisecond}))
	n := c.Node(0)
	res := message.NewUUID()

	errc := make(chan error, 1)
	go func() {
		_, err := bus.Call[Touched](t.Context(), n.Bus(), n.Bus().LocalID("fenced"), Touch{Resource: res}, bus.WithResource(res), bus.WithTimeout(10*time.Second))
		errc <- err
	}()
	select {
	case <-svc.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start within 10 s")
	}
	c.StopHeartbeat(n.UUID())
	defer c.ResumeHeartbeat(n.UUID())
	c.WaitFor(t, 10*time.Second, "the node's lease expires", n.LeaseExpired)
	close(svc.release)

	var err error
	select {
	case err = <-errc:
	case <-time.After(15 * time.Second):
		t.Fatal("no reply within 15 s")
	}
	require.ErrorIs(t, err, message.ErrNotOwner, "a stale claim is not_owner on the wire")
	details := message.AsError(err).Details
	assert.Contains(t, details, "last beat", "the fence's reason: %s", details)
	assert.Contains(t, details, "the claimant node says", "the node's own view: %s", details)
	assert.Contains(t, details, "lease expired", "%s", details)
	assert.False(t, errors.Is(err, fence.ErrStale), "the caller decodes a coded error, not the fence's type")
}
