package sqldb

import (
	"strings"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

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
var columnTypes = map[sqlconn.Dialect]map[colKind]string{
	sqlconn.SQLite:   {colKey: "TEXT NOT NULL PRIMARY KEY", colText: "TEXT NOT NULL", colInt: "INTEGER NOT NULL", colNullInt: "INTEGER"},
	sqlconn.Postgres: {colKey: "TEXT NOT NULL PRIMARY KEY", colText: "TEXT NOT NULL", colInt: "BIGINT NOT NULL", colNullInt: "BIGINT"},
	sqlconn.MySQL: {
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
	schema sqlconn.Schema // the meta table, and the version the record tables are at
	hosts  tableSQL
	images tableSQL
	vms    tableSQL
}

func newTableSQL(d sqlconn.Dialect, name string, cols []column) tableSQL {
	q := sqlconn.QuoteIdent(d, name)
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
	case sqlconn.SQLite:
		t.insert += " ON CONFLICT (uuid) DO NOTHING"
		t.lockGet = t.get // BEGIN IMMEDIATE holds the database's write lock
	case sqlconn.Postgres:
		t.insert += " ON CONFLICT (uuid) DO NOTHING"
		t.list = "SELECT " + all + " FROM " + q + ` ORDER BY uuid COLLATE "C"` // byte order, whatever the database's collation
	case sqlconn.MySQL:
		t.create += " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
	}
	t.insert, t.get, t.lockGet, t.update = sqlconn.Rebind(d, t.insert), sqlconn.Rebind(d, t.get), sqlconn.Rebind(d, t.lockGet), sqlconn.Rebind(d, t.update)
	return t
}

func newStatements(d sqlconn.Dialect, prefix string) statements {
	s := statements{
		hosts:  newTableSQL(d, prefix+"_hosts", hostColumns),
		images: newTableSQL(d, prefix+"_images", imageColumns),
		vms:    newTableSQL(d, prefix+"_vms", vmColumns),
	}
	s.schema = sqlconn.Schema{
		Dialect: d,
		Meta:    prefix + "_meta",
		// Version 1: the three record tables.
		Migrations: [][]string{{s.hosts.create, s.images.create, s.vms.create}},
		Lock:       "refnode.sqldb." + prefix,
		Owner:      "refnode",
		Elsewhere:  "use another table prefix",
	}
	return s
}

// tables returns the record tables' SQL.
func (s statements) tables() []tableSQL { return []tableSQL{s.hosts, s.images, s.vms} }
