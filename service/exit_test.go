package service_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// frozenBroker is a transport whose broker froze once frozen is set:
// every operation waits until its context ends, and stopping a consumer
// waits 2 s (amqpbus's bound on waiting for the broker) before it stops.
type frozenBroker struct {
	driver.Transport
	frozen atomic.Bool
}

func (f *frozenBroker) hang(ctx context.Context, what string) error {
	if !f.frozen.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("%s: the broker did not answer: %w", what, message.ErrUnavailable)
}

func (f *frozenBroker) Publish(ctx context.Context, queue string, data []byte) error {
	if err := f.hang(ctx, "publish"); err != nil {
		return err
	}
	return f.Transport.Publish(ctx, queue, data)
}

func (f *frozenBroker) PublishVia(ctx context.Context, entry, queue string, data []byte) error {
	if err := f.hang(ctx, "publish"); err != nil {
		return err
	}
	return f.Transport.PublishVia(ctx, entry, queue, data)
}

func (f *frozenBroker) Broadcast(ctx context.Context, fanout string, data []byte) error {
	if err := f.hang(ctx, "broadcast"); err != nil {
		return err
	}
	return f.Transport.Broadcast(ctx, fanout, data)
}

func (f *frozenBroker) DeleteQueue(ctx context.Context, name string) error {
	if err := f.hang(ctx, "delete queue"); err != nil {
		return err
	}
	return f.Transport.DeleteQueue(ctx, name)
}

func (f *frozenBroker) DeleteQueueIfIdle(ctx context.Context, name string) error {
	if err := f.hang(ctx, "delete queue"); err != nil {
		return err
	}
	return f.Transport.DeleteQueueIfIdle(ctx, name)
}

func (f *frozenBroker) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, handle func(driver.Delivery)) (driver.Consumer, error) {
	if err := f.hang(ctx, "consume"); err != nil {
		return nil, err
	}
	c, err := f.Transport.Consume(ctx, queue, opts, handle)
	if err != nil {
		return nil, err
	}
	return &slowStop{Consumer: c, f: f}, nil
}

// slowStop is a consumer of a frozenBroker.
type slowStop struct {
	driver.Consumer
	f *frozenBroker
}

func (s *slowStop) Cancel() error {
	if s.f.frozen.Load() {
		time.Sleep(2 * time.Second)
	}
	return s.Consumer.Cancel()
}

func (s *slowStop) Abort() error {
	if s.f.frozen.Load() {
		time.Sleep(2 * time.Second)
	}
	return s.Consumer.Abort()
}

// stopUntilDone is a service whose Stop takes all the time it is given.
type stopUntilDone struct {
	*recorder
	given atomic.Int64 // Stop's budget, ns
}

func (s *stopUntilDone) Stop(ctx context.Context) error {
	d, _ := ctx.Deadline()
	s.given.Store(int64(time.Until(d)))
	<-ctx.Done()
	return ctx.Err()
}

// TestExitFitsLeaveTimeout: a node whose broker froze (every publish,
// deletion and consume hangs; stopping each consumer waits 2 s) and
// whose service's Stop takes all the time it gets exits within
// LeaveTimeout plus a tenth of it (Stop's floor), well inside a
// supervisor's 30 s grace; it measures 10 s. Before the exit had one
// deadline it took 35 s: the leave's 10 s, 2 s for each consumer in
// turn, 5 s for deleting the bus's queues and 10 s more for Stop.
func TestExitFitsLeaveTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := membus.New()
		store := memstore.New(memstore.Config{})
		const leave = 10 * time.Second
		start := func(id string, tr driver.Transport, svc service.Service) *service.Node {
			n, err := service.NewNode(service.Config{Node: id, Prefix: "exit", Transport: tr, OwnTransport: true, Store: store.For(id),
				Registry: registry(), Services: []service.Service{svc}, Heartbeat: heartbeat.TestConfig(), NoRejoin: true,
				LeaveTimeout: leave})
			require.NoError(t, err)
			require.NoError(t, n.Start(t.Context()))
			return n
		}
		peerID := message.NewUUID()
		peer := start(peerID, net.Transport(peerID), newRecorder(newJournal()))
		defer peer.Close()
		id := message.NewUUID()
		tr := &frozenBroker{Transport: net.Transport(id)}
		svc := &stopUntilDone{recorder: newRecorder(newJournal())}
		n := start(id, tr, svc)
		synctest.Wait()

		tr.frozen.Store(true)
		began := time.Now()
		_ = n.Close()
		took := time.Since(began)
		t.Logf("exit took %s; Stop was given %s", took, time.Duration(svc.given.Load()))
		assert.LessOrEqual(t, took, leave+leave/10, "the exit overran LeaveTimeout")
		assert.GreaterOrEqual(t, time.Duration(svc.given.Load()), leave/10, "Stop got less than its floor")
	})
}
