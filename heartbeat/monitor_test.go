package heartbeat_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestNewMonitorValidates(t *testing.T) {
	_, err := heartbeat.NewMonitor(nil, "not-a-uuid", heartbeat.Config{Interval: time.Second, EvictAfter: time.Second}, nil, nil)
	require.Error(t, err)
	for _, want := range []string{"nil Store", "not a canonical UUID", "at least twice Interval"} {
		assert.Contains(t, err.Error(), want, "every problem is reported at once")
	}
	m, err := heartbeat.NewMonitor(memstore.New(memstore.Config{}), message.NewUUID(), heartbeat.Config{}, nil, nil)
	require.NoError(t, err, "the zero Config takes the defaults")
	assert.Zero(t, m.Epoch())
	assert.Empty(t, m.Members())
	assert.True(t, m.LastBeat().IsZero())
}

func TestConfigValidate(t *testing.T) {
	assert.NoError(t, heartbeat.Config{}.Validate())
	assert.NoError(t, heartbeat.DefaultConfig().Validate())
	assert.NoError(t, heartbeat.TestConfig().Validate())
	assert.Error(t, heartbeat.Config{Interval: -time.Second}.Validate())
	assert.Error(t, heartbeat.Config{Interval: time.Second, EvictAfter: 1500 * time.Millisecond}.Validate())
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[heartbeat.EventKind]string{
		heartbeat.Joined: "Joined", heartbeat.Left: "Left", heartbeat.Evicted: "Evicted",
		heartbeat.SelfEvicted: "SelfEvicted", 0: "EventKind(0)", 200: "EventKind(200)",
	} {
		assert.Equal(t, want, k.String())
	}
}

func TestJoinReturnsMembersAndIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig()
		c := newCluster(t, cfg, memstore.Config{})
		a := c.start("", -1)
		settle(10 * cfg.Interval)
		mark := time.Now()

		b := &node{id: message.NewUUID(), done: make(chan error, 1)}
		m, err := heartbeat.NewMonitor(c.s.For(b.id), b.id, cfg, b, nil)
		require.NoError(t, err)
		epoch, members, err := m.Join(t.Context())
		require.NoError(t, err)
		assert.Equal(t, epoch, m.Epoch())
		assert.ElementsMatch(t, []string{a.id, b.id}, nodesOf(members), "Join returns every live record, its own included")
		assert.Equal(t, time.Now(), m.LastBeat(), "the registration counts as a beat")
		_, _, err = m.Join(t.Context())
		assert.Error(t, err, "Join succeeds once")

		settle(cfg.Interval)
		evs := a.events(mark)
		require.Len(t, evs, 1, "a peer reports the join within one Interval")
		assert.Equal(t, heartbeat.Joined, evs[0].Kind)
		assert.Equal(t, b.id, evs[0].Record.Node)
		assert.Equal(t, epoch, evs[0].Record.Epoch)
		assert.Contains(t, evs[0].members, b.id, "Members seen by the listener include the joined node")
	})
}

func TestLeaveIsReportedAsLeft(t *testing.T) {
	orders := map[string]func(t *testing.T, n *node){
		"leave while running": func(t *testing.T, n *node) {
			require.NoError(t, n.m.Leave(t.Context()))
			returned, err := n.returned()
			require.True(t, returned, "Leave waits for Run to return")
			require.NoError(t, err, "Run returns nil after Leave")
		},
		"cancel then leave": func(t *testing.T, n *node) {
			n.cancel()
			synctest.Wait()
			returned, err := n.returned()
			require.True(t, returned)
			require.NoError(t, err)
			require.NoError(t, n.m.Leave(t.Context()))
		},
	}
	for name, stop := range orders {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := heartbeat.TestConfig()
				c := newCluster(t, cfg, memstore.Config{})
				a, b := c.start("", -1), c.start("", -1)
				settle(10 * cfg.Interval)
				mark := time.Now()
				stop(t, b)
				require.NoError(t, b.m.Leave(t.Context()), "Leave is idempotent")
				settle(cfg.Interval)
				assert.Equal(t, []heartbeat.EventKind{heartbeat.Left}, kinds(a.events(mark, b.id)), "a goodbye is reported as Left within one Interval")
				settle(3 * cfg.EvictAfter)
				assert.Len(t, a.events(mark), 1, "nothing else happens")
				assert.Empty(t, b.events(mark), "a node that left reports nothing, SelfEvicted least of all")
				assert.Equal(t, []string{a.id}, nodesOf(a.m.Members()))
			})
		})
	}
}

func TestLeaveBeforeRunAndBeforeJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Config{})
		id := message.NewUUID()
		m, err := heartbeat.NewMonitor(s, id, heartbeat.TestConfig(), nil, nil)
		require.NoError(t, err)
		require.NoError(t, m.Leave(t.Context()), "Leave before Join only closes the monitor")
		_, _, err = m.Join(t.Context())
		require.ErrorIs(t, err, heartbeat.ErrClosed)

		m, err = heartbeat.NewMonitor(s, id, heartbeat.TestConfig(), nil, nil)
		require.NoError(t, err)
		_, _, err = m.Join(t.Context())
		require.NoError(t, err)
		require.NoError(t, m.Leave(t.Context()))
		recs, err := s.List(t.Context())
		require.NoError(t, err)
		assert.Empty(t, recs, "Leave deregisters")
		assert.NoError(t, m.Run(t.Context()), "Run after Leave returns nil at once")
	})
}

func TestRunMisuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Config{})
		m, err := heartbeat.NewMonitor(s, message.NewUUID(), heartbeat.TestConfig(), nil, nil)
		require.NoError(t, err)
		assert.ErrorContains(t, m.Run(t.Context()), "call Join first")
		_, _, err = m.Join(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		assert.ErrorContains(t, m.Run(t.Context()), "Run already called")
		cancel()
		assert.NoError(t, <-done, "Run returns nil when its context ends")
	})
}

func TestLeaveFailureCanBeRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Config{})
		id := message.NewUUID()
		m, err := heartbeat.NewMonitor(s.For(id), id, heartbeat.TestConfig(), nil, nil)
		require.NoError(t, err)
		_, _, err = m.Join(t.Context())
		require.NoError(t, err)
		s.SetUnreachable(id, true)
		err = m.Leave(t.Context())
		require.ErrorIs(t, err, memstore.ErrUnreachable)
		assert.ErrorContains(t, err, "heartbeat: leave: deregister")
		s.SetUnreachable(id, false)
		require.NoError(t, m.Leave(t.Context()), "a failed Leave can be retried")
		recs, err := s.List(t.Context())
		require.NoError(t, err)
		assert.Empty(t, recs)
	})
}

func TestReRegistrationIsLeftThenJoined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig()
		c := newCluster(t, cfg, memstore.Config{})
		a, b := c.start("", -1), c.start("", -1)
		settle(10 * cfg.Interval)
		mark := time.Now()
		oldEpoch := b.m.Epoch()

		// A new life of node b registers while the old one still runs.
		b2 := c.start(b.id, -1)
		settle(cfg.Interval)
		evs := a.events(mark, b.id)
		require.Len(t, evs, 2, "a new epoch is reported as Left then Joined")
		assert.Equal(t, heartbeat.Left, evs[0].Kind)
		assert.Equal(t, oldEpoch, evs[0].Record.Epoch)
		assert.Equal(t, heartbeat.Joined, evs[1].Kind)
		assert.Equal(t, b2.m.Epoch(), evs[1].Record.Epoch)
		assert.Equal(t, evs[0].at, evs[1].at, "in the same round")

		returned, err := b.returned()
		require.True(t, returned, "the old life's Run returns at its next beat")
		require.ErrorIs(t, err, heartbeat.ErrEvicted)
		assert.Equal(t, []heartbeat.EventKind{heartbeat.SelfEvicted}, kinds(b.events(mark)))
		assert.Equal(t, oldEpoch, b.events(mark)[0].Record.Epoch)
		assert.Empty(t, b2.events(mark, b2.id), "a monitor reports nothing about its own record")
	})
}

// flakyBeat fails Beat and BeatBus while fail is set; other calls pass
// through.
type flakyBeat struct {
	heartbeat.Store
	fail atomic.Bool
}

func (f *flakyBeat) Beat(ctx context.Context, node string, epoch int64) error {
	if f.fail.Load() {
		return errors.New("flaky: beat failed")
	}
	return f.Store.Beat(ctx, node, epoch)
}

func (f *flakyBeat) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	if f.fail.Load() {
		return errors.New("flaky: beat failed")
	}
	return f.Store.BeatBus(ctx, node, epoch, busUp)
}

// TestNoEvictionWithoutOwnBeats: a monitor whose own beats fail evicts
// nobody, even a record it sees stale; after its beats work again it
// evicts only in its third successful round.
func TestNoEvictionWithoutOwnBeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig()
		H, E := cfg.Interval, cfg.EvictAfter
		c := newCluster(t, cfg, memstore.Config{})
		dead := c.start("", -1)
		id := message.NewUUID()
		f := &flakyBeat{Store: c.s.For(id)}
		f.fail.Store(true)
		w := c.run(&node{id: id, done: make(chan error, 1)}, f, -1)
		settle(H)
		dead.cancel() // crashes: no goodbye
		settle(3 * E)
		assert.Empty(t, ofKind(w.events(time.Time{}), heartbeat.Evicted), "a monitor whose beats fail must evict nobody")
		assert.Contains(t, nodesOf(w.m.Members()), dead.id, "a stale record not yet evicted is a member")

		back := time.Now()
		f.fail.Store(false)
		settle(3 * H)
		evs := ofKind(w.events(back), heartbeat.Evicted)
		require.Len(t, evs, 1, "once its beats work, the monitor evicts the dead node")
		assert.Equal(t, dead.id, evs[0].Record.Node)
		assert.GreaterOrEqual(t, evs[0].at.Sub(back), 2*H, "but only in its third successful round")
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStoreErrorsAreLoggedAndTheLoopGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig()
		s := memstore.New(memstore.Config{})
		id := message.NewUUID()
		var buf syncBuffer
		m, err := heartbeat.NewMonitor(s.For(id), id, cfg, nil, slog.New(slog.NewTextHandler(&buf, nil)))
		require.NoError(t, err)
		_, _, err = m.Join(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		s.SetUnreachable(id, true)
		settle(3 * cfg.Interval)
		s.SetUnreachable(id, false)
		settle(3 * cfg.Interval)
		assert.WithinDuration(t, time.Now(), m.LastBeat(), cfg.Interval, "beats resume after store errors")
		cancel()
		require.NoError(t, <-done)
		out := buf.String()
		assert.Contains(t, out, "beat failed")
		assert.Contains(t, out, "list failed")
		assert.Contains(t, out, "node="+id, "logs carry the node attribute")
	})
}
