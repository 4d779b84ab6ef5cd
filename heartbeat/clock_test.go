package heartbeat_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestClockSyncEstimate(t *testing.T) {
	local := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	now := local
	c := heartbeat.NewClockSync(func() time.Time { return now })
	_, _, ok := c.Now()
	assert.False(t, ok, "no sample: no cluster time")

	// The reference runs 3 s ahead; a 10 ms round trip bounds the error
	// by 5 ms plus the reference's own 1 ms.
	remote := local.Add(3*time.Second + 5*time.Millisecond)
	c.Sample(local, local.Add(10*time.Millisecond), remote, time.Millisecond)
	now = local.Add(10 * time.Millisecond)
	got, bound, ok := c.Now()
	require.True(t, ok)
	assert.Equal(t, now.Add(3*time.Second), got)
	assert.Equal(t, 6*time.Millisecond, bound)

	// A slow round trip later (a paused process, a busy database) does
	// not replace the better estimate; a faster one does.
	c.Sample(now, now.Add(2*time.Second), now.Add(3*time.Second+1900*time.Millisecond), 0)
	now = now.Add(2 * time.Second)
	_, bound, _ = c.Now()
	assert.Less(t, bound, 10*time.Millisecond, "the fast sample still wins, its bound grown by drift")
	assert.Greater(t, bound, 6*time.Millisecond, "an estimate's bound grows with its age")
	c.Sample(now, now.Add(2*time.Millisecond), now.Add(3*time.Second+time.Millisecond), 0)
	_, bound, _ = c.Now()
	assert.Equal(t, time.Millisecond, bound)

	// A sample outlives minutes of failed measurements, its bound grown
	// by drift; then it expires.
	now = now.Add(5 * time.Minute)
	_, bound, ok = c.Now()
	require.True(t, ok, "five minutes without a new sample: the last one still tells the cluster time")
	assert.InDelta(t, time.Millisecond+60*time.Millisecond, bound, float64(time.Microsecond), "its bound grown by 0.2 ms a second")
	now = now.Add(6 * time.Minute)
	_, _, ok = c.Now()
	assert.False(t, ok, "after ten minutes without samples the cluster time is unknown")
	c.Sample(now.Add(time.Second), now, now, 0)
	_, _, ok = c.Now()
	assert.False(t, ok, "a sample received before it was sent is ignored")
}

// TestMonitorMeasuresTheStoreClock: a node whose clock is an hour off
// measures the store's clock at Join and every round, within the round
// trip.
func TestMonitorMeasuresTheStoreClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Config{})
		cfg := heartbeat.TestConfig()
		cfg.Now = func() time.Time { return time.Now().Add(time.Hour) }
		id := message.NewUUID()
		view := store.For(id)
		store.SetLatency(id, 4*time.Millisecond)
		m, err := heartbeat.NewMonitor(view, id, cfg, nil, nil)
		require.NoError(t, err)
		_, _, ok := m.ClusterTime()
		assert.False(t, ok)
		_, _, err = m.Join(t.Context())
		require.NoError(t, err)
		now, bound, ok := m.ClusterTime()
		require.True(t, ok)
		assert.LessOrEqual(t, bound, 8*time.Millisecond, "half a round trip of the simulated latency")
		assert.InDelta(t, float64(time.Now().UnixNano()), float64(now.UnixNano()), float64(bound), "the node's hour of skew is measured away")

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(5 * cfg.Interval)
		now, bound, ok = m.ClusterTime()
		require.True(t, ok)
		assert.InDelta(t, float64(time.Now().UnixNano()), float64(now.UnixNano()), float64(bound))
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, m.Leave(t.Context()))
	})
}

// TestSyncClockBeforeJoin: SyncClock measures the cluster time without
// joining, once; it fails while the store is unreachable.
func TestSyncClockBeforeJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Config{})
		cfg := heartbeat.TestConfig()
		cfg.Now = func() time.Time { return time.Now().Add(-time.Hour) }
		id := message.NewUUID()
		store.SetUnreachable(id, true)
		m, err := heartbeat.NewMonitor(store.For(id), id, cfg, nil, nil)
		require.NoError(t, err)
		err = m.SyncClock(t.Context())
		require.Error(t, err, "the store is unreachable")
		assert.Contains(t, err.Error(), id)
		_, _, ok := m.ClusterTime()
		assert.False(t, ok)

		store.SetUnreachable(id, false)
		require.NoError(t, m.SyncClock(t.Context()))
		now, bound, ok := m.ClusterTime()
		require.True(t, ok, "known before Join")
		assert.InDelta(t, float64(time.Now().UnixNano()), float64(now.UnixNano()), float64(bound+time.Millisecond), "the hour of skew is measured away")
		recs, err := store.List(t.Context())
		require.NoError(t, err)
		assert.Empty(t, recs, "SyncClock registers nothing")
		store.SetUnreachable(id, true)
		assert.NoError(t, m.SyncClock(t.Context()), "known already: no round trip")
	})
}

// TestClockSyncFollowsAStep: a sample that disagrees with the estimate
// by more than both bounds is held aside; confirmed by the next one, a
// clock stepped and the estimate follows it, even if an older sample had
// the smaller bound; contradicted, it was a bad reading and is
// forgotten.
func TestClockSyncFollowsAStep(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	c := heartbeat.NewClockSync(func() time.Time { return now })
	sample := func(offset, rtt time.Duration) {
		c.Sample(now, now.Add(rtt), now.Add(rtt/2+offset), 0)
		now = now.Add(rtt)
	}
	sample(0, 2*time.Millisecond) // offset 0, bound 1 ms
	now = now.Add(time.Second)

	// A slower round trip that agrees within the bounds leaves the
	// better sample in charge.
	sample(5*time.Millisecond, 20*time.Millisecond) // offset +5 ms, bound 10 ms
	off, bound, ok := c.Offset()
	require.True(t, ok)
	assert.Equal(t, time.Duration(0), off)
	assert.Less(t, bound, 2*time.Millisecond)

	// One reading a minute off (a remote that misread its own clock),
	// then readings that agree with the estimate: the odd one is
	// forgotten.
	now = now.Add(time.Second)
	sample(time.Minute, 2*time.Millisecond)
	off, _, _ = c.Offset()
	assert.Equal(t, time.Duration(0), off, "one odd reading does not move the estimate")
	assert.True(t, c.Doubting(), "held aside: sample again soon")
	now = now.Add(time.Second)
	sample(0, 20*time.Millisecond)
	assert.False(t, c.Doubting(), "contradicted: forgotten")
	now = now.Add(time.Second)
	sample(time.Minute, 2*time.Millisecond) // odd again, but not confirmed by the one before
	off, _, _ = c.Offset()
	assert.Equal(t, time.Duration(0), off, "odd readings apart do not confirm each other")

	// The local clock steps 1 min back: two readings in a row say the
	// reference is 1 min ahead, well past the bounds.
	now = now.Add(time.Second)
	sample(time.Minute, 20*time.Millisecond)
	off, bound, ok = c.Offset()
	require.True(t, ok)
	assert.Equal(t, time.Minute, off, "the step confirmed: the estimate follows it")
	assert.False(t, c.Doubting())

	// Samples older than ten minutes are no estimate: a sample an hour
	// off after eleven minutes without any is taken at once.
	now = now.Add(11 * time.Minute)
	sample(time.Hour, 2*time.Millisecond)
	off, _, ok = c.Offset()
	require.True(t, ok)
	assert.Equal(t, time.Hour, off)
	assert.False(t, c.Doubting())
	assert.Less(t, bound, 2*time.Millisecond, "the better of the two readings of the step")
}
