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

// slowRegisterStore fails the first fails Register calls as a store call
// that timed out on a loaded database does.
type slowRegisterStore struct {
	heartbeat.Store
	mu    sync.Mutex
	fails int
	calls []time.Time
}

func (s *slowRegisterStore) Register(ctx context.Context, node string) (int64, error) {
	s.mu.Lock()
	s.calls = append(s.calls, time.Now())
	fail := len(s.calls) <= s.fails
	s.mu.Unlock()
	if fail {
		return 0, fmt.Errorf("register %s: %w", node, context.DeadlineExceeded)
	}
	return s.Store.Register(ctx, node)
}

func (s *slowRegisterStore) attempts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls...)
}

// startWithFailingRegister starts a node whose store fails its first
// fails registrations, and returns it, the attempts' times and Start's
// error.
func startWithFailingRegister(t *testing.T, fails int) (*service.Node, []time.Time, error) {
	t.Helper()
	net := membus.New()
	id := message.NewUUID()
	store := &slowRegisterStore{Store: memstore.New(memstore.Config{}).For(id), fails: fails}
	n, err := service.NewNode(service.Config{Node: id, Prefix: "join", Transport: net.Transport(id), OwnTransport: true, Store: store,
		Registry: registry(), Services: []service.Service{newRecorder(newJournal())}, Heartbeat: heartbeat.TestConfig(), NoRejoin: true})
	require.NoError(t, err)
	err = n.Start(t.Context())
	return n, store.attempts(), err
}

// TestJoinRetriedWhenTheStoreFails: a start whose registration in the
// membership store fails (timed out on a loaded database) tries again
// after one beat interval, then two, and serves once one succeeds.
func TestJoinRetriedWhenTheStoreFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		n, calls, err := startWithFailingRegister(t, 2)
		require.NoError(t, err, "the third registration succeeds")
		defer n.Close()
		require.Len(t, calls, 3)
		assert.Equal(t, hb.Interval, calls[1].Sub(calls[0]), "the first retry after one interval")
		assert.Equal(t, 2*hb.Interval, calls[2].Sub(calls[1]), "the second after two")
		assert.Equal(t, service.StateServing, n.State())
	})
}

// TestJoinGivesUpAfterItsAttempts: a store that fails every
// registration fails the start after five attempts, with the store's
// error, instead of retrying for ever.
func TestJoinGivesUpAfterItsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		start := time.Now()
		_, calls, err := startWithFailingRegister(t, 1000)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "join the membership")
		assert.Len(t, calls, 5)
		want := hb.Interval + 2*hb.Interval + min(4*hb.Interval, hb.EvictAfter) + min(8*hb.Interval, hb.EvictAfter)
		assert.Equal(t, want, time.Since(start), "four waits, doubling up to EvictAfter")
	})
}
