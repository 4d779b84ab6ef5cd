package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// failingStartStore fails its first clockFails StoreTime and first
// registerFails Register calls as store calls that timed out on a loaded
// database do, and records when each was made.
type failingStartStore struct {
	heartbeat.Store
	mu                        sync.Mutex
	clockFails, registerFails int
	clocks, registers         []time.Time
}

func (s *failingStartStore) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	s.mu.Lock()
	s.clocks = append(s.clocks, time.Now())
	fail := len(s.clocks) <= s.clockFails
	s.mu.Unlock()
	if fail {
		return time.Time{}, 0, fmt.Errorf("read the clock: %w", context.DeadlineExceeded)
	}
	return s.Store.StoreTime(ctx)
}

func (s *failingStartStore) Register(ctx context.Context, node string) (int64, error) {
	s.mu.Lock()
	s.registers = append(s.registers, time.Now())
	fail := len(s.registers) <= s.registerFails
	s.mu.Unlock()
	if fail {
		return 0, fmt.Errorf("register %s: %w", node, context.DeadlineExceeded)
	}
	return s.Store.Register(ctx, node)
}

// startOn starts a node on store and returns it and Start's error.
func startOn(t *testing.T, store *failingStartStore, id string) (*service.Node, error) {
	t.Helper()
	net := membus.New()
	store.Store = memstore.New(memstore.Config{}).For(id)
	n, err := service.NewNode(service.Config{Node: id, Prefix: "join", Transport: net.Transport(id), OwnTransport: true, Store: store,
		Registry: registry(), Services: []service.Service{newRecorder(newJournal())}, Heartbeat: heartbeat.TestConfig(), NoRejoin: true})
	require.NoError(t, err)
	return n, n.Start(t.Context())
}

// gaps returns the time between each call and the next.
func gaps(calls []time.Time) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(calls); i++ {
		d = append(d, calls[i].Sub(calls[i-1]))
	}
	return d
}

// TestStartRetriesWhenTheStoreFails: a start whose reading of the
// store's clock, and then whose registration in the membership, fail
// (timed out on a loaded database) tries each again after one beat
// interval, then two, and serves once they succeed.
func TestStartRetriesWhenTheStoreFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		i := heartbeat.TestConfig().Interval
		store := &failingStartStore{clockFails: 2, registerFails: 2}
		n, err := startOn(t, store, message.NewUUID())
		require.NoError(t, err, "the third attempt of each succeeds")
		defer n.Close()
		assert.Equal(t, service.StateServing, n.State())
		store.mu.Lock()
		defer store.mu.Unlock()
		require.GreaterOrEqual(t, len(store.clocks), 3)
		assert.Equal(t, []time.Duration{i, 2 * i}, gaps(store.clocks[:3]), "the clock read again after one interval, then two")
		assert.Equal(t, []time.Duration{i, 2 * i}, gaps(store.registers), "the registration tried again after one interval, then two")
	})
}

// TestStartGivesUpAfterItsAttempts: a store that fails every
// registration fails the start after five attempts, with the store's
// error, instead of retrying for ever.
func TestStartGivesUpAfterItsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		store := &failingStartStore{registerFails: 1000}
		_, err := startOn(t, store, message.NewUUID())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "join the membership")
		store.mu.Lock()
		defer store.mu.Unlock()
		assert.Equal(t, []time.Duration{hb.Interval, 2 * hb.Interval, min(4*hb.Interval, hb.EvictAfter), min(8*hb.Interval, hb.EvictAfter)},
			gaps(store.registers), "five attempts, the waits doubling up to EvictAfter")
	})
}
