package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// Store is a [cloud.Store] in SQL tables. It is safe for concurrent use,
// and any number of Stores, in any number of processes, may share the
// tables (see the package documentation for how updates stay atomic).
// Every method honours ctx. Close it when done, before its pool: the pool
// is the caller's.
type Store struct {
	db     *sql.DB
	url    sqlconn.URL // names the database in errors and logs, masked
	prefix string
	st     statements
	fence  *sqlfence.Fence

	// q runs the statements: db, or tx in a Store bound to one
	// transaction by [Store.Do].
	q     querier
	tx    *sql.Tx
	claim fence.Claim // the claim of the Do that bound tx

	closed *atomic.Bool // shared by the Stores bound to transactions
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var _ cloud.Store = (*Store)(nil)

// Open returns a store on p, the database pool of the caller (refnode
// serve shares one with its heartbeat store), after creating the tables
// if they are missing. It fails if the database cannot be reached within
// ctx. p stays the caller's: close it after the store.
func Open(ctx context.Context, p *sqlconn.Pool, cfg Config) (*Store, error) {
	if p == nil {
		return nil, errors.New("sqldb: Open: the pool is nil; open one with sqlconn.Open")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Store{db: p.DB, q: p.DB, url: p.URL, prefix: cfg.Prefix, st: newStatements(p.URL.Dialect, cfg.Prefix), closed: new(atomic.Bool)}
	found, err := s.st.schema.Migrate(ctx, p.DB)
	if err != nil {
		return nil, s.fail(ctx, "open tables "+cfg.Prefix+"_*", err)
	}
	if s.fence = cfg.Fence; s.fence == nil {
		if s.fence, err = sqlfence.Open(ctx, p.DB, sqlfence.Config{
			Dialect: p.URL.Dialect, HeartbeatTable: cfg.HeartbeatTable, Table: cfg.Prefix + "_fence", MaxAge: cfg.MaxAge, Logger: cfg.Logger,
		}); err != nil {
			return nil, fmt.Errorf("sqldb: %w", err)
		}
	}
	log := cfg.Logger.With("dialect", p.URL.Dialect.String(), "url", p.URL.Masked, "prefix", cfg.Prefix)
	if found < s.st.schema.Version() {
		log.Info("sqldb: tables created", "schema_version", s.st.schema.Version())
	}
	log.Info("sqldb: opened")
	return s, nil
}

// Dialect returns the store's SQL dialect.
func (s *Store) Dialect() sqlconn.Dialect { return s.url.Dialect }

// MaskedURL returns the database URL with its password masked, as the
// store's errors and logs name it.
func (s *Store) MaskedURL() string { return s.url.Masked }

// Tables returns the names of the store's tables. The caller owns the
// slice.
func (s *Store) Tables() []string {
	return append([]string{s.st.hosts.name, s.st.images.name, s.st.vms.name, s.st.jobs.name, s.prefix + "_meta"}, s.fence.Tables()...)
}

// Fence returns the store's fence, whose tables sit beside the records'.
func (s *Store) Fence() *sqlfence.Fence { return s.fence }

// Do implements [cloud.Store.Do] with sqlfence: one SQL transaction that
// checks w.Claim first, records w.Key, runs fn on a Store bound to the
// transaction, and commits.
func (s *Store) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	if s.tx != nil {
		return nil, errors.New("sqldb: Do inside Do: use the transaction's store")
	}
	if err := s.begin(ctx, "transaction", "", ""); err != nil {
		return nil, err
	}
	return s.fence.Do(ctx, w, func(ctx context.Context, tx *sql.Tx, _ fence.Token) ([]byte, error) {
		bound := *s
		bound.q, bound.tx, bound.claim = tx, tx, w.Claim
		return fn(ctx, &bound)
	})
}

// Verify implements [cloud.Store.Verify] with sqlfence.Fence.Verify.
func (s *Store) Verify(ctx context.Context) error {
	if s.tx == nil || s.claim.IsZero() {
		return nil
	}
	return s.fence.Verify(ctx, s.tx, s.claim)
}

// Close makes every later call fail with an error matching
// message.ErrClosed; calls in flight finish. It leaves the pool open: the
// caller closes it. It is idempotent and returns nil.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// record describes how one kind of record maps to its table.
type record[T any] struct {
	kind string // "host", "image", "vm", "job"
	sql  func(*Store) tableSQL
	uuid func(*T) string
	args func(*T) []any // column values in table order, uuid first
	dest func(*T) (dest []any, done func() error)
	// version, if set, is the record's Version: 1 at an add, one more
	// at every update (cloud.Store.UpdateVM).
	version func(*T) *int64
	// check, if set, checks the fields other than the UUID at an add
	// and after an update (a job's Resource).
	check func(*T) error
}

// microsOf returns t as microseconds since 1970, or NULL for the zero
// time.
func microsOf(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// timeOf reads a time stored by microsOf: the zero time for NULL, else
// the time in UTC, which must be in the years 1 to 9999 (JSON cannot
// carry others). what names the record and column for the error.
func timeOf(us sql.NullInt64, what string) (time.Time, error) {
	if !us.Valid {
		return time.Time{}, nil
	}
	t := time.UnixMicro(us.Int64).UTC()
	if y := t.Year(); y < 1 || y > 9999 {
		return time.Time{}, fmt.Errorf("%s %d is in year %d, outside 1 to 9999", what, us.Int64, y)
	}
	return t, nil
}

var hostRecord = record[cloud.Host]{
	kind: "host",
	sql:  func(s *Store) tableSQL { return s.st.hosts },
	uuid: func(h *cloud.Host) string { return h.UUID },
	args: func(h *cloud.Host) []any {
		return []any{h.UUID, h.Name, h.Address, string(h.Status), h.ManagedBy, int64(h.Takeovers), microsOf(h.ConnectedAt)}
	},
	dest: func(h *cloud.Host) ([]any, func() error) {
		var status string
		var takeovers int64
		var at sql.NullInt64
		return []any{&h.UUID, &h.Name, &h.Address, &status, &h.ManagedBy, &takeovers, &at}, func() error {
			h.Status, h.Takeovers = cloud.HostStatus(status), int(takeovers)
			var err error
			h.ConnectedAt, err = timeOf(at, "host "+h.UUID+": connected_us")
			return err
		}
	},
}

var imageRecord = record[cloud.Image]{
	kind: "image",
	sql:  func(s *Store) tableSQL { return s.st.images },
	uuid: func(img *cloud.Image) string { return img.UUID },
	args: func(img *cloud.Image) []any { return []any{img.UUID, img.Name, img.URL, img.SizeMB} },
	dest: func(img *cloud.Image) ([]any, func() error) {
		return []any{&img.UUID, &img.Name, &img.URL, &img.SizeMB}, func() error { return nil }
	},
}

var vmRecord = record[cloud.VM]{
	kind: "vm",
	sql:  func(s *Store) tableSQL { return s.st.vms },
	uuid: func(vm *cloud.VM) string { return vm.UUID },
	args: func(vm *cloud.VM) []any {
		return []any{vm.UUID, vm.Name, vm.ImageUUID, vm.HostUUID, int64(vm.CPUs), int64(vm.MemoryMB), string(vm.State), vm.Version}
	},
	dest: func(vm *cloud.VM) ([]any, func() error) {
		var cpus, mem int64
		var state string
		return []any{&vm.UUID, &vm.Name, &vm.ImageUUID, &vm.HostUUID, &cpus, &mem, &state, &vm.Version}, func() error {
			vm.CPUs, vm.MemoryMB, vm.State = int(cpus), int(mem), cloud.VMState(state)
			return nil
		}
	},
	version: func(vm *cloud.VM) *int64 { return &vm.Version },
}

var jobRecord = record[cloud.Job]{
	kind: "job",
	sql:  func(s *Store) tableSQL { return s.st.jobs },
	uuid: func(j *cloud.Job) string { return j.UUID },
	args: func(j *cloud.Job) []any {
		return []any{j.UUID, j.Kind, j.Resource, j.Args, string(j.State), j.Step, j.Node, j.Code, j.Error, j.Result,
			microsOf(j.CreatedAt), microsOf(j.UpdatedAt), microsOf(j.Deadline), j.Version}
	},
	dest: func(j *cloud.Job) ([]any, func() error) {
		var state string
		var created, updated, deadline sql.NullInt64
		dest := []any{&j.UUID, &j.Kind, &j.Resource, &j.Args, &state, &j.Step, &j.Node, &j.Code, &j.Error, &j.Result,
			&created, &updated, &deadline, &j.Version}
		return dest, func() error {
			j.State = cloud.JobState(state)
			var errs [3]error
			j.CreatedAt, errs[0] = timeOf(created, "job "+j.UUID+": created_us")
			j.UpdatedAt, errs[1] = timeOf(updated, "job "+j.UUID+": updated_us")
			j.Deadline, errs[2] = timeOf(deadline, "job "+j.UUID+": deadline_us")
			return errors.Join(errs[:]...)
		}
	},
	version: func(j *cloud.Job) *int64 { return &j.Version },
	check:   func(j *cloud.Job) error { return cloud.CheckUUID("job resource", j.Resource) },
}

// AddHost implements [cloud.Store.AddHost] with one INSERT.
func (s *Store) AddHost(ctx context.Context, h cloud.Host) error { return add(ctx, s, hostRecord, &h) }

// Host implements [cloud.Store.Host].
func (s *Store) Host(ctx context.Context, uuid string) (cloud.Host, error) {
	return get(ctx, s, hostRecord, uuid)
}

// Hosts implements [cloud.Store.Hosts].
func (s *Store) Hosts(ctx context.Context) ([]cloud.Host, error) { return list(ctx, s, hostRecord) }

// UpdateHost implements [cloud.Store.UpdateHost] in a transaction that
// locks the host's row first.
func (s *Store) UpdateHost(ctx context.Context, uuid string, update func(*cloud.Host) error) (cloud.Host, error) {
	return modify(ctx, s, hostRecord, uuid, update)
}

// AddImage implements [cloud.Store.AddImage] with one INSERT.
func (s *Store) AddImage(ctx context.Context, img cloud.Image) error {
	return add(ctx, s, imageRecord, &img)
}

// Image implements [cloud.Store.Image].
func (s *Store) Image(ctx context.Context, uuid string) (cloud.Image, error) {
	return get(ctx, s, imageRecord, uuid)
}

// Images implements [cloud.Store.Images].
func (s *Store) Images(ctx context.Context) ([]cloud.Image, error) {
	return list(ctx, s, imageRecord)
}

// UpdateImage implements [cloud.Store.UpdateImage] in a transaction that
// locks the image's row first.
func (s *Store) UpdateImage(ctx context.Context, uuid string, update func(*cloud.Image) error) (cloud.Image, error) {
	return modify(ctx, s, imageRecord, uuid, update)
}

// LockImage implements [cloud.Store.LockImage]: in a transaction one
// SELECT … FOR UPDATE (SQLite's BEGIN IMMEDIATE holds the database),
// else Image.
func (s *Store) LockImage(ctx context.Context, uuid string) (cloud.Image, error) {
	if s.tx == nil {
		return s.Image(ctx, uuid)
	}
	op := "lock image " + uuid
	if err := s.begin(ctx, op, "image", uuid); err != nil {
		return cloud.Image{}, err
	}
	img, err := scan(s.tx.QueryRowContext(ctx, s.st.images.lockGet, uuid), imageRecord)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cloud.Image{}, cloud.NotFound("image", uuid)
	case err != nil:
		return cloud.Image{}, s.fail(ctx, op, err)
	}
	return img, nil
}

// DeleteImage implements [cloud.Store.DeleteImage] with one DELETE; in a
// transaction it holds the row's lock until the commit.
func (s *Store) DeleteImage(ctx context.Context, uuid string) error {
	return del(ctx, s, imageRecord, uuid)
}

// AddVM implements [cloud.Store.AddVM] with one INSERT.
func (s *Store) AddVM(ctx context.Context, vm cloud.VM) error { return add(ctx, s, vmRecord, &vm) }

// VM implements [cloud.Store.VM].
func (s *Store) VM(ctx context.Context, uuid string) (cloud.VM, error) {
	return get(ctx, s, vmRecord, uuid)
}

// VMs implements [cloud.Store.VMs].
func (s *Store) VMs(ctx context.Context) ([]cloud.VM, error) { return list(ctx, s, vmRecord) }

// UpdateVM implements [cloud.Store.UpdateVM] in a transaction that locks
// the VM's row first.
func (s *Store) UpdateVM(ctx context.Context, uuid string, update func(*cloud.VM) error) (cloud.VM, error) {
	return modify(ctx, s, vmRecord, uuid, update)
}

// AddJob implements [cloud.Store.AddJob] with one INSERT.
func (s *Store) AddJob(ctx context.Context, j cloud.Job) error { return add(ctx, s, jobRecord, &j) }

// Job implements [cloud.Store.Job].
func (s *Store) Job(ctx context.Context, uuid string) (cloud.Job, error) {
	return get(ctx, s, jobRecord, uuid)
}

// Jobs implements [cloud.Store.Jobs].
func (s *Store) Jobs(ctx context.Context) ([]cloud.Job, error) { return list(ctx, s, jobRecord) }

// UpdateJob implements [cloud.Store.UpdateJob] in a transaction that
// locks the job's row first.
func (s *Store) UpdateJob(ctx context.Context, uuid string, update func(*cloud.Job) error) (cloud.Job, error) {
	return modify(ctx, s, jobRecord, uuid, update)
}

// begin checks, before op starts, that the store is open, ctx is not
// done and the UUID (if any) is canonical, so such a call changes
// nothing.
func (s *Store) begin(ctx context.Context, op, kind, uuid string) error {
	if s.closed.Load() {
		return fmt.Errorf("sqldb: %s: %w", op, message.ErrClosed.WithDetails("the store is closed"))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqldb: %s: %w", op, err)
	}
	if kind != "" {
		return cloud.CheckUUID(kind, uuid)
	}
	return nil
}

func add[T any](ctx context.Context, s *Store, r record[T], rec *T) error {
	id := r.uuid(rec)
	op := "add " + r.kind + " " + id
	if err := s.begin(ctx, op, r.kind, id); err != nil {
		return err
	}
	if r.check != nil {
		if err := r.check(rec); err != nil {
			return err
		}
	}
	if r.version != nil {
		*r.version(rec) = 1
	}
	res, err := s.q.ExecContext(ctx, r.sql(s).insert, r.args(rec)...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1062: // ER_DUP_ENTRY
		return cloud.Exists(r.kind, id)
	case err != nil:
		return s.fail(ctx, op, err)
	case n == 0: // ON CONFLICT DO NOTHING
		return cloud.Exists(r.kind, id)
	}
	return nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scan[T any](sc scanner, r record[T]) (T, error) {
	var rec T
	dest, done := r.dest(&rec)
	if err := sc.Scan(dest...); err != nil {
		return rec, err
	}
	return rec, done()
}

func get[T any](ctx context.Context, s *Store, r record[T], uuid string) (T, error) {
	var zero T
	op := "get " + r.kind + " " + uuid
	if err := s.begin(ctx, op, r.kind, uuid); err != nil {
		return zero, err
	}
	var rec T
	err := s.read(ctx, func() error {
		var err error
		rec, err = scan(s.q.QueryRowContext(ctx, r.sql(s).get, uuid), r)
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return zero, cloud.NotFound(r.kind, uuid)
	case err != nil:
		return zero, s.fail(ctx, op, err)
	}
	return rec, nil
}

func list[T any](ctx context.Context, s *Store, r record[T]) ([]T, error) {
	op := "list " + r.kind + "s"
	if err := s.begin(ctx, op, "", ""); err != nil {
		return nil, err
	}
	var rows *sql.Rows
	err := s.read(ctx, func() error {
		var err error
		rows, err = s.q.QueryContext(ctx, r.sql(s).list)
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		rec, err := scan(rows, r)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// modify runs update on the record in a transaction holding its row lock
// (BEGIN IMMEDIATE's write lock on SQLite).
func modify[T any](ctx context.Context, s *Store, r record[T], uuid string, update func(*T) error) (T, error) {
	var zero T
	op := "update " + r.kind + " " + uuid
	if err := s.begin(ctx, op, r.kind, uuid); err != nil {
		return zero, err
	}
	tx, committed := s.tx, true // bound: the caller's transaction commits
	if tx == nil {
		var err error
		if tx, err = s.db.BeginTx(ctx, nil); err != nil {
			return zero, s.fail(ctx, op+": begin", err)
		}
		committed = false
		defer func() {
			if !committed {
				_ = tx.Rollback()
			}
		}()
	}
	t := r.sql(s)
	rec, err := scan(tx.QueryRowContext(ctx, t.lockGet, uuid), r)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return zero, cloud.NotFound(r.kind, uuid)
	case err != nil:
		return zero, s.fail(ctx, op+": lock the row", err)
	}
	var next int64
	if r.version != nil { // the row is locked: the stored version is the latest
		if next, err = cloud.NextVersion(r.kind, uuid, *r.version(&rec)); err != nil {
			return zero, err
		}
	}
	if err := update(&rec); err != nil {
		return zero, err
	}
	if got := r.uuid(&rec); got != uuid {
		return zero, message.ErrBadRequest.WithDetails(fmt.Sprintf("sqldb: update of %s %s changed its UUID to %q; UUIDs never change", r.kind, uuid, got))
	}
	if r.check != nil {
		if err := r.check(&rec); err != nil {
			return zero, err
		}
	}
	if r.version != nil {
		*r.version(&rec) = next
	}
	args := r.args(&rec)
	if _, err := tx.ExecContext(ctx, t.update, append(args[1:], uuid)...); err != nil {
		return zero, s.fail(ctx, op, err)
	}
	if s.tx == nil {
		if err := tx.Commit(); err != nil {
			return zero, s.fail(ctx, op+": commit", err)
		}
		committed = true
	}
	return rec, nil
}

// del deletes the record; no row deleted is message.ErrNotFound.
func del[T any](ctx context.Context, s *Store, r record[T], uuid string) error {
	op := "delete " + r.kind + " " + uuid
	if err := s.begin(ctx, op, r.kind, uuid); err != nil {
		return err
	}
	res, err := s.q.ExecContext(ctx, r.sql(s).del, uuid)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		return s.fail(ctx, op, err)
	case n == 0:
		return cloud.NotFound(r.kind, uuid)
	}
	return nil
}

// drop deletes the store's tables; tests use it to clean up.
func (s *Store) drop(ctx context.Context) error {
	var stmts []string
	for _, t := range s.st.tables() {
		stmts = append(stmts, t.drop)
	}
	if err := s.fence.Drop(ctx); err != nil {
		return err
	}
	for _, stmt := range append(stmts, s.st.schema.DropMeta()) {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return s.fail(ctx, "drop tables "+s.prefix+"_*", err)
		}
	}
	return nil
}

// fail wraps a database error: "sqldb: OP on URL: ERR", with the URL
// masked and passwords scrubbed from the driver's text. The chain keeps
// the driver's error and, if ctx ended, ctx's error, for errors.Is.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	return fmt.Errorf("sqldb: %w", s.url.Fail(ctx, op, err))
}

// read runs a read once more if it failed on a broken connection (a pool
// connection the database or the network dropped since its last use, as
// after an outage): a read changes nothing, so running it again is safe,
// and the pool then dials a fresh connection. Inside a transaction the
// connection is the transaction's, so it is not retried.
func (s *Store) read(ctx context.Context, f func() error) error {
	err := f()
	if err != nil && s.tx == nil && ctx.Err() == nil && sqlconn.BrokenConn(err) {
		err = f()
	}
	return err
}
