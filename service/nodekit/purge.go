package nodekit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// ErrClusterRunning is matched by the error of [Purge] while a node of
// the cluster still beats.
var ErrClusterRunning = errors.New("nodekit: a node of the cluster still runs")

// Purged is what [Purge] deleted.
type Purged struct {
	// Queues are the queues deleted from the broker.
	Queues []string
	// Tables are the tables dropped from the database.
	Tables []string
}

// Purge deletes what a cluster leaves behind on its broker and database
// once every node has stopped, for tests and demos: the shared queues of
// s.Prefix (api.portal, the dead-letter queue with any message in it),
// every node queue the heartbeat store recorded, the heartbeat store's
// tables, and for each of programs (Config.Name) every table whose name
// starts with TableBase(s.Prefix)+"_"+program+"_" (the program's tables
// and its fence's). Give clusters prefixes whose table bases do not
// nest ("cloudbus" with a program "volume", and "cloudbus.volume",
// would share names). It refuses, with
// [ErrClusterRunning], while any node's heartbeat record is younger than
// the eviction threshold: stop the nodes first. s needs Bus, DB and
// Prefix.
func Purge(ctx context.Context, s Settings, programs ...string) (Purged, error) {
	var p Purged
	if s.Prefix == "" {
		s.Prefix = bus.DefaultPrefix
	}
	base := TableBase(s.Prefix)
	d, err := OpenDatabase(ctx, DatabaseConfig{URL: s.DB, HeartbeatTable: base + "_heartbeat", EvictAfter: s.evictAfter(), AllowNoIdleTimeout: true})
	if err != nil {
		return p, err
	}
	defer d.Close()
	recs, err := d.Heartbeat.List(ctx)
	if err != nil {
		return p, fmt.Errorf("nodekit: purge: list the nodes: %w", err)
	}
	for _, r := range recs {
		if r.Age < s.evictAfter() {
			return p, fmt.Errorf("%w: node %s beat %s ago; stop every node of prefix %s first", ErrClusterRunning, r.Node, r.Age.Round(time.Millisecond), s.Prefix)
		}
	}
	book, err := d.Heartbeat.Queues(ctx)
	if err != nil {
		return p, fmt.Errorf("nodekit: purge: read the recorded queues: %w", err)
	}
	queues := []string{s.Prefix + ".message." + bus.APIPortal, s.Prefix + ".dead"}
	for _, qs := range book {
		queues = append(queues, qs...)
	}
	slices.Sort(queues)
	queues = slices.Compact(queues)
	tr, err := amqpbus.Dial(ctx, s.Transport("purge "+s.Prefix, nil))
	if err != nil {
		return p, fmt.Errorf("nodekit: purge: connect to the broker: %w", err)
	}
	defer tr.Close()
	for _, q := range queues {
		if err := tr.DeleteQueue(ctx, q); err != nil {
			return p, fmt.Errorf("nodekit: purge: delete queue %s: %w", q, err)
		}
		p.Queues = append(p.Queues, q)
	}
	var tables []string
	for _, program := range programs {
		ts, err := listTables(ctx, d.DB(), d.Dialect, base+"_"+program+"_")
		if err != nil {
			return p, fmt.Errorf("nodekit: purge: %w", err)
		}
		tables = append(tables, ts...)
	}
	for _, t := range tables {
		if _, err := d.DB().ExecContext(ctx, "DROP TABLE IF EXISTS "+sqlconn.QuoteIdent(d.Dialect, t)); err != nil {
			return p, fmt.Errorf("nodekit: purge: drop table %s: %w", t, err)
		}
		p.Tables = append(p.Tables, t)
	}
	if err := d.Heartbeat.Drop(ctx); err != nil {
		return p, fmt.Errorf("nodekit: purge: %w", err)
	}
	p.Tables = append(p.Tables, d.Heartbeat.Table()+" (and its _queues and _meta)")
	return p, nil
}

// listTables returns the tables of db's current schema whose names start
// with prefix, sorted.
func listTables(ctx context.Context, db *sql.DB, d sqlstore.Dialect, prefix string) ([]string, error) {
	var q string
	switch d {
	case sqlconn.Postgres:
		q = `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`
	case sqlconn.MySQL:
		q = `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`
	default:
		q = `SELECT name FROM sqlite_master WHERE type = 'table'`
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list the tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, rows.Err()
}
