package heartbeat

import (
	"context"
	"errors"
)

// SessionLocker is implemented by a [Store] that can tell at once that a
// node's process is gone: each node holds a lock on a database session of
// its own for its life, and the database releases it as soon as that
// session ends (PostgreSQL's session-level advisory locks, MySQL's and
// MariaDB's GET_LOCK, an operating-system file lock beside a SQLite file).
//
// A free lock proves only that no session holds it: the holder's process
// exited, its session was reset or its database restarted, or it never
// took the lock. A live node that is frozen, slow or cut off keeps its
// session, and with it its lock, for as long as the database keeps the
// session open; so a free lock may speed up an eviction the beat age
// already suggests, and never replaces the beat rules.
type SessionLocker interface {
	// HoldSession takes node's lock on a session of its own and holds it
	// until the hold is released or the session ends. It fails with
	// [ErrSessionHeld] if another session holds it.
	HoldSession(ctx context.Context, node string) (SessionHold, error)

	// SessionFree reports whether no session holds node's lock. It takes
	// the lock and releases it in one call, so a holder taking it at that
	// moment may fail with [ErrSessionHeld] and must try again.
	SessionFree(ctx context.Context, node string) (bool, error)
}

// SessionHold is a node's lock held by [SessionLocker.HoldSession].
type SessionHold interface {
	// Check makes one round trip on the session: nil means the session,
	// and so the lock, is alive. An error matching [ErrSessionLost] means
	// the session ended: Release the hold and take the lock again. Any
	// other error (a timeout, the database unreachable) leaves it unknown:
	// the session may still hold the lock, and the database keeps it
	// while it keeps the session.
	Check(ctx context.Context) error

	// Release releases the lock and ends the session. It is idempotent.
	Release() error
}

// ErrSessionLost means a hold's session ended (the database terminated
// it, or its connection was reset): its lock is free, or another session
// holds it now. Release the hold and take the lock again.
var ErrSessionLost = errors.New("heartbeat: the session holding this node's lock ended; take the lock again")

// ErrSessionHeld means another session holds the node's lock: another
// process runs as this node, or a peer is testing the lock at this
// moment. Retrying shortly is safe.
var ErrSessionHeld = errors.New("heartbeat: the node's session lock is held by another session: another process runs as this node, or a peer is testing it; retry shortly")
