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

const queuesSuffix = "_queues"

// maxQueueLen is the longest queue name, in bytes.
const maxQueueLen = 255

// queueBatch is how many names one statement carries.
const queueBatch = 500

// AddQueues implements [heartbeat.Store.AddQueues]. node and each name
// must be 1 to 255 bytes.
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

// Queues implements [heartbeat.Store.Queues], each node's names sorted.
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

// RemoveQueues implements [heartbeat.Store.RemoveQueues].
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

// execer is the pool or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// inBatches calls write with names in batches of queueBatch, in one
// transaction if more than one, retrying after a deadlock.
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
		t := time.NewTimer(time.Duration(attempt) * time.Duration(1+rand.IntN(10)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.fail(ctx, op, err)
		case <-t.C:
		}
	}
}

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

const deadlockRetries = 5

// deadlocked reports whether the database aborted err's write to break a
// deadlock or serialization failure.
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
