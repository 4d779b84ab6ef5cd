package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
)

// The dialects, as package sqlstore names them.
const (
	SQLite   = sqlstore.SQLite
	Postgres = sqlstore.Postgres
	MySQL    = sqlstore.MySQL
)

// Defaults of [Config].
const (
	// DefaultTable is the default Config.Table.
	DefaultTable = "cloudbus_fence"
	// DefaultRetention is the default Config.Retention: a day.
	DefaultRetention = 24 * time.Hour
	// DefaultMaxReply is the default Config.MaxReply: 1 MiB.
	DefaultMaxReply = 1 << 20
)

// Config configures [Open]; zero fields take their defaults.
type Config struct {
	// Dialect is SQLite, Postgres or MySQL (MariaDB too): the heartbeat
	// store's Dialect(). Required.
	Dialect sqlstore.Dialect
	// HeartbeatTable is the heartbeat store's Table(), in the same
	// database. Required.
	HeartbeatTable string
	// Table prefixes the fence's tables <Table>_tokens, _once and _meta:
	// lower-case letters, digits and underscores, at most 56 characters,
	// optionally schema.table. Default [DefaultTable].
	Table string
	// MaxAge is the oldest, by the database's clock, a claimant's last
	// beat may be for its claim to hold; set it to the heartbeat's
	// EvictAfter. Default heartbeat.DefaultConfig().EvictAfter (3 s).
	MaxAge time.Duration
	// Retention is how long a message's reply is kept; [Fence.Sweep]
	// deletes older ones. Default [DefaultRetention].
	Retention time.Duration
	// MaxReply bounds a recorded reply in bytes; a larger one fails with
	// message.ErrTooLarge. Default [DefaultMaxReply].
	MaxReply int
	// Logger receives the fence's logs; nil discards them.
	Logger *slog.Logger
}

var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,55}$`)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.MaxAge == 0 {
		c.MaxAge = heartbeat.DefaultConfig().EvictAfter
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MaxReply == 0 {
		c.MaxReply = DefaultMaxReply
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Dialect {
	case SQLite, Postgres, MySQL:
	default:
		errs = append(errs, fmt.Errorf("sqlfence: config: Dialect %s: use sqlfence.SQLite, Postgres or MySQL (the heartbeat store's Dialect())", c.Dialect))
	}
	if !tableName.MatchString(c.HeartbeatTable) {
		errs = append(errs, fmt.Errorf("sqlfence: config: HeartbeatTable %q is not a table name: give the heartbeat store's Table()", c.HeartbeatTable))
	}
	if c.Table != "" && !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("sqlfence: config: Table %q is not a valid name: use lower-case letters, digits and underscores, at most 56 characters, optionally as schema.table", c.Table))
	}
	if c.MaxAge < 0 || c.Retention < 0 || c.MaxReply < 0 {
		errs = append(errs, fmt.Errorf("sqlfence: config: MaxAge %s, Retention %s and MaxReply %d must not be negative", c.MaxAge, c.Retention, c.MaxReply))
	}
	return errors.Join(errs...)
}

// Fence fences writes and makes messages idempotent in the heartbeat
// store's database. It is safe for concurrent use and holds no goroutine
// and no connection of its own.
type Fence struct {
	db     *sql.DB
	cfg    Config
	st     statements
	schema sqlconn.Schema
	stats  fence.Counters
}

// Open creates the fence's tables in db if they are missing, under a lock
// every process shares, and returns the fence. The caller closes db after
// the fence's last use. On SQLite, db must begin transactions with BEGIN
// IMMEDIATE.
func Open(ctx context.Context, db *sql.DB, cfg Config) (*Fence, error) {
	if db == nil {
		return nil, errors.New("sqlfence: Open: db is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	f := &Fence{db: db, cfg: cfg, st: newStatements(cfg.Dialect, cfg.Table, cfg.HeartbeatTable)}
	f.schema = sqlconn.Schema{
		Dialect: cfg.Dialect, Meta: cfg.Table + "_meta", Migrations: f.st.migrations,
		Lock: "cloudbus.fence." + cfg.Table, Owner: "cloudbus fence", Elsewhere: "use another Table",
	}
	if _, err := f.schema.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("sqlfence: open tables %s_*: %w", cfg.Table, sqlconn.Mark(err))
	}
	return f, nil
}

// Tables returns the fence's tables.
func (f *Fence) Tables() []string {
	return []string{f.cfg.Table + "_tokens", f.cfg.Table + "_once", f.cfg.Table + "_meta"}
}

// Config returns the configuration, defaults filled in.
func (f *Fence) Config() Config { return f.cfg }

// Check, as tx's first statement, moves the resource's token to c's
// claimant if c holds, and keeps the token row locked until tx ends. It
// returns the token, or a [*fence.StaleError]: then roll tx back.
func (f *Fence) Check(ctx context.Context, tx *sql.Tx, c fence.Claim) (fence.Token, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	maxAge := f.cfg.MaxAge.Microseconds()
	for attempt := 0; attempt < 2; attempt++ {
		tok, ok, err := f.move(ctx, tx, c, maxAge)
		if err != nil || ok {
			return tok, err
		}
		// No row moved: insert the first; if another claimant did, move again.
		tok, ok, err = f.insertFirst(ctx, tx, c, maxAge)
		if err != nil || ok {
			return tok, err
		}
	}
	return 0, f.stale(ctx, c, nil)
}

func (f *Fence) move(ctx context.Context, tx *sql.Tx, c fence.Claim, maxAge int64) (fence.Token, bool, error) {
	args := []any{c.Node, c.Epoch, c.Node, c.Epoch, c.Resource, c.Node, c.Epoch, maxAge}
	if f.st.lock != "" {
		rows, err := tx.QueryContext(ctx, f.st.lock, c.Resource)
		if err == nil {
			err = rows.Close()
		}
		if err != nil {
			return 0, false, f.fail(ctx, c, "lock the token", err)
		}
	}
	if f.cfg.Dialect == MySQL {
		res, err := tx.ExecContext(ctx, f.st.check, args...)
		if err != nil {
			return 0, false, f.fail(ctx, c, "check the claim", err)
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return 0, false, sqlconn.Mark(err)
		}
		tok, err := res.LastInsertId()
		return fence.Token(tok), err == nil, sqlconn.Mark(err)
	}
	var tok int64
	switch err := tx.QueryRowContext(ctx, f.st.check, args...).Scan(&tok); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, f.fail(ctx, c, "check the claim", err)
	}
	return fence.Token(tok), true, nil
}

func (f *Fence) insertFirst(ctx context.Context, tx *sql.Tx, c fence.Claim, maxAge int64) (fence.Token, bool, error) {
	args := []any{c.Resource, c.Node, c.Epoch, c.Node, c.Epoch, maxAge}
	if f.cfg.Dialect == MySQL {
		res, err := tx.ExecContext(ctx, f.st.first, args...)
		if err != nil {
			return 0, false, f.fail(ctx, c, "claim the resource", err)
		}
		n, err := res.RowsAffected()
		return 1, err == nil && n == 1, sqlconn.Mark(err)
	}
	var tok int64
	switch err := tx.QueryRowContext(ctx, f.st.first, args...).Scan(&tok); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, f.fail(ctx, c, "claim the resource", err)
	}
	return fence.Token(tok), true, nil
}

// fail wraps err from a fenced statement, as a [*fence.StaleError] if c
// no longer holds.
func (f *Fence) fail(ctx context.Context, c fence.Claim, op string, err error) error {
	if reason := f.why(ctx, c); reason != "" {
		return &fence.StaleError{Claim: c, Reason: reason, Cause: err}
	}
	return fmt.Errorf("sqlfence: %s %s: %w", op, c, sqlconn.Mark(err))
}

// stale returns the StaleError for c.
func (f *Fence) stale(ctx context.Context, c fence.Claim, cause error) error {
	reason := f.why(ctx, c)
	if reason == "" {
		reason = "the claim did not hold when it was checked"
	}
	return &fence.StaleError{Claim: c, Reason: reason, Cause: cause}
}

// why says why c does not hold now, or "" if it holds or the store cannot
// tell. It reads the store outside tx, even after ctx ended.
func (f *Fence) why(ctx context.Context, c fence.Claim) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var epoch, ageUS int64
	switch err := f.db.QueryRowContext(ctx, f.st.record, c.Node).Scan(&epoch, &ageUS); {
	case errors.Is(err, sql.ErrNoRows):
		return fence.StaleReason(c, false, 0, 0, f.cfg.MaxAge)
	case err != nil:
		return ""
	}
	return fence.StaleReason(c, true, epoch, time.Duration(ageUS)*time.Microsecond, f.cfg.MaxAge)
}

// Verify returns nil if c still holds, or a [*fence.StaleError]. Call it
// in tx just before a side effect outside the database.
func (f *Fence) Verify(ctx context.Context, tx *sql.Tx, c fence.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var n int64
	if err := tx.QueryRowContext(ctx, f.st.verify, c.Node, c.Epoch, f.cfg.MaxAge.Microseconds()).Scan(&n); err != nil {
		return f.fail(ctx, c, "verify the claim", err)
	}
	if n == 0 {
		return f.stale(ctx, c, nil)
	}
	return nil
}

// Begin records k in tx before any side effect. For a message handled
// before, it returns the first reply and done: roll tx back. A concurrent
// Begin of k waits until tx ends, then returns tx's reply, or records k if
// tx rolled back. An id recorded for another type or body fails with an
// error matching fence.ErrKeyReused and message.ErrBadRequest.
func (f *Fence) Begin(ctx context.Context, tx *sql.Tx, k fence.Key) (reply []byte, done bool, err error) {
	if err := k.Validate(); err != nil {
		return nil, false, err
	}
	res, err := tx.ExecContext(ctx, f.st.onceInsert, k.ID, k.Type, k.Hash)
	if err != nil {
		return nil, false, fmt.Errorf("sqlfence: record message %s: %w", k.ID, sqlconn.Mark(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, false, fmt.Errorf("sqlfence: record message %s: %w", k.ID, sqlconn.Mark(err))
	} else if n == 1 {
		return nil, false, nil
	}
	var typ, hash string
	var isDone int64
	if err := tx.QueryRowContext(ctx, f.st.onceGet, k.ID).Scan(&typ, &hash, &isDone, &reply); err != nil {
		return nil, false, fmt.Errorf("sqlfence: read the record of message %s: %w", k.ID, sqlconn.Mark(err))
	}
	if typ != k.Type || hash != k.Hash {
		return nil, false, fence.Reused(k, typ, hash)
	}
	if isDone == 0 {
		// Only a transaction that skipped Finish commits this.
		return nil, false, fmt.Errorf("sqlfence: message %s was recorded without its reply (a transaction called Begin but not Finish): %w", k.ID, message.ErrInternal)
	}
	return reply, true, nil
}

// Finish records reply for k in tx, after [Fence.Begin]. A reply over
// MaxReply fails with message.ErrTooLarge.
func (f *Fence) Finish(ctx context.Context, tx *sql.Tx, k fence.Key, reply []byte) error {
	if len(reply) > f.cfg.MaxReply {
		return message.ErrTooLarge.WithDetails(fmt.Sprintf("sqlfence: the reply to message %s is %d bytes, over MaxReply %d; nothing was recorded", k.ID, len(reply), f.cfg.MaxReply))
	}
	if reply == nil {
		reply = []byte{}
	}
	if _, err := tx.ExecContext(ctx, f.st.onceFinish, reply, k.ID); err != nil {
		return fmt.Errorf("sqlfence: record the reply to message %s: %w", k.ID, sqlconn.Mark(err))
	}
	return nil
}

// Do runs fn at most once, with w.Claim's token, in a transaction guarded
// by w ([Fence.Check], [Fence.Begin], fn, [Fence.Finish], commit), and
// returns fn's reply, or the first reply if w.Key was handled before. If
// fn fails, nothing commits and its error is returned. A database error
// of a claim that stopped holding is returned as a [*fence.StaleError]; a
// failed commit's error says its outcome is unknown.
func (f *Fence) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx *sql.Tx, tok fence.Token) ([]byte, error)) ([]byte, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		reply, ran, err := f.do(ctx, w, fn)
		// Nothing committed and fn did not run: a retry is safe.
		if err == nil || ran || attempt == 3 || !(deadlock(err) || sqlconn.BrokenConn(err)) || errors.Is(err, fence.ErrStale) || ctx.Err() != nil {
			f.stats.Count(ran, err)
			return reply, err
		}
		f.cfg.Logger.Debug("sqlfence: deadlock before the transaction ran; again", "claim", w.Claim, "attempt", attempt, "err", err)
	}
}

// Stats returns what Do (and Run) did so far in this process:
// transactions run and committed, repeats answered with their recorded
// reply, stale claims refused. A transaction of the caller's own, using
// Check, Begin and Finish, is not counted.
func (f *Fence) Stats() fence.Stats { return f.stats.Stats() }

// deadlock reports whether err is MySQL's 1213 or PostgreSQL's 40P01 or 40001.
func deadlock(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001"
	}
	return false
}

// do is one attempt of Do; ran says whether fn was called.
func (f *Fence) do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx *sql.Tx, tok fence.Token) ([]byte, error)) (_ []byte, ran bool, _ error) {
	var opts *sql.TxOptions
	if f.cfg.Dialect == MySQL {
		// Rule 1 of the package documentation; PostgreSQL's default.
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := f.db.BeginTx(ctx, opts)
	if err != nil {
		if !w.Claim.IsZero() {
			return nil, false, f.fail(ctx, w.Claim, "begin", err)
		}
		return nil, false, fmt.Errorf("sqlfence: begin: %w", sqlconn.Mark(err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	var tok fence.Token
	if !w.Claim.IsZero() {
		if tok, err = f.Check(ctx, tx, w.Claim); err != nil {
			return nil, false, err
		}
	}
	if !w.Key.IsZero() {
		reply, done, err := f.Begin(ctx, tx, w.Key)
		if err != nil {
			return nil, false, f.explain(ctx, w.Claim, err)
		}
		if done {
			return reply, false, nil
		}
	}
	reply, err := fn(ctx, tx, tok)
	if err != nil {
		return nil, true, f.explain(ctx, w.Claim, err)
	}
	if !w.Key.IsZero() {
		if err := f.Finish(ctx, tx, w.Key, reply); err != nil {
			return nil, true, f.explain(ctx, w.Claim, err)
		}
	}
	if err := ctx.Err(); err != nil {
		// database/sql rolls tx back when ctx ends.
		return nil, true, fmt.Errorf("sqlfence: not committed: %w", err)
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
			// ctx ended after the check above: tx was rolled back.
			return nil, true, fmt.Errorf("sqlfence: not committed: %w", ctx.Err())
		}
		return nil, true, fmt.Errorf("sqlfence: commit (outcome unknown: it may have committed): %w", sqlconn.Mark(err))
	}
	committed = true
	return reply, true, nil
}

// explain is fail for errors inside fn, leaving *message.Error alone.
func (f *Fence) explain(ctx context.Context, c fence.Claim, err error) error {
	var me *message.Error
	if c.IsZero() || errors.As(err, &me) || errors.Is(err, fence.ErrStale) {
		return err
	}
	if reason := f.why(ctx, c); reason != "" {
		return &fence.StaleError{Claim: c, Reason: reason, Cause: err}
	}
	return err
}

// Sweep deletes message records older than Config.Retention and returns
// how many. Call it periodically; a swept message's next delivery runs.
func (f *Fence) Sweep(ctx context.Context) (int64, error) {
	res, err := f.db.ExecContext(ctx, f.st.sweep, f.cfg.Retention.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("sqlfence: sweep the message records: %w", sqlconn.Mark(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlfence: sweep the message records: %w", sqlconn.Mark(err))
	}
	if n > 0 {
		f.cfg.Logger.Debug("sqlfence: swept message records", "deleted", n, "retention", f.cfg.Retention)
	}
	return n, nil
}

// Holder returns who holds resource's token now, and the token; ok is
// false if nobody ever claimed it.
func (f *Fence) Holder(ctx context.Context, resource string) (c fence.Claim, tok fence.Token, ok bool, err error) {
	c.Resource = resource
	switch err = f.db.QueryRowContext(ctx, f.st.holder, resource).Scan(&c.Node, &c.Epoch, &tok); {
	case errors.Is(err, sql.ErrNoRows):
		return c, 0, false, nil
	case err != nil:
		return c, 0, false, fmt.Errorf("sqlfence: read the holder of %s: %w", resource, sqlconn.Mark(err))
	}
	return c, tok, true, nil
}

// Drop deletes the fence's tables.
func (f *Fence) Drop(ctx context.Context) error {
	for _, q := range append(f.st.drop, f.schema.DropMeta()) {
		if _, err := f.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlfence: drop tables %s_*: %w", f.cfg.Table, sqlconn.Mark(err))
		}
	}
	return nil
}
