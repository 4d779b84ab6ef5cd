package amqpbus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/bustest"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pairOverProxy opens a caller bus and a server bus (with an echo
// service) whose transports reach the broker through p.
// It returns the echo service's id.
func pairOverProxy(t *testing.T, proxied string, logs *bytes.Buffer, mu *sync.Mutex) (caller *bus.CloudBus, echoID string, trs []*amqpbus.Transport) {
	t.Helper()
	e := &env{url: proxied, links: map[string][]*link{}}
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: logs, mu: mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	prefix := fmt.Sprintf("amqpbus-test-%s", message.NewUUID()[:8])
	open := func() (*bus.CloudBus, *amqpbus.Transport) {
		id := message.NewUUID()
		tr := e.dial(t, id, amqpbus.Config{Heartbeat: time.Second, Logger: logger})
		b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Node: id, Prefix: prefix, Registry: bustest.Registry(), Logger: logger})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, id := range busx.Of(b).Services() {
				if err := waitDelete(ctx, tr, busx.Of(b).QueueName(id)); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
			if err := waitDelete(ctx, tr, b.DeadLetterQueue()); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		return b, tr
	}
	caller, tc := open()
	server, ts := open()
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e bustest.Echo) (bustest.Echoed, error) {
		return bustest.Echoed{Text: e.Text, Seq: e.Seq, Node: server.Node()}, nil
	})
	require.NoError(t, server.Register(t.Context(), "echo", mux))
	return caller, server.LocalID("echo"), []*amqpbus.Transport{tc, ts}
}

// waitDelete deletes a queue, waiting for the transport to be connected.
func waitDelete(ctx context.Context, tr *amqpbus.Transport, q string) error {
	for {
		err := tr.DeleteQueue(ctx, q)
		if err == nil || !errors.Is(err, message.ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func waitConnected(t *testing.T, trs []*amqpbus.Transport, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		ok := true
		for _, tr := range trs {
			if tr.State() != driver.TransportConnected {
				ok = false
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("transports not reconnected within %s", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReconnectAfterCut: the broker connection is cut for 5 s while 20
// callers call. The transports reconnect within 5 s after the cut heals,
// every call ends within its deadline with success or a typed error, and
// calls after recovery succeed.
func TestReconnectAfterCut(t *testing.T) {
	p, proxied := proxy.NewURL(t, testenv.AMQPURL(t))
	var logs bytes.Buffer
	var mu sync.Mutex
	caller, echoID, trs := pairOverProxy(t, proxied, &logs, &mu)
	var ok, failed atomic.Int64
	var untyped atomic.Int64
	var late atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const callers, deadline = 20, 2 * time.Second
	for w := range callers {
		wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := bus.Call[bustest.Echoed](t.Context(), caller, echoID, bustest.Echo{Seq: w*100000 + seq}, bus.WithTimeout(deadline))
				if time.Since(start) > deadline+time.Second {
					late.Add(1)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case message.CodeOf(err) == message.ErrUnavailable.Code, message.CodeOf(err) == message.ErrNotSent.Code,
					message.CodeOf(err) == message.ErrTimeout.Code, message.CodeOf(err) == message.ErrNoRoute.Code:
					failed.Add(1)
					time.Sleep(10 * time.Millisecond)
				default:
					untyped.Add(1)
					t.Errorf("call failed with an unexpected error: %v", err)
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // load before the cut
	before := ok.Load()
	p.Cut()
	time.Sleep(5 * time.Second)
	p.Heal()
	healed := time.Now()
	took := waitConnected(t, trs, 5*time.Second)
	t.Logf("reconnected %s after the proxy healed", took.Round(time.Millisecond))
	require.Eventually(t, func() bool {
		_, err := bus.Call[bustest.Echoed](t.Context(), caller, echoID, bustest.Echo{Seq: -1}, bus.WithTimeout(time.Second))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "calls succeed after recovery")
	recovered := ok.Load()
	// The callers' own calls succeed again too (a loaded machine may take
	// a while: poll rather than sleep a fixed time).
	for deadline := time.Now().Add(5 * time.Second); ok.Load() <= recovered && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("calls ok before the cut: %d, ok in all: %d, failed with a typed error: %d; first success %s after heal",
		before, ok.Load(), failed.Load(), time.Since(healed).Round(time.Millisecond))
	assert.Zero(t, untyped.Load(), "every failure is typed (unavailable, timeout or no-route)")
	assert.Zero(t, late.Load(), "every call ends within its deadline")
	assert.Greater(t, ok.Load(), recovered, "calls after recovery succeed")
	assert.Positive(t, failed.Load(), "calls during the cut fail with a typed error")
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, logs.String(), "PRECONDITION_FAILED", "no stale delivery tag was acknowledged")
}

// TestReconnectStorm: all connections are closed 20 times in a row under
// load. No deadlock, no goroutine growth, no stale acknowledgement.
func TestReconnectStorm(t *testing.T) {
	p, proxied := proxy.NewURL(t, testenv.AMQPURL(t))
	var logs bytes.Buffer
	var mu sync.Mutex
	caller, echoID, trs := pairOverProxy(t, proxied, &logs, &mu)
	call := func() error {
		_, err := bus.Call[bustest.Echoed](t.Context(), caller, echoID, bustest.Echo{}, bus.WithTimeout(2*time.Second))
		return err
	}
	require.NoError(t, call())
	runtime.GC()
	baseline := runtime.NumGoroutine()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var untyped atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := call(); err != nil && message.CodeOf(err) != message.ErrUnavailable.Code && message.CodeOf(err) != message.ErrNotSent.Code &&
					message.CodeOf(err) != message.ErrTimeout.Code && message.CodeOf(err) != message.ErrNoRoute.Code {
					untyped.Add(1)
					t.Errorf("unexpected error: %v", err)
				}
			}
		})
	}
	var reconnects atomic.Int64
	for _, tr := range trs {
		stopWatch := tr.WatchState(func(s driver.TransportState) {
			if s == driver.TransportConnected {
				reconnects.Add(1)
			}
		})
		defer stopWatch()
	}
	for i := range 20 {
		p.Cut()
		p.Heal()
		want := int64(2 * (i + 1)) // both transports reconnected once more
		deadline := time.Now().Add(10 * time.Second)
		for reconnects.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("cut %d: transports did not reconnect within 10s", i+1)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if i%5 == 4 {
			t.Logf("storm: %d cuts survived", i+1)
		}
	}
	close(stop)
	wg.Wait()
	require.Eventually(t, func() bool { return call() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, untyped.Load())
	var grown int
	settled := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		runtime.GC()
		if grown = runtime.NumGoroutine() - baseline; grown <= 5 {
			settled = true
			break
		}
	}
	if !settled {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines grew by %d after 20 reconnects:\n%s", grown, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("goroutines: baseline %d, after 20 reconnects %+d", baseline, grown)
	mu.Lock()
	defer mu.Unlock()
	for _, bad := range []string{"PRECONDITION_FAILED", "unknown delivery tag"} {
		assert.NotContains(t, logs.String(), bad)
	}
}

// TestBusCloseReturnsWhenBrokerStalls: a node that leaves while its
// broker node is frozen exits by a bound: the bus's Close cancels its
// consumers, whose basic.cancel goes unanswered until the liveness probe
// drops the connection, and the transport's Close does not wait on the
// broker either.
func TestBusCloseReturnsWhenBrokerStalls(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	id := message.NewUUID()
	tr := e.dial(t, id, amqpbus.Config{Heartbeat: time.Minute})
	prefix := fmt.Sprintf("amqpbus-test-%s", message.NewUUID()[:8])
	b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Node: id, Prefix: prefix, Registry: bustest.Registry()})
	require.NoError(t, err)
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e bustest.Echo) (bustest.Echoed, error) {
		return bustest.Echoed{Text: e.Text}, nil
	})
	require.NoError(t, b.Register(t.Context(), "echo", mux))
	queues := []string{busx.Of(b).QueueName(b.LocalID("echo")), b.DeadLetterQueue()}
	t.Cleanup(func() {
		adm, err := amqpbus.Dial(context.Background(), amqpbus.Config{URL: testenv.AMQPURL(t), ConnectionName: "amqpbus test admin"})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer adm.Close()
		for _, q := range queues {
			if err := waitDelete(context.Background(), adm, q); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	p.Stall()
	start := time.Now()
	_ = b.Close()
	busClosed := time.Since(start)
	require.NoError(t, tr.Close())
	took := time.Since(start)
	t.Logf("with the broker stalled: the bus closed after %s, the transport %s later", busClosed.Round(time.Millisecond), (took - busClosed).Round(time.Millisecond))
	assert.Less(t, took, 8*time.Second, "a node leaving while its broker does not answer must exit by a bound")
	p.Heal()
}
