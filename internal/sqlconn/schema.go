package sqlconn

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Schema is a set of tables whose version is kept in a meta table beside
// them: one row, id 1, with the version and any counters the tables'
// owner keeps there. [Schema.Migrate] creates what is missing and brings
// the tables to the version this code knows, under a lock shared by every
// process using the database.
//
// The meta table, in PostgreSQL's and SQLite's syntax (MySQL's has INT
// for INTEGER and no CHECK):
//
//	CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, counter BIGINT NOT NULL, ...)
type Schema struct {
	// Dialect is the database's dialect.
	Dialect Dialect
	// Meta is the meta table's name, optionally qualified ("schema.name"),
	// unquoted: lower-case letters, digits and underscores.
	Meta string
	// Counters names extra columns of the meta row, BIGINT NOT NULL (SQLite
	// INTEGER), starting at 0: the heartbeat store's last_epoch.
	Counters []string
	// Migrations[v] are the statements that take the tables from version
	// v to v+1; the version this code knows is len(Migrations).
	Migrations [][]string
	// Lock names the schema lock, taken across every process using the
	// database (see [Schema.Migrate]); each set of tables has its own.
	Lock string
	// Owner and Elsewhere complete the error about tables of a newer
	// version: "... newer than this <Owner> knows (1): upgrade this node,
	// or <Elsewhere>", e.g. "refnode" and "use another table prefix".
	Owner, Elsewhere string
}

// Version returns the version this code knows: len(s.Migrations).
func (s Schema) Version() int { return len(s.Migrations) }

// DropMeta returns the statement that drops the meta table, if it exists.
func (s Schema) DropMeta() string { return "DROP TABLE IF EXISTS " + QuoteIdent(s.Dialect, s.Meta) }

// Migrate creates the meta table and its row if missing and runs the
// migrations from the stored version up, recording each version reached,
// all under the schema lock s.Lock, so that nodes opening the tables at
// the same time do it once. The lock spans every process using the
// database: an advisory transaction lock (PostgreSQL) or a write
// transaction (SQLite, BEGIN IMMEDIATE), in which the migration commits
// whole or not at all, or a named lock (MySQL, GET_LOCK, 30 s at most),
// where DDL is not transactional and a failed step leaves the earlier
// ones done. Migrate blocks until the lock is granted, ctx ends or (MySQL)
// 30 s have passed. It returns the version found (0: new tables). A
// version newer than s.Version is an error: an older node must not write
// tables whose meaning changed.
func (s Schema) Migrate(ctx context.Context, db *sql.DB) (found int, err error) {
	err = withSchemaLock(ctx, db, s.Dialect, s.Lock, func(ctx context.Context, ex execer) error {
		var err error
		found, err = s.migrateLocked(ctx, ex)
		return err
	})
	return found, err
}

// migrateLocked does Migrate's work under the lock.
func (s Schema) migrateLocked(ctx context.Context, ex execer) (int, error) {
	m := QuoteIdent(s.Dialect, s.Meta)
	id, version, counter := "id INTEGER PRIMARY KEY CHECK (id = 1)", "version INTEGER NOT NULL", "BIGINT NOT NULL"
	switch s.Dialect {
	case SQLite:
		counter = "INTEGER NOT NULL"
	case MySQL:
		id, version = "id INT NOT NULL PRIMARY KEY", "version INT NOT NULL"
	}
	defs, cols, zeros := []string{id, version}, []string{"id", "version"}, []string{"1", "0"}
	for _, c := range s.Counters {
		defs, cols, zeros = append(defs, c+" "+counter), append(cols, c), append(zeros, "0")
	}
	create := "CREATE TABLE IF NOT EXISTS " + m + " (" + strings.Join(defs, ", ") + ")"
	insert := "INSERT INTO " + m + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(zeros, ", ") + ")"
	if s.Dialect == MySQL {
		create += " ENGINE=InnoDB"
		insert += " ON DUPLICATE KEY UPDATE id = id"
	} else {
		insert += " ON CONFLICT (id) DO NOTHING"
	}

	if _, err := ex.ExecContext(ctx, create); err != nil {
		return 0, fmt.Errorf("create the meta table: %w", err)
	}
	if _, err := ex.ExecContext(ctx, insert); err != nil {
		return 0, fmt.Errorf("insert the meta row: %w", err)
	}
	var found int
	if err := ex.QueryRowContext(ctx, "SELECT version FROM "+m+" WHERE id = 1").Scan(&found); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	if found < 0 {
		return found, fmt.Errorf("the meta table %s holds schema version %d, which nothing writes: the table is damaged; restore it from a backup", s.Meta, found)
	}
	if found > s.Version() {
		return found, fmt.Errorf("the tables have schema version %d, newer than this %s knows (%d): upgrade this node, or %s", found, s.Owner, s.Version(), s.Elsewhere)
	}
	setVersion := Rebind(s.Dialect, "UPDATE "+m+" SET version = ? WHERE id = 1")
	for v := found; v < s.Version(); v++ {
		for _, stmt := range s.Migrations[v] {
			if _, err := ex.ExecContext(ctx, stmt); err != nil {
				return found, fmt.Errorf("migrate the schema from version %d to %d: %w", v, v+1, err)
			}
		}
		if _, err := ex.ExecContext(ctx, setVersion, v+1); err != nil {
			return found, fmt.Errorf("record schema version %d: %w", v+1, err)
		}
	}
	return found, nil
}

// execer runs statements under the schema lock: a *sql.Conn or the
// *sql.Tx that holds the lock.
type execer interface {
	// ExecContext executes a statement.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryRowContext runs a query that returns at most one row.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lockKey fits a lock name into MySQL's 64 characters (PostgreSQL hashes
// it to an advisory lock key).
func lockKey(name string) string {
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "cloudbus." + hex.EncodeToString(sum[:16])
}

// withSchemaLock runs fn holding a lock named name across every process
// using db's database, so that stores opening the same tables at the same
// time create or migrate them once: an advisory transaction lock
// (PostgreSQL), a write transaction (SQLite, BEGIN IMMEDIATE), or a named
// lock (MySQL, GET_LOCK, 30 s at most; its DDL cannot be transactional).
// fn runs its statements on ex; on PostgreSQL and SQLite they commit with
// the lock's release if fn returns nil. It blocks until the lock is
// granted, ctx ends or (MySQL) 30 s have passed.
func withSchemaLock(ctx context.Context, db *sql.DB, d Dialect, name string, fn func(ctx context.Context, ex execer) error) error {
	key := lockKey(name)
	conn, err := db.Conn(ctx)
	// SQLite: a connection switching a brand-new file to WAL takes an
	// exclusive lock, and a second connection opening at that moment
	// gets SQLITE_BUSY without its busy handler being asked; it is over
	// in microseconds, so try again until ctx ends.
	for pause := time.Millisecond; err != nil && d == SQLite && strings.Contains(err.Error(), "SQLITE_BUSY"); pause = min(2*pause, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect: %w", err)
		case <-time.After(pause):
		}
		conn, err = db.Conn(ctx)
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()

	var ex execer = conn
	var unlock func(ok bool) error
	switch d {
	case Postgres:
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		ex = tx
		unlock = func(ok bool) error {
			if ok {
				return tx.Commit()
			}
			return tx.Rollback()
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, key); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("take the schema lock: %w", err)
		}
	case SQLite:
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			return fmt.Errorf("begin immediate: %w", err)
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
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 30)`, key).Scan(&got); err != nil {
			return fmt.Errorf("take the schema lock: %w", err)
		}
		if got.Int64 != 1 {
			return fmt.Errorf("take the schema lock %s: not granted in 30 s: another node holds it", key)
		}
		unlock = func(bool) error {
			_, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, key)
			return err
		}
	default:
		return fmt.Errorf("unknown %s", d)
	}

	err = fn(ctx, ex)
	if uerr := unlock(err == nil); uerr != nil {
		// The connection may still hold the lock or a transaction: make
		// database/sql discard it instead of reusing it.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("release the schema lock: %w", uerr)
		}
	}
	return err
}
