package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// View is the store as one node reaches it: every call goes to the
// [Store], subject to the faults set for that node. The node of a view is
// the caller, not the record a call names: a view of node A may evict
// node B's record. A View is safe for concurrent use.
type View struct {
	s    *Store
	node string
}

var _ heartbeat.Store = (*View)(nil)

// For returns the store as seen from node, for that node's
// [heartbeat.Monitor]. Views of one node share its faults.
func (s *Store) For(node string) *View { return &View{s: s, node: node} }

// SetUnreachable cuts node's views off the store (on) or reconnects them
// (off). While cut off, every call through them fails at once with an
// error matching [ErrUnreachable] and changes nothing. Calls on the
// Store itself are not affected.
func (s *Store) SetUnreachable(node string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultOf(node).unreachable = on
}

// SetLatency delays every call through node's views by d before it
// reaches the store (0 removes the delay). A call whose ctx ends during
// the delay returns ctx's error and changes nothing, so a latency above
// the monitor's OpTimeout makes every call of the node time out.
func (s *Store) SetLatency(node string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultOf(node).latency = d
}

// faultOf returns node's fault state; s.mu is held.
func (s *Store) faultOf(node string) *fault {
	f := s.faults[node]
	if f == nil {
		f = &fault{}
		s.faults[node] = f
	}
	return f
}

// reach applies the faults of v's node to a call named op.
func (v *View) reach(ctx context.Context, op string) error {
	v.s.mu.Lock()
	f := *v.s.faultOf(v.node)
	v.s.mu.Unlock()
	if f.unreachable {
		return fmt.Errorf("memstore: %s from node %s: %w", op, v.node, ErrUnreachable)
	}
	if f.latency > 0 {
		t := time.NewTimer(f.latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("memstore: %s from node %s: %w", op, v.node, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Register implements [heartbeat.Store.Register], subject to the view's
// faults.
func (v *View) Register(ctx context.Context, node string) (int64, error) {
	if err := v.reach(ctx, "register"); err != nil {
		return 0, err
	}
	return v.s.Register(ctx, node)
}

// Beat implements [heartbeat.Store.Beat], subject to the view's faults.
func (v *View) Beat(ctx context.Context, node string, epoch int64) error {
	if err := v.reach(ctx, "beat"); err != nil {
		return err
	}
	return v.s.Beat(ctx, node, epoch)
}

// List implements [heartbeat.Store.List], subject to the view's faults.
func (v *View) List(ctx context.Context) ([]heartbeat.Record, error) {
	if err := v.reach(ctx, "list"); err != nil {
		return nil, err
	}
	return v.s.List(ctx)
}

// StoreTime implements [heartbeat.Store.StoreTime], subject to the view's
// faults.
func (v *View) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	if err := v.reach(ctx, "read the clock"); err != nil {
		return time.Time{}, 0, err
	}
	return v.s.StoreTime(ctx)
}

// BeatBus implements [heartbeat.Store.BeatBus], subject to the view's
// faults.
func (v *View) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	if err := v.reach(ctx, "beat"); err != nil {
		return err
	}
	return v.s.BeatBus(ctx, node, epoch, busUp)
}

// AddQueues implements [heartbeat.Store.AddQueues], subject to the view's
// faults.
func (v *View) AddQueues(ctx context.Context, node string, queues []string) error {
	if err := v.reach(ctx, "add queues"); err != nil {
		return err
	}
	return v.s.AddQueues(ctx, node, queues)
}

// Queues implements [heartbeat.Store.Queues], subject to the view's faults.
func (v *View) Queues(ctx context.Context) (map[string][]string, error) {
	if err := v.reach(ctx, "list queues"); err != nil {
		return nil, err
	}
	return v.s.Queues(ctx)
}

// RemoveQueues implements [heartbeat.Store.RemoveQueues], subject to the
// view's faults.
func (v *View) RemoveQueues(ctx context.Context, node string, queues []string) error {
	if err := v.reach(ctx, "remove queues"); err != nil {
		return err
	}
	return v.s.RemoveQueues(ctx, node, queues)
}

// Evict implements [heartbeat.Store.Evict], subject to the view's faults.
func (v *View) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	if err := v.reach(ctx, "evict"); err != nil {
		return false, err
	}
	return v.s.Evict(ctx, node, epoch, seq)
}

// Deregister implements [heartbeat.Store.Deregister], subject to the
// view's faults.
func (v *View) Deregister(ctx context.Context, node string, epoch int64) error {
	if err := v.reach(ctx, "deregister"); err != nil {
		return err
	}
	return v.s.Deregister(ctx, node, epoch)
}
