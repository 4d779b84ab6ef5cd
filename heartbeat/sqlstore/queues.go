package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// queuesSuffix names the queues table: Table+"_queues".
const queuesSuffix = "_queues"

// maxQueueLen bounds a queue name: RabbitMQ's limit, and the MySQL
// column's.
const maxQueueLen = 255

// queueBatch is how many names one statement carries: two placeholders
// each at most, far below every dialect's limit (SQLite 32766,
// PostgreSQL and MySQL 65535). A longer list is written in batches, in
// one transaction.
const queueBatch = 500

// AddQueues implements [heartbeat.Store.AddQueues] with one INSERT
// of every name that skips the names already recorded (ON CONFLICT DO
// NOTHING; MySQL ON DUPLICATE KEY UPDATE queue = queue), or, past 500
// names, one transaction of such INSERTs. node must be 1 to 255 bytes,
// and each name too (RabbitMQ's limit); names compare byte for byte.
// Repeated names are written once, in sorted order, so concurrent calls
// lock rows in the same order; a write the database aborts anyway to
// break a deadlock is tried again. An error leaves the names recorded or
// not; retrying is safe.
func (s *Store) AddQueues(ctx context.Context, node string, queues []string) error {
	op := "add queues of node " + node
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if node == "" || len(node) > maxNodeLen {
		return fmt.Errorf("sqlstore: add queues: node %q must be 1 to %d bytes; pass the node's UUID", node, maxNodeLen)
	}
	for _, q := range queues {
		if q == "" || len(q) > maxQueueLen {
			return fmt.Errorf("sqlstore: %s: queue name %q must be 1 to %d bytes (nothing was recorded)", op, q, maxQueueLen)
		}
	}
	return s.inBatches(ctx, op, sortedSet(queues), func(ctx context.Context, ex execer, batch []string) error {
		var b strings.Builder
		args := make([]any, 0, 2*len(batch))
		b.WriteString(s.st.addQueues[0])
		for i, q := range batch {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?)")
			args = append(args, node, q)
		}
		b.WriteString(s.st.addQueues[1])
		_, err := ex.ExecContext(ctx, sqlconn.Rebind(s.dialect, b.String()), args...)
		return err
	})
}

// Queues implements [heartbeat.Store.Queues] with one SELECT of the
// whole queues table. The names of each node are sorted (byte order on
// SQLite and MySQL, the database's collation on PostgreSQL); a node
// without recorded queues is not in the map. The caller owns the map.
func (s *Store) Queues(ctx context.Context) (map[string][]string, error) {
	const op = "list queues"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.st.queues)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	defer rows.Close()
	out := make(map[string][]string)
	for rows.Next() {
		var node, queue string
		if err := rows.Scan(&node, &queue); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		out[node] = append(out[node], queue)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// RemoveQueues implements [heartbeat.Store.RemoveQueues] with one
// DELETE whose WHERE names the node and the queues, or, past 500 names,
// one transaction of such DELETEs; on PostgreSQL the DELETE locks its
// rows in the queues' order first, so concurrent removals cannot
// deadlock. Names that are not recorded, for that node, are skipped. It
// is idempotent, so retrying after an error is safe.
func (s *Store) RemoveQueues(ctx context.Context, node string, queues []string) error {
	op := "remove queues of node " + node
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	return s.inBatches(ctx, op, sortedSet(queues), func(ctx context.Context, ex execer, batch []string) error {
		var b strings.Builder
		args := make([]any, 0, 1+len(batch))
		b.WriteString(s.st.removeQueues[0])
		args = append(args, node)
		for i, q := range batch {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("?")
			args = append(args, q)
		}
		b.WriteString(s.st.removeQueues[1])
		_, err := ex.ExecContext(ctx, sqlconn.Rebind(s.dialect, b.String()), args...)
		return err
	})
}

// execer runs a statement: the pool, or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// inBatches calls write with names in batches of queueBatch: one call on
// the pool, or, for more names, every call in one transaction. A write
// the database aborts to break a deadlock is tried again, up to
// deadlockRetries times: every queue write is idempotent.
func (s *Store) inBatches(ctx context.Context, op string, names []string, write func(ctx context.Context, ex execer, batch []string) error) error {
	if len(names) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := s.writeBatches(ctx, names, write)
		if err == nil {
			return nil
		}
		if attempt > deadlockRetries || !deadlocked(err) {
			return s.fail(ctx, op, err)
		}
		// A short random pause, so the two sides do not meet again.
		t := time.NewTimer(time.Duration(attempt) * time.Duration(1+rand.IntN(10)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.fail(ctx, op, err)
		case <-t.C:
		}
	}
}

// writeBatches is one attempt of inBatches.
func (s *Store) writeBatches(ctx context.Context, names []string, write func(ctx context.Context, ex execer, batch []string) error) error {
	if len(names) <= queueBatch {
		return write(ctx, s.db, names)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	for batch := range slices.Chunk(names, queueBatch) {
		if err := write(ctx, tx, batch); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// deadlockRetries bounds the retries of a queue write that the database
// aborted to break a deadlock.
const deadlockRetries = 5

// deadlocked reports whether err is the database aborting a statement or
// transaction to break a deadlock (or, on PostgreSQL, a serialization
// failure): nothing was written, and trying again is safe.
func deadlocked(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "40P01" || pg.Code == "40001"
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1213 // ER_LOCK_DEADLOCK
	}
	return false
}

// sortedSet returns the distinct names, sorted, in a new slice.
func sortedSet(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
