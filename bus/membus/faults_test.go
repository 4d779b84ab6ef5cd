package membus_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// consume collects the bodies delivered on queue, acknowledging them.
func consume(t *testing.T, tr driver.Transport, queue string) <-chan string {
	t.Helper()
	got := make(chan string, 100)
	c, err := tr.Consume(t.Context(), queue, driver.ConsumeOptions{Prefetch: 10}, func(d driver.Delivery) {
		got <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Cancel() })
	return got
}

func declare(t *testing.T, tr driver.Transport, queue string) {
	t.Helper()
	require.NoError(t, tr.DeclareQueue(t.Context(), queue, driver.QueueOptions{Kind: driver.QueueDurable}))
}

func TestDropLosesTrafficSilently(t *testing.T) {
	net := membus.New()
	a, b := net.Transport("a"), net.Transport("b")
	defer a.Close()
	defer b.Close()
	declare(t, a, "qa")
	declare(t, b, "qb")
	gotB := consume(t, b, "qb")
	gotA := consume(t, a, "qa")

	net.Drop("a", true)
	require.NoError(t, a.Publish(t.Context(), "qb", []byte("lost")), "a dropped node's publish looks fine to it")
	require.NoError(t, b.Publish(t.Context(), "qa", []byte("waits")))
	assert.Never(t, func() bool { return len(gotA)+len(gotB) > 0 }, 50*time.Millisecond, time.Millisecond)
	info, _ := net.Queue("qa")
	assert.Equal(t, 1, info.Ready, "a message for a dropped node waits in its queue")

	net.Drop("a", false)
	assert.Equal(t, "waits", <-gotA)
	require.NoError(t, a.Publish(t.Context(), "qb", []byte("after")))
	assert.Equal(t, "after", <-gotB, "the lost message never arrives; later ones do")
}

func TestPartitionFailsLoudlyAndHeals(t *testing.T) {
	net := membus.New()
	a, b := net.Transport("a"), net.Transport("b")
	defer a.Close()
	defer b.Close()
	declare(t, a, "qa")
	gotA := consume(t, a, "qa")

	net.Partition("a", true)
	err := a.Publish(t.Context(), "qa", []byte("x"))
	assert.ErrorIs(t, err, message.ErrUnavailable)
	assert.ErrorIs(t, a.DeclareQueue(t.Context(), "qz", driver.QueueOptions{Kind: driver.QueueDurable}), message.ErrUnavailable)
	require.NoError(t, b.Publish(t.Context(), "qa", []byte("held")))
	assert.Empty(t, gotA)

	net.Partition("a", false)
	assert.Equal(t, "held", <-gotA)
	require.NoError(t, a.Publish(t.Context(), "qa", []byte("again")))
	assert.Equal(t, "again", <-gotA)
}

func TestKillDeletesTemporaryQueuesKeepsDurable(t *testing.T) {
	net := membus.New()
	a, b := net.Transport("a"), net.Transport("b")
	defer a.Close()
	defer b.Close()
	require.NoError(t, a.DeclareQueue(t.Context(), "durable", driver.QueueOptions{Kind: driver.QueueDurable}))
	require.NoError(t, a.DeclareQueue(t.Context(), "temp", driver.QueueOptions{Kind: driver.QueueTemporary, Fanout: "f"}))
	consume(t, a, "durable")
	net.Kill("a")

	_, ok := net.Queue("temp")
	assert.False(t, ok, "a temporary queue dies with its node")
	info, ok := net.Queue("durable")
	require.True(t, ok, "a durable queue outlives its node")
	assert.Zero(t, info.Consumers, "the killed node's consumers vanish")
	assert.ErrorIs(t, b.Publish(t.Context(), "temp", nil), message.ErrNoRoute)
	require.NoError(t, b.Publish(t.Context(), "durable", []byte("waits")))
	require.NoError(t, b.Broadcast(t.Context(), "f", []byte("nobody")), "a fan-out without queues drops silently")
	assert.ErrorIs(t, a.Publish(t.Context(), "durable", nil), message.ErrUnavailable, "a killed node cannot publish")

	a2 := net.Transport("a") // restart
	defer a2.Close()
	assert.Equal(t, "waits", <-consume(t, a2, "durable"))
}

func TestDeclareConflictsAndClosedTransport(t *testing.T) {
	net := membus.New()
	a := net.Transport("a")
	ctx := context.Background()
	require.NoError(t, a.DeclareQueue(ctx, "q", driver.QueueOptions{Kind: driver.QueueDurable}))
	require.NoError(t, a.DeclareQueue(ctx, "q", driver.QueueOptions{Kind: driver.QueueDurable}), "redeclaring is a no-op")
	assert.ErrorIs(t, a.DeclareQueue(ctx, "q", driver.QueueOptions{Kind: driver.QueueTemporary}), message.ErrBadRequest)
	assert.ErrorIs(t, a.DeclareQueue(ctx, "x", driver.QueueOptions{}), message.ErrBadRequest)
	_, err := a.Consume(ctx, "missing", driver.ConsumeOptions{}, func(driver.Delivery) {})
	assert.ErrorIs(t, err, message.ErrNoRoute)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	assert.ErrorIs(t, a.Publish(ctx, "q", nil), message.ErrClosed)
	qs := net.Queues()
	require.Len(t, qs, 1)
	assert.Equal(t, "q", qs[0].Name)
}

func TestCompetingConsumersRespectPrefetch(t *testing.T) {
	net := membus.New()
	a, b := net.Transport("a"), net.Transport("b")
	defer a.Close()
	defer b.Close()
	declare(t, a, "shared")
	held := make(chan driver.Delivery, 10)
	ca, err := a.Consume(t.Context(), "shared", driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { held <- d })
	require.NoError(t, err)
	defer ca.Cancel()
	gotB := consume(t, b, "shared")
	for _, s := range []string{"1", "2", "3"} {
		require.NoError(t, a.Publish(t.Context(), "shared", []byte(s)))
	}
	d := <-held // a holds one unacknowledged; the rest go to b
	assert.ElementsMatch(t, []string{"1", "2", "3"}, []string{string(d.Body()), <-gotB, <-gotB})
	require.NoError(t, d.Ack())
}
