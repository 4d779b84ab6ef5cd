package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// dbTables reaches the tables of one refnode cluster in PostgreSQL or
// MySQL/MariaDB: those whose names start with base+"_" (see nodekit.TableBase),
// so that the test can read records and heartbeats directly and drop
// every table it made.
type dbTables struct {
	db      *sql.DB
	dialect sqlconn.Dialect
	base    string
	pool    *sqlconn.Pool
}

// openTables connects to the database dsn names: a postgres:// URL, or a
// mysql:// URL or go-sql-driver/mysql DSN.
func openTables(ctx context.Context, dsn, base string) (*dbTables, error) {
	p, err := sqlconn.Open(sqlconn.Config{URL: dsn})
	if err != nil {
		return nil, fmt.Errorf("open the test database: %w", err)
	}
	if err := p.DB.PingContext(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("connect to %s: %w", p.URL.Masked, err)
	}
	return &dbTables{db: p.DB, dialect: p.URL.Dialect, base: base, pool: p}, nil
}

// table returns the cluster's table base_suffix, quoted for the dialect.
func (d *dbTables) table(suffix string) string {
	return sqlconn.QuoteIdent(d.dialect, d.base+"_"+suffix)
}

// rebind writes query's ? placeholders in the dialect's form.
func (d *dbTables) rebind(query string) string { return sqlconn.Rebind(d.dialect, query) }

// list returns the tables of the current schema (database) whose names
// start with base+"_".
func (d *dbTables) list(ctx context.Context) ([]string, error) {
	q := `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename`
	if d.dialect == sqlconn.MySQL {
		q = `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME`
	}
	rows, err := d.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		if strings.HasPrefix(name, d.base+"_") {
			out = append(out, name)
		}
	}
	return out, rows.Err()
}

// dropAll drops every table of the cluster.
func (d *dbTables) dropAll(ctx context.Context) error {
	names, err := d.list(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if _, err := d.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+sqlconn.QuoteIdent(d.dialect, n)); err != nil {
			errs = append(errs, fmt.Errorf("drop table %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// beatAge returns how long ago, by the database's clock, node's last
// heartbeat landed in the cluster's heartbeat table.
func (d *dbTables) beatAge(ctx context.Context, node string) (time.Duration, error) {
	var us int64
	err := d.db.QueryRowContext(ctx, d.rebind(`SELECT `+sqlconn.NowMicros(d.dialect)+` - beat_us FROM `+d.table("heartbeat")+` WHERE node = ?`), node).Scan(&us)
	if err != nil {
		return 0, fmt.Errorf("read the heartbeat of node %s in %s_heartbeat: %w", node, d.base, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

func (d *dbTables) close() error { return d.pool.Close() }

// mysqlURL writes a go-sql-driver/mysql DSN on TCP (or a mysql:// URL,
// returned as is) as a mysql:// URL.
func mysqlURL(dsn string) (string, error) {
	if strings.HasPrefix(dsn, "mysql://") {
		return dsn, nil
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", errors.New("not a go-sql-driver/mysql DSN")
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("the DSN's network is %s; the process tests need tcp(host:port)", cfg.Net)
	}
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else if cfg.User != "" {
		u.User = url.User(cfg.User)
	}
	q := url.Values{}
	for k, v := range cfg.Params {
		q.Set(k, v)
	}
	if cfg.ParseTime {
		q.Set("parseTime", "true")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
