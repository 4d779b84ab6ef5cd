package servicetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// Database describes the SQL database of a cluster (see
// [Options].Database), as [Cluster.Database] returns it.
type Database struct {
	// Dialect is sqlstore.SQLite, sqlstore.Postgres or sqlstore.MySQL.
	Dialect sqlstore.Dialect
	// URL names the database, its password masked.
	URL string
	// Prefix starts the name of every table of the cluster: "st" and 8
	// random hexadecimal digits. Close drops every table whose name
	// starts with it.
	Prefix string
	// HeartbeatTable is the heartbeat store's table, Prefix+"_heartbeat";
	// the store keeps its _queues and _meta tables beside it.
	HeartbeatTable string
	// Tables is every node's Env.Tables, Prefix+"_app": the prefix of the
	// services' tables, of the fence's (Tables+"_fence_*") and of the
	// Schema's meta table (Tables+"_meta").
	Tables string
	// Dir is the temporary directory holding the SQLite file, removed by
	// Close; "" on PostgreSQL and MySQL.
	Dir string
}

// adminConns caps the cluster's own pool ([Cluster.DB]); each node's
// pools are a production node's (nodekit.OpenDatabase).
const adminConns = 2

// dropTimeout bounds the drop of a cluster's tables at Close.
const dropTimeout = 30 * time.Second

// sqlCluster is a cluster's database: where it is, the names of its
// tables, and the pool of the cluster itself.
type sqlCluster struct {
	info  Database
	url   string        // the URL the nodes connect with, password and all
	admin *sqlconn.Pool // the cluster's own pool: the test's reads and the drop at close
	log   *slog.Logger
}

// openSQL checks raw (Options.Database, not "") and connects to it; for
// "sqlite" it creates the temporary directory first. On failure it
// removes what it made.
func openSQL(ctx context.Context, raw string, log *slog.Logger) (_ *sqlCluster, err error) {
	prefix, err := randomPrefix()
	if err != nil {
		return nil, err
	}
	d := &sqlCluster{
		info: Database{Prefix: prefix, HeartbeatTable: prefix + "_heartbeat", Tables: prefix + "_app"},
		url:  raw,
		log:  log,
	}
	if raw == "sqlite" {
		if d.info.Dir, err = os.MkdirTemp("", "servicetest-"); err != nil {
			return nil, fmt.Errorf("servicetest: a directory for the SQLite file: %w", err)
		}
		d.url = "sqlite:" + filepath.Join(d.info.Dir, "cluster.db")
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close())
		}
	}()
	u, err := sqlconn.ParseURL(d.url, sqlconn.Auto)
	if err != nil {
		return nil, fmt.Errorf("servicetest: Options.Database: %w; use \"sqlite\", postgres://... or a MySQL DSN", err)
	}
	if u.Dialect == sqlconn.SQLite && raw != "sqlite" {
		return nil, fmt.Errorf("servicetest: Options.Database %s: use \"sqlite\", for a SQLite file in a temporary directory that Close removes", u.Masked)
	}
	d.info.Dialect, d.info.URL = u.Dialect, u.Masked
	if d.admin, err = sqlconn.Open(sqlconn.Config{URL: d.url, MaxOpenConns: adminConns, Logger: log}); err != nil {
		return nil, fmt.Errorf("servicetest: Options.Database: %w", err)
	}
	if err := d.admin.DB.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("servicetest: %w; check Options.Database and that the database runs", d.admin.URL.Fail(ctx, "connect", err))
	}
	return d, nil
}

// randomPrefix returns a cluster's table prefix: "st" and 8 random
// hexadecimal digits, neither '_' nor '%', so that it is its own LIKE
// pattern.
func randomPrefix() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("servicetest: a random table prefix: %w", err)
	}
	return "st" + hex.EncodeToString(b), nil
}

// nodeDB is what a node of a cluster on SQL opened: its pools, its
// heartbeat store and the view of it the node uses, and its fence.
type nodeDB struct {
	db    *nodekit.Database
	store *sqlstore.Store
	view  *storeView
	fence *sqlfence.Fence
}

// openNode opens node id's pools, heartbeat store and fence, and
// migrates the services' tables of opts.Schema, creating the cluster's
// tables that are missing. On failure it closes what it opened.
func (d *sqlCluster) openNode(ctx context.Context, id string, opts Options) (_ *nodeDB, err error) {
	// Opened as a production node opens them (nodekit.OpenDatabase): a
	// pool for the heartbeat store, one for the services, both bounding
	// a transaction's idle time by the eviction threshold. MySQL, which
	// cannot, is accepted here: a test is not production.
	ndb, err := nodekit.OpenDatabase(ctx, nodekit.DatabaseConfig{URL: d.url, HeartbeatTable: d.info.HeartbeatTable,
		EvictAfter: opts.Heartbeat.WithDefaults().EvictAfter, AllowNoIdleTimeout: true, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("open its database: %w", err)
	}
	n := &nodeDB{db: ndb, store: ndb.Heartbeat}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.close())
		}
	}()
	n.view = &storeView{s: n.store, node: id}
	n.fence, err = sqlfence.Open(ctx, ndb.DB(), sqlfence.Config{
		Dialect:        d.info.Dialect,
		HeartbeatTable: n.store.Table(),
		Table:          d.info.Tables + "_fence",
		MaxAge:         opts.Heartbeat.WithDefaults().EvictAfter,
		Logger:         opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("open its fence: %w", err)
	}
	if opts.Schema != nil {
		if _, err := opts.Schema.Migrate(ctx, ndb.DB(), d.info.Dialect, d.info.Tables); err != nil {
			return nil, fmt.Errorf("migrate Options.Schema: %w", err)
		}
	}
	return n, nil
}

// close closes the node's store and pools; the fence holds none. It is
// called once.
func (n *nodeDB) close() error {
	return n.db.Close()
}

// close drops every table of the cluster (on SQLite, removes the
// directory), then closes the cluster's pool. The nodes' pools must be
// closed first. It is called once.
func (d *sqlCluster) close() error {
	var errs []error
	if d.admin != nil {
		if d.info.Dir == "" {
			ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
			errs = append(errs, d.drop(ctx))
			cancel()
		}
		errs = append(errs, d.admin.Close())
	}
	if d.info.Dir != "" {
		if err := os.RemoveAll(d.info.Dir); err != nil {
			errs = append(errs, fmt.Errorf("servicetest: remove the SQLite directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// tables returns the cluster's tables, as the database's catalog lists
// them, sorted.
func (d *sqlCluster) tables(ctx context.Context) ([]string, error) {
	var q string
	switch d.info.Dialect {
	case sqlconn.Postgres:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name LIKE $1`
	case sqlconn.MySQL:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' AND table_name LIKE ?`
	default:
		q = `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?`
	}
	rows, err := d.admin.DB.QueryContext(ctx, q, d.info.Prefix+"%")
	if err != nil {
		return nil, fmt.Errorf("servicetest: %w", d.admin.URL.Fail(ctx, "list the tables "+d.info.Prefix+"*", err))
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("servicetest: %w", d.admin.URL.Fail(ctx, "list the tables "+d.info.Prefix+"*", err))
		}
		if strings.HasPrefix(name, d.info.Prefix) { // LIKE may ignore case
			names = append(names, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("servicetest: %w", d.admin.URL.Fail(ctx, "list the tables "+d.info.Prefix+"*", err))
	}
	slices.Sort(names)
	return names, nil
}

// drop drops every table of the cluster, whatever foreign keys join
// them.
func (d *sqlCluster) drop(ctx context.Context) error {
	names, err := d.tables(ctx)
	if err != nil || len(names) == 0 {
		return err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = sqlconn.QuoteIdent(d.info.Dialect, n)
	}
	stmt := "DROP TABLE IF EXISTS " + strings.Join(quoted, ", ")
	fail := func(err error) error {
		return fmt.Errorf("servicetest: %w; drop them by hand", d.admin.URL.Fail(ctx, "drop the tables "+strings.Join(names, ", "), err))
	}
	switch d.info.Dialect {
	case sqlconn.Postgres:
		if _, err := d.admin.DB.ExecContext(ctx, stmt+" CASCADE"); err != nil {
			return fail(err)
		}
	case sqlconn.MySQL:
		conn, err := d.admin.DB.Conn(ctx) // the session setting holds on this connection alone
		if err != nil {
			return fail(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SET FOREIGN_KEY_CHECKS = 0"); err != nil {
			return fail(err)
		}
		_, err = conn.ExecContext(ctx, stmt)
		if _, rerr := conn.ExecContext(ctx, "SET FOREIGN_KEY_CHECKS = 1"); err == nil && rerr != nil {
			err = rerr
		}
		if err != nil {
			return fail(err)
		}
	default: // SQLite drops one table per statement
		for _, q := range quoted {
			if _, err := d.admin.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+q); err != nil {
				return fail(err)
			}
		}
	}
	return nil
}
