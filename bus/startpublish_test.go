package bus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/message"
)

// lateConfirms is an in-memory transport that confirms as a broker does
// (driver.PublishStarter): a publish started with StartPublish is
// delivered at once, and its outcome, outcome(), is reported only when
// confirm is closed.
type lateConfirms struct {
	*membus.Transport
	confirm chan struct{}
	outcome func() error // nil: the publish's own error
	started atomic.Int32
}

var _ driver.PublishStarter = (*lateConfirms)(nil)

func (l *lateConfirms) StartPublish(ctx context.Context, entry, queue string, data []byte) <-chan error {
	l.started.Add(1)
	var err error
	if l.outcome != nil {
		err = l.outcome()
	} else if entry == "" {
		err = l.Publish(ctx, queue, data)
	} else {
		err = l.PublishVia(ctx, entry, queue, data)
	}
	errc := make(chan error, 1)
	go func() {
		select {
		case <-l.confirm:
			errc <- err
		case <-ctx.Done():
			errc <- ctx.Err()
		}
	}()
	return errc
}

// lateConfirmPair opens a caller on a lateConfirms transport and a server
// on a plain one; the server's greeter answers.
func lateConfirmPair(t *testing.T, l *lateConfirms) (caller, server *bus.CloudBus) {
	net := membus.New()
	l.Transport = net.Transport("caller")
	l.confirm = make(chan struct{})
	t.Cleanup(func() { _ = l.Close() })
	st := net.Transport("server")
	t.Cleanup(func() { _ = st.Close() })
	var err error
	caller, err = bus.Open(t.Context(), bus.Config{Transport: l, Registry: registry()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = caller.Close() })
	server, err = bus.Open(t.Context(), bus.Config{Transport: st, Registry: registry()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = server.Close() })
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		return Greeting{Text: "hello, " + g.Name}, nil
	})
	require.NoError(t, server.Register(t.Context(), "greeter", mux))
	return caller, server
}

// TestCallEndsWithReplyBeforeConfirm: a reply proves that the request
// arrived, so a call in the confirmed mode ends with its reply while the
// broker has not confirmed the request yet (RabbitMQ confirms a
// persistent message once it is on disk, which may come after the reply).
func TestCallEndsWithReplyBeforeConfirm(t *testing.T) {
	l := &lateConfirms{}
	caller, server := lateConfirmPair(t, l)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	r, err := bus.Call[Greeting](ctx, caller, server.LocalID("greeter"), Greet{Name: "ann"})
	require.NoError(t, err, "the call ends with its reply, confirmed or not")
	assert.Equal(t, "hello, ann", r.Text)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.EqualValues(t, 1, l.started.Load(), "the request went through StartPublish")

	// The fast mode does not confirm: it publishes as before.
	_, err = bus.Call[Greeting](ctx, caller, server.LocalID("greeter"), Greet{Name: "bob"}, bus.WithDelivery(bus.Fast))
	require.NoError(t, err)
	assert.EqualValues(t, 1, l.started.Load(), "a fast call does not use StartPublish")
}

// TestCallFailsWithItsPublishOutcome: a request the broker refuses fails
// the call as soon as the outcome arrives, with its error, not at the
// deadline.
func TestCallFailsWithItsPublishOutcome(t *testing.T) {
	l := &lateConfirms{outcome: func() error { return message.ErrNoRoute.WithDetails("no such queue") }}
	caller, server := lateConfirmPair(t, l)
	close(l.confirm)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := bus.Call[Greeting](ctx, caller, server.LocalID("greeter"), Greet{Name: "ann"})
	require.ErrorIs(t, err, message.ErrNoRoute)
	assert.Less(t, time.Since(start), 2*time.Second, "the outcome ends the call, not its deadline")

	// A confirmation without a reply leaves the call to its deadline.
	l.outcome = func() error { return nil }
	short, cancelShort := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancelShort()
	_, err = bus.Call[Greeting](short, caller, server.LocalID("greeter"), Greet{Name: "ann"})
	require.ErrorIs(t, err, message.ErrTimeout, "confirmed but never delivered here: the call ends at its deadline")
}
