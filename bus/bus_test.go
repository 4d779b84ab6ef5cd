package bus_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pair opens two buses on a fresh network; closed at cleanup.
func pair(t *testing.T, cfg bus.Config) (a, b *bus.CloudBus, net *membus.Network) {
	t.Helper()
	net = membus.New()
	open := func(name string) *bus.CloudBus {
		tr := net.Transport(name)
		c := cfg
		c.Transport = tr
		if c.Registry == nil {
			c.Registry = registry()
		}
		bb, err := bus.Open(t.Context(), c)
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, bb.Close())
			require.NoError(t, tr.Close())
		})
		return bb
	}
	return open("a"), open("b"), net
}

func TestConfigValidate(t *testing.T) {
	_, err := bus.Open(t.Context(), bus.Config{Node: "NOT-A-UUID", Prefix: "bad prefix", Delivery: 7, Limits: bus.Limits{DefaultTimeout: -1, Prefetch: -1}})
	require.Error(t, err)
	for _, want := range []string{"Transport is required", "not a canonical UUID", "Prefix", "DefaultTimeout", "Prefetch", "Delivery DeliveryMode(7)"} {
		assert.Contains(t, err.Error(), want, "Validate must report every problem at once")
	}
}

func TestQueueNamesFollowTheArticle(t *testing.T) {
	a, _, net := pair(t, bus.Config{Prefix: "zstack"})
	require.NoError(t, a.Register(t.Context(), "vmInstance", bus.NewMux()))
	require.NoError(t, busx.Of(a).RegisterShared(t.Context(), bus.APIPortal, bus.NewMux()))
	_, ok := net.Queue("zstack.message.vmInstance." + a.Node())
	assert.True(t, ok)
	info, ok := net.Queue("zstack.message.api.portal")
	assert.True(t, ok)
	assert.Equal(t, driver.QueueDurable, info.Kind)
	assert.Equal(t, "vmInstance."+a.Node(), a.LocalID("vmInstance"))
	assert.Error(t, a.Register(t.Context(), "vmInstance", bus.NewMux()), "a service registers once")
	assert.ErrorIs(t, a.Register(t.Context(), "bad.name", bus.NewMux()), message.ErrBadRequest)

	svc, node, ok := bus.SplitServiceID("vmInstance." + a.Node())
	assert.True(t, ok)
	assert.Equal(t, "vmInstance", svc)
	assert.Equal(t, a.Node(), node)
	_, _, ok = bus.SplitServiceID(bus.APIPortal)
	assert.False(t, ok)
}

func TestUnregisterDeletesQueue(t *testing.T) {
	a, b, net := pair(t, bus.Config{})
	require.NoError(t, b.Register(t.Context(), "svc", bus.NewMux()))
	q := busx.Of(b).QueueName(b.LocalID("svc"))
	require.NoError(t, busx.Of(b).Unregister(t.Context(), b.LocalID("svc"), false))
	_, ok := net.Queue(q)
	assert.True(t, ok, "unregister without delete keeps the queue")
	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "waits"}))
	require.NoError(t, b.Register(t.Context(), "svc", bus.NewMux()))
	require.NoError(t, busx.Of(b).Unregister(t.Context(), b.LocalID("svc"), true))
	_, ok = net.Queue(q)
	assert.False(t, ok)
	assert.ErrorIs(t, a.Send(t.Context(), b.LocalID("svc"), Greet{}), message.ErrNoRoute)
	assert.Error(t, busx.Of(b).Unregister(t.Context(), b.LocalID("svc"), true), "not registered any more")
}

// TestPerResourceSerialAndParallel: messages about one resource never
// overlap and keep their order; different resources run concurrently.
func TestPerResourceSerialAndParallel(t *testing.T) {
	const resources, each = 100, 5
	a, b, _ := pair(t, bus.Config{Limits: bus.Limits{MaxConcurrency: 32}})
	var mu sync.Mutex
	active := map[string]int{}
	order := map[string][]string{}
	var running, maxRunning int
	overlapBug := atomic.Bool{}
	var wg sync.WaitGroup
	wg.Add(resources * each)
	gate := make(chan struct{})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		res := busx.EnvelopeOf(r).ResourceUUID
		mu.Lock()
		active[res]++
		if active[res] > 1 {
			overlapBug.Store(true)
		}
		running++
		maxRunning = max(maxRunning, running)
		order[res] = append(order[res], r.Payload.(*Greet).Name)
		mu.Unlock()
		<-gate // hold the slot until every handler slot could have filled
		mu.Lock()
		active[res]--
		running--
		mu.Unlock()
		wg.Done()
		return nil, nil
	})))
	ids := make([]string, resources)
	for i := range ids {
		ids[i] = message.NewUUID()
	}
	for k := range each {
		for _, id := range ids {
			require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: string(rune('a' + k))}, bus.WithResource(id)))
		}
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return running == 32 }, 5*time.Second, time.Millisecond)
	close(gate)
	wg.Wait()
	assert.False(t, overlapBug.Load(), "two handlers for one resource overlapped")
	assert.Equal(t, 32, maxRunning, "different resources must run concurrently up to MaxConcurrency")
	for _, id := range ids {
		assert.Equal(t, []string{"a", "b", "c", "d", "e"}, order[id], "order of resource %s", id)
	}
}

func TestBusyWhenResourceQueueFull(t *testing.T) {
	a, b, _ := pair(t, bus.Config{Limits: bus.Limits{MaxQueuePerResource: 3}})
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		started <- struct{}{}
		<-release
		return Greeting{Text: g.Name}, nil
	})
	require.NoError(t, b.Register(t.Context(), "svc", mux))
	res := message.NewUUID()
	errs := make(chan error, 4)
	for range 4 { // one runs, three wait
		go func() {
			_, err := bus.Call[any](t.Context(), b, b.LocalID("svc"), Greet{Name: "x"}, bus.WithResource(res), bus.WithTimeout(10*time.Second))
			errs <- err
		}()
	}
	<-started
	require.Eventually(t, func() bool { return b.Stats().Queued == 3 }, 5*time.Second, time.Millisecond)
	_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "y"}, bus.WithResource(res), bus.WithTimeout(5*time.Second))
	assert.ErrorIs(t, err, message.ErrBusy)
	assert.Equal(t, message.RetrySafe, message.CodeOf(err).Retry())

	// Another resource is not affected, and the node stays healthy.
	other := make(chan error, 1)
	go func() {
		_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "z"}, bus.WithResource(message.NewUUID()), bus.WithTimeout(5*time.Second))
		other <- err
	}()
	<-started
	close(release)
	require.NoError(t, <-other)
	for range 4 {
		require.NoError(t, <-errs)
	}
	assert.EqualValues(t, 1, b.Stats().Rejected)
}

func TestAbandonCallsFailsAtOnce(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	started := make(chan struct{})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})))
	errc := make(chan error, 1)
	go func() {
		_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{}, bus.WithTimeout(time.Minute))
		errc <- err
	}()
	<-started
	assert.Equal(t, 0, busx.Of(a).AbandonCalls(message.NewUUID(), time.Time{}, nil), "other nodes' calls are untouched")
	assert.Equal(t, 0, busx.Of(a).AbandonCalls(b.Node(), time.Now().Add(-time.Hour), nil), "calls sent after before are untouched")
	assert.Equal(t, 1, busx.Of(a).AbandonCalls(b.Node(), time.Time{}, errors.New("evicted")))
	err := <-errc
	assert.ErrorIs(t, err, message.ErrNodeLeft)
	assert.Equal(t, message.RetryUnknown, message.CodeOf(err).Retry())
	assert.Zero(t, a.Stats().Pending)
}

func TestShutdownDrains(t *testing.T) {
	net := membus.New()
	ta, tb := net.Transport("a"), net.Transport("b")
	defer ta.Close()
	defer tb.Close()
	a, err := bus.Open(t.Context(), bus.Config{Transport: ta, Registry: registry()})
	require.NoError(t, err)
	defer a.Close()
	b, err := bus.Open(t.Context(), bus.Config{Transport: tb, Registry: registry()})
	require.NoError(t, err)
	var done atomic.Int32
	release := make(chan struct{})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		<-release
		done.Add(1)
		return nil, nil
	})))
	for range 3 {
		require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{}))
	}
	require.Eventually(t, func() bool { return b.Stats().Running == 3 }, 5*time.Second, time.Millisecond)
	shut := make(chan error, 1)
	go func() { shut <- b.Shutdown(t.Context()) }()
	close(release)
	require.NoError(t, <-shut)
	assert.EqualValues(t, 3, done.Load(), "Shutdown lets running handlers finish")
}

func TestObserverSeesEverything(t *testing.T) {
	var mu sync.Mutex
	ops := map[bus.Op]int{}
	obs := bus.ObserverFunc(func(o bus.Observation) {
		mu.Lock()
		ops[o.Op]++
		mu.Unlock()
	})
	a, b, _ := pair(t, bus.Config{Observer: obs})
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) { return Greeting{}, nil })
	require.NoError(t, b.Register(t.Context(), "svc", mux))
	_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{})
	require.NoError(t, err)
	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{}))
	require.NoError(t, a.Broadcast(t.Context(), HostAdded{}))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ops[bus.OpCall] == 1 && ops[bus.OpSend] == 1 && ops[bus.OpBroadcast] == 1 &&
			ops[bus.OpHandle] == 2 && ops[bus.OpReply] == 1 && ops[bus.OpEvent] == 2
	}, 5*time.Second, time.Millisecond, "ops: %v", ops)
	assert.Equal(t, "late-reply", bus.OpLateReply.String())
	assert.Equal(t, "Op(99)", bus.Op(99).String())
}

// TestCloseGivesBackHeldRetries: a one-way message held on this node
// before its next attempt goes back to its queue when the bus closes,
// at once, not after its pause.
func TestCloseGivesBackHeldRetries(t *testing.T) {
	net := membus.New()
	tr := net.Transport("b")
	defer tr.Close()
	b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Limits: bus.Limits{RetryBackoff: time.Hour, RetryBackoffMax: time.Hour}})
	require.NoError(t, err)
	var ran atomic.Int32
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		ran.Add(1)
		return nil, message.ErrInternal.WithDetails("a dependency failed")
	})))
	sender := net.Transport("sender")
	defer sender.Close()
	sb, err := bus.Open(t.Context(), bus.Config{Transport: sender, Registry: registry()})
	require.NoError(t, err)
	defer sb.Close()
	require.NoError(t, sb.Send(t.Context(), b.LocalID("svc"), Greet{Name: "x"}))
	require.Eventually(t, func() bool { return b.Stats().Retried == 1 }, 5*time.Second, 5*time.Millisecond, "the failed message is held for its next attempt")
	queue := busx.Of(b).QueueName(b.LocalID("svc"))
	start := time.Now()
	require.NoError(t, b.Close())
	assert.Less(t, time.Since(start), 2*time.Second, "Close does not wait out the pause")
	q, ok := net.Queue(queue)
	require.True(t, ok)
	assert.Equal(t, 1, q.Ready, "the held message went back to its queue")
	assert.EqualValues(t, 1, ran.Load())
}

// forgetter records the queues the bus tells its transport to forget.
type forgetter struct {
	driver.Transport
	mu        sync.Mutex
	forgotten []string
}

func (f *forgetter) ForgetQueue(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, name)
}

// TestCloseForgetsServiceQueues: a closed bus keeps its services' queues
// on the broker, and tells a transport that declares its queues again
// after reconnecting to stop doing so for them (they may be deleted by
// others once this bus is gone).
func TestCloseForgetsServiceQueues(t *testing.T) {
	net := membus.New()
	tr := &forgetter{Transport: net.Transport("a")}
	defer tr.Close()
	b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Prefix: "forget"})
	require.NoError(t, err)
	require.NoError(t, b.Register(t.Context(), "vmInstance", bus.NewMux()))
	require.NoError(t, b.Close())
	queue := "forget.message.vmInstance." + b.Node()
	_, ok := net.Queue(queue)
	assert.True(t, ok, "the service queue stays")
	tr.mu.Lock()
	defer tr.mu.Unlock()
	assert.Equal(t, []string{queue}, tr.forgotten)
}

// TestNoRefusalForARequestGivenBack: a handler that refuses a request
// (not_owner: it did not run) while its bus closes under it, which gives
// the request back to its queue, does not answer: the request runs again
// on the next consumer, whose reply the caller gets.
func TestNoRefusalForARequestGivenBack(t *testing.T) {
	net := membus.New()
	open := func(name string) *bus.CloudBus {
		tr := net.Transport(name)
		t.Cleanup(func() { _ = tr.Close() })
		b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Prefix: "giveback"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	caller, first := open("caller"), open("first")
	started := make(chan struct{})
	refusing := bus.NewMux()
	bus.Handle(refusing, func(ctx context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		close(started)
		<-ctx.Done() // the bus closes under it
		return Greeting{}, message.ErrNotOwner.WithDetails("refused as the bus closed")
	})
	require.NoError(t, busx.Of(first).RegisterShared(t.Context(), bus.APIPortal, refusing))

	type result struct {
		g   Greeting
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := bus.Call[Greeting](t.Context(), caller, bus.APIPortal, Greet{Name: "x"}, bus.WithTimeout(10*time.Second))
		done <- result{g, err}
	}()
	<-started
	require.NoError(t, first.Close())

	second := open("second")
	answering := bus.NewMux()
	bus.Handle(answering, func(_ context.Context, _ *bus.Request, g Greet) (Greeting, error) {
		return Greeting{Text: "hello " + g.Name}, nil
	})
	require.NoError(t, busx.Of(second).RegisterShared(t.Context(), bus.APIPortal, answering))
	r := <-done
	require.NoError(t, r.err, "the caller gets the answer of the run that took the request given back, not the refusal")
	assert.Equal(t, "hello x", r.g.Text)
}

// stalledChecks is a transport whose deliveries' first Check waits for
// its context to end, as amqpbus's does when the broker does not answer
// the round trip asked after a pause of this process.
type stalledChecks struct {
	driver.Transport
	delivered, settled atomic.Int32
}

func (s *stalledChecks) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, handle func(driver.Delivery)) (driver.Consumer, error) {
	return s.Transport.Consume(ctx, queue, opts, func(d driver.Delivery) {
		n := s.delivered.Add(1)
		handle(&stalledCheck{Delivery: d, stall: n == 1, s: s})
	})
}

// stalledCheck is one of stalledChecks' deliveries; it counts settlements.
type stalledCheck struct {
	driver.Delivery
	stall bool
	s     *stalledChecks
	once  sync.Once
}

func (d *stalledCheck) Check(ctx context.Context) error {
	if d.stall {
		<-ctx.Done()
		return ctx.Err()
	}
	return d.Delivery.Check(ctx)
}

func (d *stalledCheck) settle() { d.once.Do(func() { d.s.settled.Add(1) }) }
func (d *stalledCheck) Ack() error {
	d.settle()
	return d.Delivery.Ack()
}
func (d *stalledCheck) Reject(requeue bool) error {
	d.settle()
	return d.Delivery.Reject(requeue)
}
func (d *stalledCheck) Retry(attempts int) error {
	d.settle()
	return d.Delivery.Retry(attempts)
}
func (d *stalledCheck) Release() error {
	d.settle()
	return d.Delivery.Release()
}
func (d *stalledCheck) DeadLetter(dead, reason string) error {
	d.settle()
	return d.Delivery.DeadLetter(dead, reason)
}

// TestStalledCheckSettles: a delivery whose check before the handler
// is cut by the message's deadline (the broker did not answer in time)
// does not run, and is not kept either (held, it would stay from every
// consumer until its channel closed): it is refused as late.
func TestStalledCheckSettles(t *testing.T) {
	net := membus.New()
	tr := &stalledChecks{Transport: net.Transport("b")}
	defer tr.Close()
	b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Prefix: "stalled"})
	require.NoError(t, err)
	defer b.Close()
	var ran atomic.Int32
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(context.Context, *bus.Request) (any, error) {
		ran.Add(1)
		return Greeting{}, nil
	})))
	caller := net.Transport("caller")
	defer caller.Close()
	cb, err := bus.Open(t.Context(), bus.Config{Transport: caller, Registry: registry(), Prefix: "stalled"})
	require.NoError(t, err)
	defer cb.Close()
	_, err = bus.Call[Greeting](t.Context(), cb, b.LocalID("svc"), Greet{Name: "x"}, bus.WithTimeout(200*time.Millisecond))
	require.ErrorIs(t, err, message.ErrTimeout)
	require.Eventually(t, func() bool { return tr.settled.Load() == 1 }, 5*time.Second, 5*time.Millisecond,
		"the delivery whose check the deadline cut is settled")
	assert.EqualValues(t, 1, tr.delivered.Load(), "delivered once")
	assert.EqualValues(t, 1, b.Stats().Late, "refused as late")
	q, ok := net.Queue(busx.Of(b).QueueName(b.LocalID("svc")))
	require.True(t, ok)
	assert.Zero(t, q.Ready)
	assert.Zero(t, ran.Load(), "a late request never runs")
}

// TestDeliveryHeader: a message carrying the fast delivery header (a
// forward passes a caller's headers on) goes fast; WithDelivery(Confirmed)
// on it wins and takes the header off.
func TestDeliveryHeader(t *testing.T) {
	a, _, _ := pair(t, bus.Config{})
	missing := bus.ServiceID("svc", "cccccccccccccccccccccccccccccccc")
	assert.ErrorIs(t, a.Send(t.Context(), missing, Greet{}), message.ErrNoRoute, "confirmed by default")
	assert.NoError(t, a.Send(t.Context(), missing, Greet{}, bus.WithHeader(bus.HeaderDelivery, "fast")), "the header asks for the fast mode")
	assert.ErrorIs(t, a.Send(t.Context(), missing, Greet{}, bus.WithHeader(bus.HeaderDelivery, "fast"), bus.WithDelivery(bus.Confirmed)), message.ErrNoRoute)
	assert.NoError(t, a.Send(t.Context(), missing, Greet{}, bus.WithDelivery(bus.Fast)))
}
