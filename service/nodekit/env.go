package nodekit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// Env is what a node's services get to work with: the same in a
// production node ([Run]) and in a servicetest cluster on a SQL store,
// so that a service has one repository, tested as it is shipped.
type Env struct {
	// Node is the node's UUID.
	Node string
	// DB is the pool for the services' transactions (nil in a
	// servicetest cluster kept in memory), with the session
	// settings fencing needs. The heartbeat store has a pool of its own,
	// so that beats never wait behind the services' work.
	DB *sql.DB
	// Dialect is DB's dialect: sqlstore.SQLite, Postgres or MySQL.
	Dialect sqlstore.Dialect
	// Tables is the prefix of the program's own tables, e.g.
	// "cloudbus_volume": name yours <Tables>_<table>. [Schema] creates
	// them.
	Tables string
	// Fence is the fence of the services' writes, on DB, its claims
	// checked against the cluster's heartbeat table. Its tables are
	// <Tables>_fence_*; the node sweeps its expired message records.
	Fence *sqlfence.Fence
	// Store is the node's view of the cluster's heartbeat store. A
	// service rarely needs it: in a servicetest cluster kept in memory
	// (no DB), it is what memfence.New takes.
	Store heartbeat.Store
	// Heartbeat is the cluster's heartbeat timing, defaults filled in.
	Heartbeat heartbeat.Config
	// Logger is the node's logger.
	Logger *slog.Logger
}

// Schema is a program's own tables: created and migrated when a node
// opens them, under a lock every node of the database shares, so that
// nodes started together create them once. Their version is kept in the
// table <Tables>_meta. A node whose code knows an older version than
// the tables refuses to start.
type Schema struct {
	// Migrations returns, for the database's dialect and the tables'
	// prefix (Env.Tables), the statements that take the tables from
	// version v to v+1 at index v: index 0 creates them. Append to it;
	// never change a released step.
	Migrations func(d sqlstore.Dialect, tables string) [][]string
}

// tablePrefix is a valid Env.Tables: it leaves room for the suffixes
// the fence and the meta table add.
var tablePrefix = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

// Migrate creates or migrates s's tables named with prefix tables in
// db, whose dialect is d, and returns the version it found (0: new
// tables). It blocks until the schema lock is granted or ctx ends.
func (s Schema) Migrate(ctx context.Context, db *sql.DB, d sqlstore.Dialect, tables string) (found int, err error) {
	if s.Migrations == nil {
		return 0, errors.New("nodekit: schema: Migrations is nil: give the statements that create the tables")
	}
	if !tablePrefix.MatchString(tables) {
		return 0, fmt.Errorf("nodekit: schema: table prefix %q: use lower-case letters, digits and '_', at most 41 characters", tables)
	}
	steps := s.Migrations(d, tables)
	if len(steps) == 0 {
		return 0, errors.New("nodekit: schema: Migrations returned no step: give at least the one that creates the tables")
	}
	sc := sqlconn.Schema{
		Dialect: d, Meta: tables + "_meta", Migrations: steps,
		Lock: "cloudbus.schema." + tables, Owner: "program", Elsewhere: "use another -prefix",
	}
	found, err = sc.Migrate(ctx, db)
	if err != nil {
		return found, fmt.Errorf("nodekit: tables %s_*: %w", tables, sqlconn.Mark(err))
	}
	return found, nil
}
