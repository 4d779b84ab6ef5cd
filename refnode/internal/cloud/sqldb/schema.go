package sqldb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// schemaVersion is the version of the tables this code reads and writes.
// Open creates missing tables at it and refuses newer ones.
const schemaVersion = 1

// A column of a record table. The key is always the first column, uuid.
type column struct {
	name string
	kind colKind
}

type colKind int

const (
	colKey     colKind = iota // the UUID, primary key
	colText                   // a string
	colInt                    // an integer
	colNullInt                // an integer or NULL (a zero time)
)

// The record tables' columns, in the order of the records' fields.
var (
	hostColumns = []column{
		{"uuid", colKey}, {"name", colText}, {"address", colText}, {"status", colText},
		{"managed_by", colText}, {"takeovers", colInt}, {"connected_us", colNullInt},
	}
	imageColumns = []column{{"uuid", colKey}, {"name", colText}, {"url", colText}, {"size_mb", colInt}}
	vmColumns    = []column{
		{"uuid", colKey}, {"name", colText}, {"image_uuid", colText}, {"host_uuid", colText},
		{"cpus", colInt}, {"memory_mb", colInt}, {"state", colText},
	}
)

// columnTypes are each dialect's SQL types for the column kinds. MySQL's
// key is ASCII with a binary collation, so UUIDs compare and sort byte by
// byte as in the other databases.
var columnTypes = map[sqlstore.Dialect]map[colKind]string{
	SQLite:   {colKey: "TEXT NOT NULL PRIMARY KEY", colText: "TEXT NOT NULL", colInt: "INTEGER NOT NULL", colNullInt: "INTEGER"},
	Postgres: {colKey: "TEXT NOT NULL PRIMARY KEY", colText: "TEXT NOT NULL", colInt: "BIGINT NOT NULL", colNullInt: "BIGINT"},
	MySQL: {
		colKey: "VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY", colText: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
		colInt: "BIGINT NOT NULL", colNullInt: "BIGINT NULL",
	},
}

// tableSQL is the SQL of one record table.
type tableSQL struct {
	name    string // unquoted, for messages
	create  string
	insert  string // all columns; on PostgreSQL and SQLite a duplicate inserts nothing
	get     string // all columns, by uuid
	lockGet string // get, locking the row for the transaction (FOR UPDATE)
	list    string // all columns, ordered by uuid
	update  string // every column but uuid, then uuid
	drop    string
}

// statements are one dialect's SQL for one table prefix.
type statements struct {
	createMeta  string
	insertMeta  string
	readVersion string
	setVersion  string
	dropMeta    string
	hosts       tableSQL
	images      tableSQL
	vms         tableSQL
}

func quote(d sqlstore.Dialect, name string) string {
	if d == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// rebind turns ? placeholders into PostgreSQL's $n. The statements hold
// no literal question marks.
func rebind(d sqlstore.Dialect, q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func newTableSQL(d sqlstore.Dialect, name string, cols []column) tableSQL {
	q := quote(d, name)
	names := make([]string, len(cols))
	defs := make([]string, len(cols))
	marks := make([]string, len(cols))
	sets := make([]string, 0, len(cols)-1)
	for i, c := range cols {
		names[i] = c.name
		defs[i] = c.name + " " + columnTypes[d][c.kind]
		marks[i] = "?"
		if c.kind != colKey {
			sets = append(sets, c.name+" = ?")
		}
	}
	all := strings.Join(names, ", ")
	t := tableSQL{
		name:   name,
		create: "CREATE TABLE IF NOT EXISTS " + q + " (" + strings.Join(defs, ", ") + ")",
		insert: "INSERT INTO " + q + " (" + all + ") VALUES (" + strings.Join(marks, ", ") + ")",
		get:    "SELECT " + all + " FROM " + q + " WHERE uuid = ?",
		list:   "SELECT " + all + " FROM " + q + " ORDER BY uuid",
		update: "UPDATE " + q + " SET " + strings.Join(sets, ", ") + " WHERE uuid = ?",
		drop:   "DROP TABLE IF EXISTS " + q,
	}
	t.lockGet = t.get + " FOR UPDATE"
	switch d {
	case SQLite:
		t.insert += " ON CONFLICT (uuid) DO NOTHING"
		t.lockGet = t.get // BEGIN IMMEDIATE holds the database's write lock
	case Postgres:
		t.insert += " ON CONFLICT (uuid) DO NOTHING"
		t.list = "SELECT " + all + " FROM " + q + ` ORDER BY uuid COLLATE "C"` // byte order, whatever the database's collation
	case MySQL:
		t.create += " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
	}
	t.insert, t.get, t.lockGet, t.update = rebind(d, t.insert), rebind(d, t.get), rebind(d, t.lockGet), rebind(d, t.update)
	return t
}

func newStatements(d sqlstore.Dialect, prefix string) statements {
	m := quote(d, prefix+"_meta")
	s := statements{
		createMeta:  "CREATE TABLE IF NOT EXISTS " + m + " (id INTEGER NOT NULL PRIMARY KEY, version INTEGER NOT NULL)",
		insertMeta:  "INSERT INTO " + m + " (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
		readVersion: "SELECT version FROM " + m + " WHERE id = 1",
		setVersion:  rebind(d, "UPDATE "+m+" SET version = ? WHERE id = 1"),
		dropMeta:    "DROP TABLE IF EXISTS " + m,
		hosts:       newTableSQL(d, prefix+"_hosts", hostColumns),
		images:      newTableSQL(d, prefix+"_images", imageColumns),
		vms:         newTableSQL(d, prefix+"_vms", vmColumns),
	}
	if d == MySQL {
		s.createMeta += " ENGINE=InnoDB"
		s.insertMeta = "INSERT INTO " + m + " (id, version) VALUES (1, 0) ON DUPLICATE KEY UPDATE id = id"
	}
	return s
}

// tables returns the record tables' SQL.
func (s statements) tables() []tableSQL { return []tableSQL{s.hosts, s.images, s.vms} }

// createSchema creates the missing tables and records the schema version
// under the schema lock (see sqlstore.Pool.WithSchemaLock), so that nodes
// opening the store together do it once. It returns the version found
// (0: the tables were new).
func createSchema(ctx context.Context, p *sqlstore.Pool, st statements, prefix string) (found int, err error) {
	err = p.WithSchemaLock(ctx, "refnode.sqldb."+prefix, func(ctx context.Context, ex sqlstore.Execer) error {
		var err error
		found, err = createLocked(ctx, ex, st)
		return err
	})
	return found, err
}

// createLocked does createSchema's work under the lock.
func createLocked(ctx context.Context, ex sqlstore.Execer, st statements) (int, error) {
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
		return found, fmt.Errorf("the tables have schema version %d, newer than this refnode knows (%d): upgrade this node, or use another table prefix", found, schemaVersion)
	}
	if found == schemaVersion {
		return found, nil
	}
	for _, t := range st.tables() {
		if _, err := ex.ExecContext(ctx, t.create); err != nil {
			return found, fmt.Errorf("create table %s: %w", t.name, err)
		}
	}
	if _, err := ex.ExecContext(ctx, st.setVersion, schemaVersion); err != nil {
		return found, fmt.Errorf("record schema version %d: %w", schemaVersion, err)
	}
	return found, nil
}
