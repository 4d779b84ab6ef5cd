package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
)

// execer is what the migration runs statements on: a *sql.Conn, or the
// *sql.Tx that holds PostgreSQL's lock.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lockName names the schema lock of table (PostgreSQL hashes it to an
// advisory lock key; MySQL's GET_LOCK takes at most 64 characters).
func lockName(table string) string {
	name := "cloudbus.sqlstore." + table
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(table))
		name = "cloudbus.sqlstore." + hex.EncodeToString(sum[:16])
	}
	return name
}

// migrate creates the tables if missing and brings them to
// schemaVersion, holding a lock so that nodes opening the store at the
// same time do it once: an advisory transaction lock (PostgreSQL), a
// write transaction (SQLite, BEGIN IMMEDIATE), or a named lock (MySQL,
// GET_LOCK; its DDL cannot be transactional). It returns the version
// found. A version newer than this code's is an error: an older node must
// not write tables whose meaning changed.
func migrate(ctx context.Context, db *sql.DB, d Dialect, st statements, table string) (found int, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()

	var ex execer = conn
	var unlock func(ok bool) error
	switch d {
	case Postgres:
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return 0, fmt.Errorf("begin: %w", err)
		}
		ex = tx
		unlock = func(ok bool) error {
			if ok {
				return tx.Commit()
			}
			return tx.Rollback()
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, lockName(table)); err != nil {
			_ = tx.Rollback()
			return 0, fmt.Errorf("take the schema lock: %w", err)
		}
	case SQLite:
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			return 0, fmt.Errorf("begin immediate: %w", err)
		}
		unlock = func(ok bool) error {
			stmt := `COMMIT`
			if !ok {
				stmt = `ROLLBACK`
			}
			_, err := conn.ExecContext(context.WithoutCancel(ctx), stmt)
			return err
		}
	case MySQL:
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 30)`, lockName(table)).Scan(&got); err != nil {
			return 0, fmt.Errorf("take the schema lock: %w", err)
		}
		if got.Int64 != 1 {
			return 0, fmt.Errorf("take the schema lock %s: not granted in 30 s: another node holds it", lockName(table))
		}
		unlock = func(bool) error {
			_, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, lockName(table))
			return err
		}
	default:
		return 0, fmt.Errorf("unknown %s", d)
	}

	found, err = migrateLocked(ctx, ex, st)
	if uerr := unlock(err == nil); uerr != nil {
		// The connection may still hold the lock or a transaction: make
		// database/sql discard it instead of reusing it.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("release the schema lock: %w", uerr)
		}
	}
	return found, err
}

// migrateLocked does migrate's work under the lock.
func migrateLocked(ctx context.Context, ex execer, st statements) (int, error) {
	if _, err := ex.ExecContext(ctx, st.createMeta); err != nil {
		return 0, fmt.Errorf("create the meta table: %w", err)
	}
	if _, err := ex.ExecContext(ctx, st.insertMeta); err != nil {
		return 0, fmt.Errorf("insert the meta row: %w", err)
	}
	var found int
	if err := ex.QueryRowContext(ctx, st.readVersion).Scan(&found); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	if found > schemaVersion {
		return found, fmt.Errorf("the tables have schema version %d, newer than this cloudbus knows (%d): upgrade this node, or use another Table", found, schemaVersion)
	}
	for v := found; v < schemaVersion; v++ {
		for _, stmt := range st.migrations[v] {
			if _, err := ex.ExecContext(ctx, stmt); err != nil {
				return found, fmt.Errorf("migrate the schema from version %d to %d: %w", v, v+1, err)
			}
		}
		if _, err := ex.ExecContext(ctx, st.setVersion, v+1); err != nil {
			return found, fmt.Errorf("record schema version %d: %w", v+1, err)
		}
	}
	return found, nil
}

// errNoMeta is returned when the meta row is gone, as after a manual
// DELETE: the store cannot issue epochs.
var errNoMeta = errors.New("the meta row (id 1) is missing from the meta table: reopen the store to recreate it")
