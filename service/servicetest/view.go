package servicetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// ErrUnreachable is matched by the error of every heartbeat store call a
// node of a cluster on SQL makes while the test cuts it off from the
// store ([Cluster.Kill], [Cluster.StopHeartbeat]): the call fails at once
// and changes nothing. In memory the same calls fail with
// memstore.ErrUnreachable. Retrying fails until [Cluster.ResumeHeartbeat].
var ErrUnreachable = errors.New("servicetest: heartbeat store cut off from this node by the test")

// storeView is one node's view of a SQL heartbeat store: every call goes
// to the store unless the test cut the node off, in which case it fails
// at once with ErrUnreachable. It is safe for concurrent use.
type storeView struct {
	s    *sqlstore.Store
	node string
	cut  atomic.Bool

	mu    sync.Mutex
	holds []*viewHold // session locks held through the view
}

var _ heartbeat.Store = (*storeView)(nil)

// setCut cuts the view off the store (on) or reconnects it (off).
func (v *storeView) setCut(on bool) { v.cut.Store(on) }

// reach fails a call named op if the view is cut off.
func (v *storeView) reach(op string) error {
	if v.cut.Load() {
		return fmt.Errorf("servicetest: %s from node %s on %s: %w", op, v.node, v.s.MaskedURL(), ErrUnreachable)
	}
	return nil
}

// Register implements [heartbeat.Store.Register], unless cut off.
func (v *storeView) Register(ctx context.Context, node string) (int64, error) {
	if err := v.reach("register"); err != nil {
		return 0, err
	}
	return v.s.Register(ctx, node)
}

// Beat implements [heartbeat.Store.Beat], unless cut off.
func (v *storeView) Beat(ctx context.Context, node string, epoch int64) error {
	if err := v.reach("beat"); err != nil {
		return err
	}
	return v.s.Beat(ctx, node, epoch)
}

// BeatBus implements [heartbeat.Store.BeatBus], unless cut off.
func (v *storeView) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	if err := v.reach("beat"); err != nil {
		return err
	}
	return v.s.BeatBus(ctx, node, epoch, busUp)
}

// List implements [heartbeat.Store.List], unless cut off.
func (v *storeView) List(ctx context.Context) ([]heartbeat.Record, error) {
	if err := v.reach("list"); err != nil {
		return nil, err
	}
	return v.s.List(ctx)
}

// Evict implements [heartbeat.Store.Evict], unless cut off.
func (v *storeView) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	if err := v.reach("evict"); err != nil {
		return false, err
	}
	return v.s.Evict(ctx, node, epoch, seq)
}

// Deregister implements [heartbeat.Store.Deregister], unless cut off.
func (v *storeView) Deregister(ctx context.Context, node string, epoch int64) error {
	if err := v.reach("deregister"); err != nil {
		return err
	}
	return v.s.Deregister(ctx, node, epoch)
}

// StoreTime implements [heartbeat.Store.StoreTime], unless cut off.
func (v *storeView) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	if err := v.reach("read the clock"); err != nil {
		return time.Time{}, 0, err
	}
	return v.s.StoreTime(ctx)
}

// AddQueues implements [heartbeat.Store.AddQueues], unless cut off.
func (v *storeView) AddQueues(ctx context.Context, node string, queues []string) error {
	if err := v.reach("add queues"); err != nil {
		return err
	}
	return v.s.AddQueues(ctx, node, queues)
}

// Queues implements [heartbeat.Store.Queues], unless cut off.
func (v *storeView) Queues(ctx context.Context) (map[string][]string, error) {
	if err := v.reach("list queues"); err != nil {
		return nil, err
	}
	return v.s.Queues(ctx)
}

// RemoveQueues implements [heartbeat.Store.RemoveQueues], unless cut off.
func (v *storeView) RemoveQueues(ctx context.Context, node string, queues []string) error {
	if err := v.reach("remove queues"); err != nil {
		return err
	}
	return v.s.RemoveQueues(ctx, node, queues)
}

var _ heartbeat.SessionLocker = (*storeView)(nil)

// HoldSession implements [heartbeat.SessionLocker], unless cut off: the
// hold's Check fails while the view is cut off, and its Release then
// keeps the lock, as a database keeps the session of a client that
// vanished without a word, until [storeView.endSessions].
func (v *storeView) HoldSession(ctx context.Context, node string) (heartbeat.SessionHold, error) {
	if err := v.reach("hold the session lock"); err != nil {
		return nil, err
	}
	h, err := v.s.HoldSession(ctx, node)
	if err != nil {
		return nil, err
	}
	vh := &viewHold{v: v, h: h}
	v.mu.Lock()
	v.holds = append(v.holds, vh)
	v.mu.Unlock()
	return vh, nil
}

// SessionFree implements [heartbeat.SessionLocker], unless cut off.
func (v *storeView) SessionFree(ctx context.Context, node string) (bool, error) {
	if err := v.reach("test a session lock"); err != nil {
		return false, err
	}
	return v.s.SessionFree(ctx, node)
}

// endSessions ends the sessions of every hold taken through the view,
// as the database does when the node's process dies: their locks are
// free at once.
func (v *storeView) endSessions() {
	v.mu.Lock()
	holds := v.holds
	v.holds = nil
	v.mu.Unlock()
	for _, h := range holds {
		_ = h.h.Release()
	}
}

// viewHold is a session lock held through a storeView.
type viewHold struct {
	v *storeView
	h heartbeat.SessionHold
}

// Check implements [heartbeat.SessionHold], unless cut off.
func (h *viewHold) Check(ctx context.Context) error {
	if err := h.v.reach("check the session lock"); err != nil {
		return err
	}
	return h.h.Check(ctx)
}

// Release implements [heartbeat.SessionHold]; cut off, it keeps the
// lock (see [storeView.HoldSession]).
func (h *viewHold) Release() error {
	if h.v.reach("release the session lock") != nil {
		return nil
	}
	h.v.mu.Lock()
	h.v.holds = slices.DeleteFunc(h.v.holds, func(x *viewHold) bool { return x == h })
	h.v.mu.Unlock()
	return h.h.Release()
}
