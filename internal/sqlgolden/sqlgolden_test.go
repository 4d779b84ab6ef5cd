package sqlgolden

import (
	"io"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParse(t *testing.T) {
	t.Parallel()
	f := File{
		Header: []string{"first", "", "\tindented"},
		Schema: []string{`CREATE TABLE "t" (a TEXT)`},
		Rows:   []string{`INSERT INTO "t" (a) VALUES ('x;y')`, `INSERT INTO "t" (a) VALUES (NULL)`},
	}
	text := f.String()
	assert.Equal(t, "-- first\n--\n-- \tindented\nCREATE TABLE \"t\" (a TEXT);\nINSERT INTO \"t\" (a) VALUES ('x;y');\nINSERT INTO \"t\" (a) VALUES (NULL);\n", text,
		"String writes comments, then CREATE, then INSERT statements, one a line; an empty comment line has no trailing space")
	got, err := Parse(text)
	require.NoError(t, err)
	assert.Equal(t, f, got, "Parse reads back what String wrote")

	for _, bad := range []string{
		"CREATE TABLE t (a TEXT)\n",            // no ";"
		"-- ok\nCREATE TABLE t (\n a);\n",      // a statement over two lines
		"DROP TABLE t;\n",                      // not CREATE or INSERT
		"--no space\n",                         // not a comment line
		"-- ok\n\nINSERT INTO t VALUES (1);\n", // an empty line
	} {
		_, err := Parse(bad)
		assert.Error(t, err, "Parse must refuse %q: a golden file is comments and one statement a line", bad)
	}
}

func TestLiteral(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want string
	}{
		{nil, "NULL"},
		{int64(-42), "-42"},
		{2.5, "2.5"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{[]byte{0, 0xab}, "X'00AB'"},
		{[]byte{}, "X''"},
		{"it's", "'it''s'"},
		{"Ünïcode 镜像", "'Ünïcode 镜像'"},
		{"a\nb", "CAST(X'610A62' AS TEXT)"},
		{"\x7f", "CAST(X'7F' AS TEXT)"},
		{"\xff", "CAST(X'FF' AS TEXT)"},
	} {
		got, err := literal(c.in)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "literal(%#v)", c.in)
	}
	_, err := literal(true)
	assert.Error(t, err, "a bool is not one of SQLite's storage classes")
}

// TestDumpLoad dumps tables holding every storage class, loads the dump
// into an empty database and dumps that: the two must be the same, as
// must the tables.
func TestDumpLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	src, _ := openSQLite(t)
	for _, q := range []string{
		`CREATE TABLE "golden_a" (id TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 0, f REAL, b BLOB, s TEXT) WITHOUT ROWID`,
		`CREATE UNIQUE INDEX "golden_a_n" ON "golden_a" (n, s)`,
		`CREATE TABLE "golden_b" (k INTEGER PRIMARY KEY, v TEXT)`,
		`INSERT INTO "golden_a" VALUES ('x', 1, 0.1, X'00FF', 'it''s'), ('y', 2, NULL, NULL, CAST(X'0A0D7F' AS TEXT)), ('z', 3, -1e300, X'', '')`,
		`INSERT INTO "golden_b" VALUES (2, 'two'), (1, NULL)`,
	} {
		_, err := src.DB.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	tables := []string{"golden_a", "golden_b"}
	dumped, err := Dump(ctx, src.DB, []string{"header"}, tables)
	require.NoError(t, err)
	assert.Len(t, dumped.Schema, 3, "two tables and one index (the primary key's automatic index has no SQL)")
	assert.Equal(t, `INSERT INTO "golden_b" (k, v) VALUES (1, NULL)`, dumped.Rows[len(dumped.Rows)-2], "rows in the order of their columns")

	parsed, err := Parse(dumped.String())
	require.NoError(t, err)
	require.Equal(t, dumped, parsed, "a dump's text parses back to the dump")

	dst, _ := openSQLite(t)
	require.NoError(t, Load(ctx, dst.DB, parsed))
	again, err := Dump(ctx, dst.DB, []string{"header"}, tables)
	require.NoError(t, err)
	assert.Equal(t, dumped, again, "loading a dump and dumping it again gives the same file")

	want, err := TableInfo(ctx, src.DB, tables)
	require.NoError(t, err)
	got, err := TableInfo(ctx, dst.DB, tables)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Contains(t, want, "golden_a without_rowid=1")
	assert.Contains(t, want, "  index unique=1 c (n, s)")

	_, err = TableInfo(ctx, src.DB, []string{"golden_missing"})
	assert.ErrorContains(t, err, "golden_missing is missing")
	_, err = Dump(ctx, src.DB, nil, []string{"golden_missing"})
	assert.Error(t, err, "Dump of a missing table")

	err = Load(ctx, dst.DB, File{Schema: []string{`CREATE TABLE "golden_c" (a)`}, Rows: []string{`INSERT INTO "golden_nowhere" VALUES (1)`}})
	assert.ErrorContains(t, err, "golden_nowhere", "the error names the statement")
	_, err = TableInfo(ctx, dst.DB, []string{"golden_c"})
	assert.Error(t, err, "a failed Load leaves nothing: golden_c was rolled back")

	_, err = dst.DB.ExecContext(ctx, "CREATE TABLE \"golden_d\" (\n\ta TEXT\n)")
	require.NoError(t, err)
	_, err = Dump(ctx, dst.DB, nil, []string{"golden_d"})
	assert.ErrorContains(t, err, "spans lines", "a CREATE over several lines cannot go in a golden file")
}

// toyStore is a store for TestRun whose schema version 2 added a column:
// a row of version 1 reads back with no note.
func toyStore(t *testing.T, version int) Store {
	migrations := [][]string{
		{`CREATE TABLE "golden_items" (id TEXT PRIMARY KEY, n INTEGER NOT NULL)`},
		{`ALTER TABLE "golden_items" ADD COLUMN note TEXT`},
	}[:version]
	schema := sqlconn.Schema{Dialect: sqlconn.SQLite, Meta: "golden_meta", Migrations: migrations, Lock: "sqlgolden.toy", Owner: "toy", Elsewhere: "not at all"}
	open := func(t *testing.T, p *sqlconn.Pool, _ string) io.Closer {
		_, err := schema.Migrate(t.Context(), p.DB)
		require.NoError(t, err)
		return io.NopCloser(nil)
	}
	return Store{
		Pkg:    "./internal/sqlgolden",
		Tables: []string{"golden_items", "golden_meta"},
		Meta:   "golden_meta",
		Open:   open,
		Write: func(t *testing.T, p *sqlconn.Pool, url string) []string {
			open(t, p, url)
			q := `INSERT INTO "golden_items" (id, n) VALUES ('a', 1)`
			if version >= 2 {
				q = `INSERT INTO "golden_items" (id, n, note) VALUES ('a', 1, 'noted')`
			}
			_, err := p.DB.ExecContext(t.Context(), q)
			require.NoError(t, err)
			return []string{"toy"}
		},
		Check: func(t *testing.T, v int, p *sqlconn.Pool, url string) {
			open(t, p, url)
			var n int
			var note *string
			q, dest := `SELECT n FROM "golden_items" WHERE id = 'a'`, []any{&n}
			if version >= 2 {
				q, dest = `SELECT n, note FROM "golden_items" WHERE id = 'a'`, []any{&n, &note}
			}
			require.NoError(t, p.DB.QueryRowContext(t.Context(), q).Scan(dest...))
			assert.Equal(t, 1, n)
			switch {
			case version < 2:
			case v >= 2:
				require.NotNil(t, note)
				assert.Equal(t, "noted", *note)
			default:
				assert.Nil(t, note, "a row of version 1 migrated to 2 has no note")
			}
		},
	}
}

// TestRun runs a toy store through the life of its golden files:
// -update-golden writes version 1's file; after a migration it writes
// version 2's and keeps version 1's, which still loads and migrates.
func TestRun(t *testing.T) {
	t.Chdir(t.TempDir()) // Run reads and writes testdata/golden in the working directory
	defer func(was bool) { *update = was }(*update)

	*update = true
	require.True(t, t.Run("update v1", func(t *testing.T) { Run(t, toyStore(t, 1)) }))
	v1, err := os.ReadFile(Path(1))
	require.NoError(t, err, "-update-golden writes today's file")
	assert.Equal(t, "-- toy\n"+
		"CREATE TABLE \"golden_items\" (id TEXT PRIMARY KEY, n INTEGER NOT NULL);\n"+
		"CREATE TABLE \"golden_meta\" (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);\n"+
		"INSERT INTO \"golden_items\" (id, n) VALUES ('a', 1);\n"+
		"INSERT INTO \"golden_meta\" (id, version) VALUES (1, 1);\n", string(v1))

	*update = false
	require.True(t, t.Run("check v1", func(t *testing.T) { Run(t, toyStore(t, 1)) }))

	*update = true
	require.True(t, t.Run("update v2", func(t *testing.T) { Run(t, toyStore(t, 2)) }))
	after, err := os.ReadFile(Path(1))
	require.NoError(t, err)
	assert.Equal(t, string(v1), string(after), "an older file is never rewritten")

	*update = false
	require.True(t, t.Run("check v2", func(t *testing.T) { Run(t, toyStore(t, 2)) }))
	entries, err := os.ReadDir(Dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"v1.sql", "v2.sql"}, names)
}
