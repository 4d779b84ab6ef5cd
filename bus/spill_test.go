package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestPortalGrowsWhileHandlersWait holds api.portal's handlers, as calls
// to an owner that died would, for three times the prefetch: a call that
// does not wait is still answered at once, because the bus opens more
// consumers on api.portal while nearly all it may hold runs and waits.
// With the handlers free again it removes them, down to one; it never
// keeps more than bus.PortalConsumers, however many wait; and calls about
// one resource, waiting in its line behind one handler, add none.
func TestPortalGrowsWhileHandlersWait(t *testing.T) {
	defer bus.SetSpillCooldown(10 * time.Millisecond)()
	const prefetch = 4
	net := membus.New()
	open := func(name string) (*bus.CloudBus, driver.Transport) {
		tr := net.Transport(name)
		t.Cleanup(func() { _ = tr.Close() })
		b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Prefix: "spill", Limits: bus.Limits{Prefetch: prefetch}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b, tr
	}
	caller, _ := open("caller")
	portal, tr := open("portal")
	release, lineRelease := make(chan struct{}), make(chan struct{})
	var once, lineOnce sync.Once
	free := func() { once.Do(func() { close(release) }) }
	freeLine := func() { lineOnce.Do(func() { close(lineRelease) }) }
	defer free()
	defer freeLine()
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		wait := map[string]chan struct{}{"stuck": release, "line": lineRelease}[g.Name]
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return Greeting{}, ctx.Err()
			}
		}
		return Greeting{Text: "hello " + g.Name}, nil
	})
	require.NoError(t, busx.Of(portal).RegisterShared(t.Context(), bus.APIPortal, mux))
	queue := busx.Of(portal).QueueName(bus.APIPortal)
	consumers := func() int {
		n, err := tr.(driver.ConsumerCounter).Consumers(t.Context(), queue)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 1, consumers(), "one consumer while nothing waits")

	calls := func(n int, name string, opts ...bus.Option) (wait func() []error) {
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := bus.Call[Greeting](t.Context(), caller, bus.APIPortal, Greet{Name: name}, append(opts, bus.WithTimeout(20*time.Second))...)
				errs <- err
			}()
		}
		return func() []error {
			var out []error
			for range n {
				out = append(out, <-errs)
			}
			return out
		}
	}
	awaitRunning := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for portal.Stats().Running < n {
			require.True(t, time.Now().Before(deadline), "%d portal handlers running; want %d", portal.Stats().Running, n)
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Calls about one resource wait in its line behind the one running:
	// more consumers would only take more of them into this node's line.
	waitLine := calls(3*prefetch, "line", bus.WithResource(message.NewUUID()))
	awaitRunning(1)
	deadline := time.Now().Add(10 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.Equal(t, 1, consumers(), "one consumer while a single handler waits, however long its line")
		time.Sleep(time.Millisecond)
	}
	freeLine()
	for i, err := range waitLine() {
		require.NoError(t, err, "call %d in the line answered once freed", i)
	}

	wait := calls(3*prefetch, "stuck")
	awaitRunning(3 * prefetch)
	start := time.Now()
	g, err := bus.Call[Greeting](t.Context(), caller, bus.APIPortal, Greet{Name: "free"}, bus.WithTimeout(5*time.Second))
	require.NoError(t, err, "a call that does not wait is answered while %d others wait", 3*prefetch)
	assert.Equal(t, "hello free", g.Text)
	t.Logf("answered in %s with %d calls waiting on %d consumers", time.Since(start).Round(time.Microsecond), 3*prefetch, consumers())
	assert.GreaterOrEqual(t, consumers(), 4, "consumers enough for the waiting calls and one more")

	// However many wait, the consumers stay bounded.
	waitMore := calls(bus.PortalConsumers*prefetch+8, "stuck")
	awaitRunning(bus.PortalConsumers * prefetch)
	assert.Equal(t, bus.PortalConsumers, consumers(), "at most bus.PortalConsumers consumers")

	free()
	for i, err := range append(wait(), waitMore()...) {
		require.NoError(t, err, "waiting call %d answered once freed", i)
	}
	// Calls that do not wait let the consumers go again.
	deadline = time.Now().Add(10 * time.Second)
	for i := 0; consumers() > 1; i++ {
		require.True(t, time.Now().Before(deadline), "still %d consumers on api.portal long after nothing waits", consumers())
		_, err := bus.Call[Greeting](t.Context(), caller, bus.APIPortal, Greet{Name: fmt.Sprint(i)}, bus.WithTimeout(5*time.Second))
		require.NoError(t, err)
		time.Sleep(15 * time.Millisecond) // past the cooldown
	}
}

// stallingConsume is a transport whose Consume on one queue, once armed,
// waits for its ctx, as against a broker node that froze.
type stallingConsume struct {
	driver.Transport
	queue   string
	armed   chan struct{} // closed to arm
	stalled chan struct{} // closed when a Consume waits
	once    sync.Once
}

func (s *stallingConsume) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, fn func(driver.Delivery)) (driver.Consumer, error) {
	select {
	case <-s.armed:
		if queue == s.queue {
			s.once.Do(func() { close(s.stalled) })
			<-ctx.Done()
			return nil, ctx.Err()
		}
	default:
	}
	return s.Transport.Consume(ctx, queue, opts, fn)
}

// TestCloseDoesNotWaitForAConsumerBeingAdded closes a bus while it adds a
// consumer to api.portal and the broker does not answer: Close returns at
// once instead of waiting out ReplyTimeout.
func TestCloseDoesNotWaitForAConsumerBeingAdded(t *testing.T) {
	const prefetch = 2
	net := membus.New()
	callerTr := net.Transport("caller")
	t.Cleanup(func() { _ = callerTr.Close() })
	caller, err := bus.Open(t.Context(), bus.Config{Transport: callerTr, Registry: registry(), Prefix: "spillclose"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = caller.Close() })

	memTr := net.Transport("portal")
	t.Cleanup(func() { _ = memTr.Close() })
	tr := &stallingConsume{Transport: memTr, armed: make(chan struct{}), stalled: make(chan struct{})}
	portal, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Prefix: "spillclose",
		Limits: bus.Limits{Prefetch: prefetch, ReplyTimeout: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = portal.Close() })
	release := make(chan struct{})
	defer close(release)
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Greeting{}, ctx.Err()
	})
	require.NoError(t, busx.Of(portal).RegisterShared(t.Context(), bus.APIPortal, mux))
	tr.queue = busx.Of(portal).QueueName(bus.APIPortal)
	close(tr.armed)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range prefetch {
		go func() {
			_, _ = bus.Call[Greeting](ctx, caller, bus.APIPortal, Greet{Name: "stuck"}, bus.WithTimeout(time.Minute))
		}()
	}
	select {
	case <-tr.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the portal did not try to add a consumer with every handler waiting")
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- portal.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
		t.Logf("Close returned in %s while a consumer was being added", time.Since(start).Round(time.Microsecond))
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a consumer being added to a broker that does not answer")
	}
}
