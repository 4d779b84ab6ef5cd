// Package sqlfence implements package fence in SQL: fencing tokens and
// message records in two tables beside the heartbeat store's, in the same
// database, checked in the user's own *sql.Tx.
//
//	f, err := sqlfence.Open(ctx, db, sqlfence.Config{Dialect: hb.Dialect(), HeartbeatTable: hb.Table()})
//	...
//	// in a handler:
//	reply, err := f.Do(ctx, fence.For(ctx, r), func(ctx context.Context, tx *sql.Tx, tok fence.Token) ([]byte, error) {
//		// every write of the transaction: it commits only while this
//		// node's claim on the resource holds, once per message
//		_, err := tx.ExecContext(ctx, `UPDATE vms SET state = $1 WHERE uuid = $2`, "running", r.Resource())
//		return []byte(`{"ok":true}`), err
//	})
//
// [Fence.Do] runs the whole protocol; [Fence.Check], [Fence.Begin] and
// [Fence.Finish] are its steps, for a transaction the caller runs itself.
// See package fence for what the check guarantees on each database and
// how to bound a paused writer's lock.
//
// The tables, for a Table prefix P: P_tokens (resource, token, node,
// epoch, uses), P_once (id, type, hash, done, reply, at_us), and P_meta,
// the schema version, migrated under a lock like the heartbeat store's.
package sqlfence
