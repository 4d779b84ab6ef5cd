package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// pgTables reaches the PostgreSQL tables of one refnode cluster: those
// whose names start with base+"_" (see tableBase), so that the test can
// read a heartbeat and drop every table it made.
type pgTables struct {
	db   *sql.DB
	base string
}

// openPGTables connects to the database dsn names.
func openPGTables(ctx context.Context, dsn, base string) (*pgTables, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open PostgreSQL %s: %w", testenv.PostgresVar, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to PostgreSQL (%s): %w", testenv.PostgresVar, err)
	}
	return &pgTables{db: db, base: base}, nil
}

// list returns the tables of the current schema whose names start with
// base+"_", as psql's \dt would show them.
func (p *pgTables) list(ctx context.Context) ([]string, error) {
	rows, err := p.db.QueryContext(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename`)
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
		if strings.HasPrefix(name, p.base+"_") {
			out = append(out, name)
		}
	}
	return out, rows.Err()
}

// dropAll drops every table of the cluster.
func (p *pgTables) dropAll(ctx context.Context) error {
	names, err := p.list(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if _, err := p.db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+n+`"`); err != nil {
			errs = append(errs, fmt.Errorf("drop table %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// beatAge returns how long ago, by the database's clock, node's last
// heartbeat landed in the cluster's heartbeat table.
func (p *pgTables) beatAge(ctx context.Context, node string) (time.Duration, error) {
	var us int64
	err := p.db.QueryRowContext(ctx,
		`SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - beat_us FROM "`+p.base+`_heartbeat" WHERE node = $1`, node).Scan(&us)
	if err != nil {
		return 0, fmt.Errorf("read the heartbeat of node %s in %s_heartbeat: %w", node, p.base, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

func (p *pgTables) close() error { return p.db.Close() }
