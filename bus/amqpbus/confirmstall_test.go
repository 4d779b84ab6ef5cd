package amqpbus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/bustest"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestStalledConfirmClosesItsChannel: a publish whose confirmation does
// not come (a quorum queue's leader froze after taking it), while the
// connection stays healthy, holds every later confirmation of its
// channel, since amqp091-go hands them over in order. Once it waited
// confirmStall its channel is closed: its publishes end with an unknown
// outcome before their deadline, the broker still delivers what it took,
// and the next publish goes through a new channel. Before, every publish
// of the channel timed out for as long as the broker kept the
// confirmation (over a minute in CI, after a broker node's freeze).
func TestStalledConfirmClosesItsChannel(t *testing.T) {
	const stall = 300 * time.Millisecond
	t.Cleanup(amqpbus.SetConfirmStall(stall, 20*time.Millisecond)) // after the transport closed
	tr, q, hold, logs := withheldConfirms(t)
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`"before"`)))

	hold.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := tr.Publish(ctx, q, []byte(`"held"`))
	took := time.Since(start)
	require.ErrorIs(t, err, message.ErrUnavailable)
	assert.Contains(t, err.Error(), "outcome unknown")
	assert.Contains(t, err.Error(), "closed by cloudbus")
	assert.Less(t, took, 3*time.Second, "ended once the confirmation waited %s, not at the caller's deadline", stall)
	assert.True(t, logs.has("closing its channel"), "the transport says why")
	t.Logf("a publish whose confirmation was withheld ended after %s: %v", took.Round(time.Millisecond), err)

	hold.Store(false)
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`"after"`)), "the next publish opens a new channel")
	got := consumeBodies(t, tr, q)
	for _, want := range []string{`"before"`, `"held"`, `"after"`} {
		awaitBody(t, got, want, "the broker delivers every message it took, the one of unknown outcome included")
	}
}

// withheldConfirms dials a transport with one publishing channel, logging
// to logs, and declares a temporary queue q; while hold is set, the
// transport sees none of the broker's confirmations. Set the confirm
// stall (SetConfirmStall) before: its cleanup must run after the
// transport's close.
func withheldConfirms(t *testing.T) (tr *amqpbus.Transport, q string, hold *atomic.Bool, logs *logLines) {
	hold = new(atomic.Bool)
	amqpbus.OnConfirm(func(amqp.Confirmation) bool { return !hold.Load() })
	t.Cleanup(func() { amqpbus.OnConfirm(nil) })
	e := newEnv(t)
	logs = &logLines{}
	tr = e.dial(t, message.NewUUID(), amqpbus.Config{Publishers: 1, Logger: slog.New(logs)})
	q = testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	return tr, q, hold, logs
}

// TestSlowListenerLosesNoConfirmOrReturn: amqp091-go drops a
// notification its listener has not taken within 5 s. A publisher whose
// notify goroutine was held that long (a paused or descheduled process)
// lost the return of a message no queue took, and then reported that
// message sent on its confirm, and lost later confirms, which stalled the
// channel. Both are buffered now, and a confirm is settled only after the
// returns handed over before it.
func TestSlowListenerLosesNoConfirmOrReturn(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a publisher's listener for 6 s")
	}
	held, release := make(chan struct{}), make(chan struct{})
	var hold atomic.Bool
	amqpbus.OnConfirm(func(amqp.Confirmation) bool {
		if hold.CompareAndSwap(true, false) {
			close(held)
			<-release // the listener is held, as in a paused process
		}
		return true
	})
	t.Cleanup(func() { amqpbus.OnConfirm(nil) })

	e := newEnv(t)
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{Publishers: 1})
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hold.Store(true)
	errs := make(chan error, 1)
	go func() { errs <- tr.Publish(ctx, q, []byte(`"first"`)) }()
	<-held
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 3)
	for _, p := range []struct{ name, queue string }{{"to nowhere", q + ".missing"}, {"second", q}, {"third", q}} {
		go func() { results <- result{p.name, tr.Publish(ctx, p.queue, []byte(`"`+p.name+`"`))} }()
	}
	time.Sleep(6 * time.Second) // amqp091-go gives up on a listener after 5 s: hold it longer
	close(release)
	require.NoError(t, <-errs)
	for range 3 {
		r := <-results
		if r.name == "to nowhere" {
			assert.ErrorIs(t, r.err, message.ErrNoRoute, "a message no queue took is not reported sent")
		} else {
			assert.NoError(t, r.err, "publish %s confirmed", r.name)
		}
	}
	got, bodies := consumeBodies(t, tr, q), []string{}
	for range 3 {
		select {
		case b := <-got:
			bodies = append(bodies, b)
		case <-time.After(10 * time.Second):
			t.Fatalf("every message the broker took is delivered: got %v", bodies)
		}
	}
	assert.ElementsMatch(t, []string{`"first"`, `"second"`, `"third"`}, bodies)
}

// TestStallCloseWhilePublishingKeepsTheConnection: publishes racing the
// close of their channel, whose confirmations stalled. A publish frame
// written after channel.close reaches the broker on a channel whose close
// it may have confirmed already, and RabbitMQ answers with a connection
// error (504 CHANNEL_ERROR, expected 'channel.open'), which costs every
// channel of the connection. Now the publisher writes nothing on a
// channel once its close began: the publishes after it go through the
// next channel.
func TestStallCloseWhilePublishingKeepsTheConnection(t *testing.T) {
	// Restored after the transport closed (cleanups run last-in first-out).
	t.Cleanup(amqpbus.SetConfirmStall(50*time.Millisecond, 5*time.Millisecond))
	tr, q, hold, logs := withheldConfirms(t)
	ctx := t.Context()

	const rounds, publishers = 10, 8
	var published, unknown atomic.Int64
	for round := range rounds {
		hold.Store(true) // every confirmation of the channel withheld: it stalls and closes
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		var wg sync.WaitGroup
		for range publishers {
			wg.Go(func() {
				for rctx.Err() == nil {
					// Shorter than the stall: a stream of new publishes
					// meets the channel's close.
					pctx, pcancel := context.WithTimeout(ctx, 10*time.Millisecond)
					err := tr.Publish(pctx, q, []byte(`"x"`))
					pcancel()
					published.Add(1)
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						unknown.Add(1)
					}
				}
			})
		}
		wg.Wait()
		cancel()
		hold.Store(false)
		// A probe: it may still meet a channel whose withheld
		// confirmations close it (an unknown outcome), not a lost
		// connection.
		var err error
		for range 10 {
			if err = tr.Publish(ctx, q, []byte(`"probe"`)); err == nil || !strings.Contains(err.Error(), "closed by cloudbus") {
				break
			}
		}
		require.NoError(t, err, "round %d: a publish after the channel's close goes through a new channel", round)
	}
	closes := logs.count("closing its channel")
	t.Logf("%d publishes in %d rounds, %d of them ended with an error other than their deadline; %d channels closed as stalled", published.Load(), rounds, unknown.Load(), closes)
	assert.GreaterOrEqual(t, closes, rounds/2, "the stalled channel was closed under the publishes")
	assert.Zero(t, tr.ConnectionsLost(), "no publish racing its channel's close cost the connection")
	require.NoError(t, tr.DeleteQueue(ctx, q))
}

// TestCallEndsBeforeItsRequestIsConfirmed: a reply proves that its
// request arrived, so a call ends with its reply while the broker's
// confirmation of the request is still missing (RabbitMQ confirms a
// persistent message once it is on disk, which can come after the
// reply). Before, the call waited for that confirmation first: here,
// withheld until the stall check closed the channel, it failed the call
// with an unknown outcome although its reply had come.
func TestCallEndsBeforeItsRequestIsConfirmed(t *testing.T) {
	const stall = 1500 * time.Millisecond
	t.Cleanup(amqpbus.SetConfirmStall(stall, 50*time.Millisecond)) // after the transports closed
	hold := new(atomic.Bool)
	amqpbus.OnConfirm(func(amqp.Confirmation) bool { return !hold.Load() })
	t.Cleanup(func() { amqpbus.OnConfirm(nil) })
	var logs bytes.Buffer
	var mu sync.Mutex
	caller, echo, _ := pairOverProxy(t, testenv.AMQPURL(t), &logs, &mu)

	hold.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	r, err := bus.Call[bustest.Echoed](ctx, caller, echo, bustest.Echo{Text: "unconfirmed", Seq: 1})
	took := time.Since(start)
	require.NoError(t, err, "the reply ends the call, confirmed or not")
	assert.Equal(t, "unconfirmed", r.Text)
	assert.Less(t, took, stall, "the call did not wait for the confirmation")
	t.Logf("a call whose request was never confirmed ended with its reply after %s", took.Round(time.Millisecond))

	hold.Store(false)
	r, err = bus.Call[bustest.Echoed](ctx, caller, echo, bustest.Echo{Text: "confirmed", Seq: 2})
	require.NoError(t, err)
	assert.Equal(t, "confirmed", r.Text)
}
