package bus_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// markerEater loses this node's drain markers published into queue, as a
// transport whose traffic is silently lost does, and counts the
// deliveries of queue's messages to this node.
type markerEater struct {
	driver.Transport
	queue      string
	deliveries atomic.Int64
}

func (m *markerEater) Publish(ctx context.Context, queue string, data []byte) error {
	if queue == m.queue && bytes.Contains(data, []byte("cloudbus-drain")) {
		return nil
	}
	return m.Transport.Publish(ctx, queue, data)
}

func (m *markerEater) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, handle func(driver.Delivery)) (driver.Consumer, error) {
	return m.Transport.Consume(ctx, queue, opts, func(d driver.Delivery) {
		if queue == m.queue {
			m.deliveries.Add(1)
		}
		handle(d)
	})
}

// TestRerouteDoesNotSpinOnAnotherDrainersMarker: a queue being emptied
// holds another drainer's end marker, and this drainer's own marker is
// lost. The round waits its markerWait (2 s) for its own, giving the
// other's back every 50 ms meanwhile, not in a hot loop: before, the
// marker went round tens of thousands of times a second, and in a
// testing/synctest bubble (the chaos kit's) virtual time stood still and
// the round never ended.
func TestRerouteDoesNotSpinOnAnotherDrainersMarker(t *testing.T) {
	net := membus.New()
	raw := net.Transport("drainer")
	t.Cleanup(func() { _ = raw.Close() })
	tr := &markerEater{Transport: raw, queue: "rr.message.svc.gone"}
	b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Registry: registry(), Prefix: "rr"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	require.NoError(t, raw.DeclareQueue(t.Context(), tr.queue, driver.QueueOptions{Kind: driver.QueueDurable}))
	foreign, err := wire.EncodeEnvelope(&wire.Envelope{
		ID: message.NewUUID(), Kind: wire.KindSend, Type: message.TypeEmpty, ServiceID: "reroute",
		Source: "another-node", Headers: map[string]string{"cloudbus-drain": "another-token"},
		Timeout: 30 * time.Second, Deadline: time.Now().Add(29 * time.Second).UnixNano(),
	}, 1<<20)
	require.NoError(t, err)
	require.NoError(t, raw.Publish(t.Context(), tr.queue, foreign))

	start := time.Now()
	stats, err := busx.Of(b).Reroute(t.Context(), tr.queue, func(env *wire.Envelope) error { return nil }, true)
	took := time.Since(start)
	require.NoError(t, err)
	t.Logf("the round ended after %s; the other drainer's marker was delivered %d times", took.Round(time.Millisecond), tr.deliveries.Load())
	assert.Equal(t, 0, stats.Moved, "the other drainer's marker is not moved")
	assert.Less(t, tr.deliveries.Load(), int64(100), "given back every 50 ms for 2 s: about 40 deliveries")
	assert.Less(t, took, 10*time.Second)
}
