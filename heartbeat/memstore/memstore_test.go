package memstore_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/heartbeat/storetest"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clock is a manual clock for the store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestConformance runs the suite on a store whose clock the test moves.
func TestConformance(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) heartbeat.Store { return memstore.New(memstore.Config{Now: c.Now}) },
		Advance: func(t *testing.T, d time.Duration) { c.Advance(d) },
		EndSession: func(t *testing.T, s heartbeat.Store, node string, _ heartbeat.SessionHold) {
			s.(*memstore.Store).EndSession(node)
		},
	})
}

// TestConformanceRealClock runs the suite as a database would: on real
// time, so the suite's polling path is exercised too (a few tens of
// milliseconds).
func TestConformanceRealClock(t *testing.T) {
	shared := memstore.New(memstore.Config{})
	storetest.Run(t, storetest.Harness{
		// One store for every scenario, as one table shared by parallel
		// test processes would be.
		New: func(t *testing.T) heartbeat.Store { return shared },
		EndSession: func(t *testing.T, _ heartbeat.Store, node string, _ heartbeat.SessionHold) {
			shared.EndSession(node)
		},
	})
}

// TestConformanceThroughView runs the suite through a node's view with no
// faults set: a view behaves as the store.
func TestConformanceThroughView(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	stores := map[heartbeat.Store]*memstore.Store{}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) heartbeat.Store {
			s := memstore.New(memstore.Config{Now: c.Now})
			v := s.For(message.NewUUID())
			stores[v] = s
			return v
		},
		Advance: func(t *testing.T, d time.Duration) { c.Advance(d) },
		EndSession: func(t *testing.T, v heartbeat.Store, node string, _ heartbeat.SessionHold) {
			stores[v].EndSession(node)
		},
	})
}

func TestEpochsIncrease(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	s := memstore.New(memstore.Config{Now: c.Now})
	ctx := t.Context()
	e1, err := s.Register(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, c.Now().UnixMicro(), e1, "the first epoch is the store's time in microseconds")
	assert.True(t, c.Now().Equal(heartbeat.Record{Epoch: e1}.RegisteredAt()), "RegisteredAt reads it back")
	e2, err := s.Register(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, e1+1, e2, "with the clock standing still, epochs still increase")
	c.Advance(-time.Hour)
	e3, err := s.Register(ctx, "a")
	require.NoError(t, err)
	assert.Greater(t, e3, e2, "epochs increase even when the store's clock goes back")
	recs, err := s.List(ctx)
	require.NoError(t, err)
	for _, r := range recs {
		assert.GreaterOrEqual(t, r.Age, time.Duration(0), "an age is never negative, even when the clock went back")
	}
	_, err = s.Register(ctx, "")
	assert.Error(t, err, "an empty node is refused")
}

func TestUnreachable(t *testing.T) {
	s := memstore.New(memstore.Config{})
	ctx := t.Context()
	a, b := s.For("a"), s.For("b")
	ea, err := a.Register(ctx, "a")
	require.NoError(t, err)
	eb, err := b.Register(ctx, "b")
	require.NoError(t, err)

	s.SetUnreachable("a", true)
	_, err = a.Register(ctx, "a")
	assert.ErrorIs(t, err, memstore.ErrUnreachable)
	assert.ErrorIs(t, a.Beat(ctx, "a", ea), memstore.ErrUnreachable)
	_, err = a.List(ctx)
	assert.ErrorIs(t, err, memstore.ErrUnreachable)
	ok, err := a.Evict(ctx, "b", eb, 0)
	assert.ErrorIs(t, err, memstore.ErrUnreachable)
	assert.False(t, ok)
	assert.ErrorIs(t, a.Deregister(ctx, "a", ea), memstore.ErrUnreachable)
	assert.ErrorIs(t, s.For("a").Beat(ctx, "a", ea), memstore.ErrUnreachable, "views of one node share its faults")

	// The other node and the store itself are unaffected, and nothing
	// changed: a's record is still there with its first epoch.
	require.NoError(t, b.Beat(ctx, "b", eb))
	recs, err := b.List(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a", "b"}, nodes(recs))
	assert.Equal(t, ea, find(recs, "a").Epoch)
	require.NoError(t, s.Beat(ctx, "a", ea), "the Store itself has no faults")

	s.SetUnreachable("a", false)
	require.NoError(t, a.Beat(ctx, "a", ea), "a reconnected node reaches the store again")
}

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Config{})
		v := s.For("a")
		ctx := t.Context()
		epoch, err := v.Register(ctx, "a")
		require.NoError(t, err)

		s.SetLatency("a", 100*time.Millisecond)
		start := time.Now()
		require.NoError(t, v.Beat(ctx, "a", epoch))
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "a call takes the latency set")

		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		start = time.Now()
		err = v.Beat(short, "a", epoch)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "a call whose ctx ends during the delay returns ctx's error")
		assert.Equal(t, 30*time.Millisecond, time.Since(start), "and returns when ctx ends")
		recs, err := s.List(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), find(recs, "a").Seq, "the timed-out Beat changed nothing")

		s.SetLatency("a", 0)
		start = time.Now()
		require.NoError(t, v.Beat(ctx, "a", epoch))
		assert.Zero(t, time.Since(start))
	})
}

func nodes(recs []heartbeat.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Node)
	}
	return out
}

func find(recs []heartbeat.Record, node string) heartbeat.Record {
	for _, r := range recs {
		if r.Node == node {
			return r
		}
	}
	return heartbeat.Record{}
}
