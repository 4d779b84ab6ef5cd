package memstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

var (
	_ heartbeat.SessionLocker = (*Store)(nil)
	_ heartbeat.SessionLocker = (*View)(nil)
)

// hold is a node's session lock held in the store: a session that lives
// until Release or [Store.EndSession]. A hold taken through a [View]
// checks through it, so a node cut off from the store cannot confirm its
// lock, which it keeps, as a database keeps a cut-off session's.
type hold struct {
	s    *Store
	node string
	via  *View // nil: taken on the Store itself
}

// HoldSession implements [heartbeat.SessionLocker].
func (s *Store) HoldSession(ctx context.Context, node string) (heartbeat.SessionHold, error) {
	return s.holdSession(ctx, node, nil)
}

func (s *Store) holdSession(ctx context.Context, node string, via *View) (heartbeat.SessionHold, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: hold the session lock of node %s: %w", node, err)
	}
	if node == "" {
		return nil, errors.New("memstore: hold a session lock: empty node; pass the node's UUID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[node] != nil {
		return nil, fmt.Errorf("memstore: hold the session lock of node %s: %w", node, heartbeat.ErrSessionHeld)
	}
	h := &hold{s: s, node: node, via: via}
	s.sessions[node] = h
	return h, nil
}

// SessionFree implements [heartbeat.SessionLocker].
func (s *Store) SessionFree(ctx context.Context, node string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memstore: test the session lock of node %s: %w", node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[node] == nil, nil
}

// EndSession ends node's session as the database would when the node's
// process dies or its connection is reset: its lock is free at once, and
// its hold's Check fails. A node frozen or cut off keeps its session: use
// [Store.SetUnreachable] for that.
func (s *Store) EndSession(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, node)
}

// Check implements [heartbeat.SessionHold].
func (h *hold) Check(ctx context.Context) error {
	if h.via != nil {
		if err := h.via.reach(ctx, "check the session lock"); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: check the session lock of node %s: %w", h.node, err)
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.sessions[h.node] != h {
		return fmt.Errorf("memstore: check the session lock of node %s: %w", h.node, heartbeat.ErrSessionLost)
	}
	return nil
}

// Release implements [heartbeat.SessionHold]; it is idempotent. A hold
// taken through a view that is cut off now stays in the store, as a
// database keeps a session whose client vanished without a word: the
// lock stays held until [Store.EndSession].
func (h *hold) Release() error {
	if h.via != nil && h.via.reach(context.Background(), "release the session lock") != nil {
		return nil
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.sessions[h.node] == h {
		delete(h.s.sessions, h.node)
	}
	return nil
}

// HoldSession implements [heartbeat.SessionLocker], subject to the
// view's faults; the hold's Check is too.
func (v *View) HoldSession(ctx context.Context, node string) (heartbeat.SessionHold, error) {
	if err := v.reach(ctx, "hold the session lock"); err != nil {
		return nil, err
	}
	return v.s.holdSession(ctx, node, v)
}

// SessionFree implements [heartbeat.SessionLocker], subject to the view's
// faults.
func (v *View) SessionFree(ctx context.Context, node string) (bool, error) {
	if err := v.reach(ctx, "test the session lock"); err != nil {
		return false, err
	}
	return v.s.SessionFree(ctx, node)
}
