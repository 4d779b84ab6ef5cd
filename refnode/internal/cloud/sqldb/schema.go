package sqldb

import (
	"strings"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// A column of a record table. The key is always the first column, uuid.
type column struct {
	name  string
	kind  colKind
	since int // the schema version that added it (with its table, or to it); 0 for version 1
}

type colKind int

const (
	colKey     colKind = iota // the UUID, primary key
	colText                   // a string
	colInt                    // an integer
	colNullInt                // an integer or NULL (a zero time)
	colVersion                // a record's version: an integer, 1 for rows that predate the column
)

// The record tables' columns, in the order of the records' fields.
var (
	hostColumns = []column{
		{"uuid", colKey, 0}, {"name", colText, 0}, {"address", colText, 0}, {"status", colText, 0},
		{"managed_by", colText, 0}, {"takeovers", colInt, 0}, {"connected_us", colNullInt, 0},
	}
	imageColumns = []column{{"uuid", colKey, 0}, {"name", colText, 0}, {"url", colText, 0}, {"size_mb", colInt, 0}}
	vmColumns    = []column{
		{"uuid", colKey, 0}, {"name", colText, 0}, {"image_uuid", colText, 0}, {"host_uuid", colText, 0},
		{"cpus", colInt, 0}, {"memory_mb", colInt, 0}, {"state", colText, 0}, {"version", colVersion, 2},
	}
	// The jobs' table came with schema version 3, whole. Its times are
	// microseconds since 1970, NULL for the zero time.
	jobColumns = []column{
		{"uuid", colKey, 3}, {"kind", colText, 3}, {"resource", colText, 3}, {"args", colText, 3},
		{"state", colText, 3}, {"step", colText, 3}, {"node", colText, 3}, {"code", colText, 3},
		{"error", colText, 3}, {"result", colText, 3}, {"created_us", colNullInt, 3}, {"updated_us", colNullInt, 3},
		{"deadline_us", colNullInt, 3}, {"version", colVersion, 3},
	}
)

// columnTypes are each dialect's SQL types for the column kinds. MySQL's
// key is ASCII with a binary collation, so UUIDs compare and sort byte by
// byte as in the other databases.
var columnTypes = map[sqlconn.Dialect]map[colKind]string{
	sqlconn.SQLite: {
		colKey: "TEXT NOT NULL PRIMARY KEY", colText: "TEXT NOT NULL", colInt: "INTEGER NOT NULL", colNullInt: "INTEGER",
		colVersion: "INTEGER NOT NULL DEFAULT 1",
	},
	sqlconn.Postgres: {
		colKey: "TEXT NOT NULL PRIMARY KEY", colText: "TEXT NOT NULL", colInt: "BIGINT NOT NULL", colNullInt: "BIGINT",
		colVersion: "BIGINT NOT NULL DEFAULT 1",
	},
	sqlconn.MySQL: {
		colKey: "VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY", colText: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
		colInt: "BIGINT NOT NULL", colNullInt: "BIGINT NULL", colVersion: "BIGINT NOT NULL DEFAULT 1",
	},
}

// tableSQL is the SQL of one record table.
type tableSQL struct {
	name    string // unquoted, for messages
	create  string // the table as the schema version that created it has it; later migrations change it
	insert  string // all columns; on PostgreSQL and SQLite a duplicate inserts nothing
	get     string // all columns, by uuid
	lockGet string // get, locking the row for the transaction (FOR UPDATE)
	list    string // all columns, ordered by uuid
	update  string // every column but uuid, then uuid
	del     string // by uuid
	drop    string
}

// statements are one dialect's SQL for one table prefix.
type statements struct {
	schema sqlconn.Schema // the meta table, and the version the record tables are at
	hosts  tableSQL
	images tableSQL
	vms    tableSQL
	jobs   tableSQL
}

// newTableSQL returns the SQL of table name with columns cols, whose
// CREATE statement is the table schema version created made: the
// columns added up to that version (since <= created).
func newTableSQL(d sqlconn.Dialect, name string, cols []column, created int) tableSQL {
	q := sqlconn.QuoteIdent(d, name)
	names := make([]string, len(cols))
	marks := make([]string, len(cols))
	sets := make([]string, 0, len(cols)-1)
	var defs []string
	for i, c := range cols {
		names[i] = c.name
		if c.since <= created {
			defs = append(defs, c.name+" "+columnTypes[d][c.kind])
		}
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
		del:    "DELETE FROM " + q + " WHERE uuid = ?",
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
	t.del = sqlconn.Rebind(d, t.del)
	return t
}

func newStatements(d sqlconn.Dialect, prefix string) statements {
	s := statements{
		hosts:  newTableSQL(d, prefix+"_hosts", hostColumns, 1),
		images: newTableSQL(d, prefix+"_images", imageColumns, 1),
		vms:    newTableSQL(d, prefix+"_vms", vmColumns, 1),
		jobs:   newTableSQL(d, prefix+"_jobs", jobColumns, 3),
	}
	s.schema = sqlconn.Schema{
		Dialect: d,
		Meta:    prefix + "_meta",
		Migrations: [][]string{
			// Version 1: the three record tables.
			{s.hosts.create, s.images.create, s.vms.create},
			// Version 2: the VMs' version (cloud.VM.Version); the rows
			// of version 1 get version 1.
			addColumns(d, prefix+"_vms", vmColumns, 2),
			// Version 3: the jobs' table (cloud.Job), new and empty. Its
			// CREATE … IF NOT EXISTS runs again harmlessly if the meta
			// row is lost.
			{s.jobs.create},
		},
		Lock:      "refnode.sqldb." + prefix,
		Owner:     "refnode",
		Elsewhere: "use another table prefix",
	}
	return s
}

// tables returns the record tables' SQL.
func (s statements) tables() []tableSQL { return []tableSQL{s.hosts, s.images, s.vms, s.jobs} }

// addColumns returns the statements that add to table the columns of
// cols that schema version v added, each a step that may run again on a
// table that has the column (MySQL cannot roll a failed step back, and a
// lost meta row runs every step again): PostgreSQL's ADD COLUMN IF NOT
// EXISTS; on MySQL an ALTER prepared only if information_schema lacks
// the column, on the migration's connection; SQLite has neither, and
// adds the column in the migration's transaction (see the package
// documentation for a lost meta row).
func addColumns(d sqlconn.Dialect, table string, cols []column, v int) []string {
	q := sqlconn.QuoteIdent(d, table)
	var out []string
	for _, c := range cols {
		if c.since != v {
			continue
		}
		def := c.name + " " + columnTypes[d][c.kind]
		switch d {
		case sqlconn.Postgres:
			out = append(out, "ALTER TABLE "+q+" ADD COLUMN IF NOT EXISTS "+def)
		case sqlconn.MySQL:
			out = append(out,
				"SET @refnode_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE "+q+" ADD COLUMN "+def+"', 'DO 0') "+
					"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '"+table+"' AND COLUMN_NAME = '"+c.name+"')",
				"PREPARE refnode_ddl FROM @refnode_ddl",
				"EXECUTE refnode_ddl",
				"DEALLOCATE PREPARE refnode_ddl",
			)
		default:
			out = append(out, "ALTER TABLE "+q+" ADD COLUMN "+def)
		}
	}
	return out
}
