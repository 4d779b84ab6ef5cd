// Package sqlgolden keeps a SQL store's tables of every schema version
// readable, by golden files on SQLite: each schema version a store ever
// wrote leaves a file of its tables and rows, kept forever, and each test
// run loads every file into a new database, opens today's store on it
// (migrating it) and reads the rows back. A migration that loses or
// misreads data stored by older code then fails a test instead of a
// production upgrade. heartbeat/sqlstore, fence/sqlfence and refnode's
// record store (refnode/internal/cloud/sqldb) each run [Run] from their
// TestGolden; this package is the part they share: the file format, the
// dump and load, and the checks.
//
// The package is internal to cloudbus and only for tests: it imports
// "testing" and defines a command-line flag (see "Updating the files").
//
// # File format
//
// A golden file, testdata/golden/v<N>.sql beside the test ([Dir], [Path]),
// is the tables of schema version N as SQLite stores them, one statement
// a line: comment lines ("-- "), then every CREATE statement as
// sqlite_master holds it, then every row as an INSERT with the columns
// named and each value written in its storage class (integer, 'text',
// X'blob', NULL), rows in the order of their columns. The table names
// carry a fixed placeholder prefix (the tests use "golden"). The file
// loads as is into an empty database, with the sqlite3 shell too. [File]
// holds one, [Parse] reads one, [Dump] makes one from a database and
// [Load] runs one on a database.
//
// # What Run checks
//
// [Run] is a store's whole TestGolden; the [Store] it is given says how
// to open, fill and read back that store. Its subtests:
//
//   - v<N>, for every golden file: load it into a new database, open
//     today's store on it (migrating it), read every row back, and check
//     that the tables are now the tables today's code creates
//     ([TableInfo]: columns, keys and indexes, not the CREATE text, which
//     an ALTER TABLE appends to);
//   - current: the golden file of today's schema version exists, its
//     tables are the tables today's code creates, and its rows are what
//     today's code writes for the golden state.
//
// A file missing between the oldest and today's version, a file newer
// than today's code, or a file in testdata/golden that is not v<N>.sql
// fails the test. Every failure message says what to do.
//
// # Updating the files
//
// After a schema change (a new migration), or when the golden state
// itself changed, write the file of today's version with the
// -update-golden flag, naming the packages that have golden files:
//
//	go test ./heartbeat/sqlstore ./fence/sqlfence ./refnode/internal/cloud/sqldb -run TestGolden -update-golden
//
// Older files are never rewritten, and today's is not rewritten when its
// tables changed without a new version (that needs a migration) or when
// today's code reads its rows differently (rows already stored are in
// the old form). The flag is defined by this package, so it exists only
// in the test binaries that import it: "go test ./... -update-golden"
// fails in every other package with "flag provided but not defined", and
// must not be used.
package sqlgolden

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// update is the -update-golden flag: Run writes the golden file of
// today's schema version. It is read when Run runs, after the testing
// package parsed the flags.
var update = flag.Bool("update-golden", false, "TestGolden: write testdata/golden/v<N>.sql for today's schema version N (older files are never rewritten)")

// Dir is the directory of the golden files, relative to the test's
// package directory (go test's working directory). The files in it are
// kept forever: each version's tables must go on opening and migrating.
const Dir = "testdata/golden"

// Path returns the golden file of schema version v: Dir/v<v>.sql.
func Path(v int) string { return filepath.Join(Dir, fmt.Sprintf("v%d.sql", v)) }

// File is a golden file, each statement one line without its ";". Its
// slices belong to whoever holds the File: nothing here keeps them.
type File struct {
	// Header is the comment lines, each without the leading "-- ": what
	// the file is and how it was written.
	Header []string
	// Schema is the CREATE statements, each table's followed by its
	// indexes, as sqlite_master holds them.
	Schema []string
	// Rows is the INSERT statements, table by table, each table's rows
	// in the order of their columns.
	Rows []string
}

// String returns f as a golden file's text, which [Parse] reads back: a
// line a comment or statement, each line ending in "\n".
func (f File) String() string {
	var b strings.Builder
	for _, h := range f.Header {
		b.WriteString(strings.TrimRight("-- "+h, " ") + "\n")
	}
	for _, s := range slices.Concat(f.Schema, f.Rows) {
		b.WriteString(s + ";\n")
	}
	return b.String()
}

// Parse parses a golden file's text. Every line must be a comment ("--"
// alone or followed by a space), or a CREATE or an INSERT statement
// ending in ";"; anything else is an error naming the line, so that a
// hand edit or a merge that breaks the one-statement-a-line form is
// caught before the file is loaded.
func Parse(text string) (File, error) {
	var f File
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case line == "--" || strings.HasPrefix(line, "-- "):
			f.Header = append(f.Header, strings.TrimPrefix(strings.TrimPrefix(line, "--"), " "))
		case strings.HasPrefix(line, "CREATE ") && strings.HasSuffix(line, ";"):
			f.Schema = append(f.Schema, strings.TrimSuffix(line, ";"))
		case strings.HasPrefix(line, "INSERT ") && strings.HasSuffix(line, ";"):
			f.Rows = append(f.Rows, strings.TrimSuffix(line, ";"))
		default:
			return File{}, fmt.Errorf("line %d: want a comment (\"-- \"), a CREATE or an INSERT statement ending in \";\", got %q", i+1, line)
		}
	}
	return f, nil
}

// read reads the golden file of version v; ok is false if there is none.
func read(v int) (f File, ok bool, err error) {
	text, err := os.ReadFile(Path(v))
	if errors.Is(err, os.ErrNotExist) {
		return File{}, false, nil
	}
	if err != nil {
		return File{}, false, err
	}
	f, err = Parse(string(text))
	if err != nil {
		return File{}, false, fmt.Errorf("%s: %w", Path(v), err)
	}
	return f, true, nil
}

// fileName is a golden file's name.
var fileName = regexp.MustCompile(`^v([1-9][0-9]*)\.sql$`)

// versions returns the versions of the golden files, ascending. A file in
// Dir that is not v<N>.sql is an error.
func versions() ([]int, error) {
	entries, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vs []int
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("%s: only golden files v<N>.sql belong there", filepath.Join(Dir, e.Name()))
		}
		v, _ := strconv.Atoi(m[1])
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs, nil
}

// Dump returns tables of the SQLite database db as a golden file: the
// tables in that order (each must exist), each followed by its indexes,
// then their rows; header becomes the comment. A statement that spans
// lines (a CREATE written over several) is an error, since the file has
// one statement a line. Dump only reads db; run it when nothing else
// writes, or the rows may be of different moments.
func Dump(ctx context.Context, db *sql.DB, header []string, tables []string) (File, error) {
	f := File{Header: header}
	for _, table := range tables {
		var create string
		if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&create); err != nil {
			return File{}, fmt.Errorf("table %s: %w", table, err)
		}
		f.Schema = append(f.Schema, create)
		indexes, err := queryStrings(ctx, db, `SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL ORDER BY name`, table)
		if err != nil {
			return File{}, fmt.Errorf("indexes of %s: %w", table, err)
		}
		f.Schema = append(f.Schema, indexes...)
	}
	for _, table := range tables {
		rows, err := dumpRows(ctx, db, table)
		if err != nil {
			return File{}, fmt.Errorf("rows of %s: %w", table, err)
		}
		f.Rows = append(f.Rows, rows...)
	}
	for _, s := range slices.Concat(f.Schema, f.Rows) {
		if strings.ContainsAny(s, "\r\n") {
			return File{}, fmt.Errorf("statement %q spans lines: a golden file has one statement a line", s)
		}
	}
	return f, nil
}

// dumpRows returns table's rows as INSERT statements, ordered by every
// column in turn.
func dumpRows(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	cols, err := queryStrings(ctx, db, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		return nil, err
	}
	order := make([]string, len(cols))
	for i := range cols {
		order[i] = strconv.Itoa(i + 1)
	}
	q := `"` + table + `"`
	rows, err := db.QueryContext(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+q+" ORDER BY "+strings.Join(order, ", "))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		lits := make([]string, len(vals))
		for i, v := range vals {
			if lits[i], err = literal(v); err != nil {
				return nil, fmt.Errorf("column %s: %w", cols[i], err)
			}
		}
		out = append(out, "INSERT INTO "+q+" ("+strings.Join(cols, ", ")+") VALUES ("+strings.Join(lits, ", ")+")")
	}
	return out, rows.Err()
}

// literal writes a value as SQLite returned it, in its storage class:
// text that is not printable UTF-8 on one line is written as a blob cast
// to text, so that the file stays one statement a line.
func literal(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "NULL", nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case []byte:
		return "X'" + strings.ToUpper(hex.EncodeToString(v)) + "'", nil
	case string:
		if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return "CAST(X'" + strings.ToUpper(hex.EncodeToString([]byte(v))) + "' AS TEXT)", nil
		}
		return "'" + strings.ReplaceAll(v, "'", "''") + "'", nil
	}
	return "", fmt.Errorf("value %#v of type %T: not one of SQLite's storage classes", v, v)
}

// queryStrings returns the first column of a query's rows.
func queryStrings(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Load runs f's statements (Schema, then Rows; not the Header) on db, in
// one transaction: on an error nothing of f stays, and the error names
// the statement that failed. db is meant to be empty, a SQLite database
// made for the test.
func Load(ctx context.Context, db *sql.DB, f File) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, s := range slices.Concat(f.Schema, f.Rows) {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return tx.Commit()
}

// TableInfo describes tables of the SQLite database db as SQLite sees
// them, a line each, for comparing tables a migration made with tables
// made fresh: per table whether it is WITHOUT ROWID, its columns (name,
// type, not null, default, key position) and its indexes (unique,
// origin, columns). The CREATE statements' text may differ between the
// two (an ALTER TABLE appends to it); the tables may not. A missing
// table is an error.
func TableInfo(ctx context.Context, db *sql.DB, tables []string) ([]string, error) {
	var out []string
	for _, table := range tables {
		cols, err := queryStrings(ctx, db, `SELECT name || ' ' || type || ' notnull=' || "notnull" || ' default=' || ifnull(dflt_value, 'none') || ' pk=' || pk FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			return nil, fmt.Errorf("columns of %s: %w", table, err)
		}
		if len(cols) == 0 {
			return nil, fmt.Errorf("table %s is missing", table)
		}
		idx, err := queryStrings(ctx, db, `SELECT il."unique" || ' ' || il.origin || ' (' || (SELECT group_concat(ii.name, ', ') FROM pragma_index_info(il.name) AS ii) || ')' FROM pragma_index_list(?) AS il ORDER BY il.origin, 1`, table)
		if err != nil {
			return nil, fmt.Errorf("indexes of %s: %w", table, err)
		}
		var withoutRowID int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_list(?) WHERE wr = 1`, table).Scan(&withoutRowID); err != nil {
			return nil, fmt.Errorf("table %s: %w", table, err)
		}
		out = append(out, fmt.Sprintf("%s without_rowid=%d", table, withoutRowID))
		for _, c := range cols {
			out = append(out, "  column "+c)
		}
		for _, i := range idx {
			out = append(out, "  index unique="+i)
		}
	}
	return out, nil
}

// Store is what [Run] needs of one store: its tables and how to open,
// fill and read back a store of today's code. Each function gets a new
// SQLite database of its own (a pool closed at the end of the test, and
// its URL), is called from the test's goroutine, and fails the test
// through t rather than returning an error.
type Store struct {
	// Pkg is the package's directory, as go test takes it, for the
	// messages that say what to run: "./heartbeat/sqlstore".
	Pkg string
	// Tables are the store's tables in the golden files, in the order
	// they are dumped (each file has those of its version).
	Tables []string
	// Meta is the table of Tables holding the schema version, in column
	// version of its row with id 1 (sqlconn.Schema's meta table).
	Meta string
	// Open opens today's store on p's database, whose URL is url (a
	// SQLite file), creating or migrating its tables, and returns it to
	// be closed.
	Open func(t *testing.T, p *sqlconn.Pool, url string) io.Closer
	// Write writes the golden state into p's database, empty, with a
	// real store of today's code, and pins the values that come from the
	// database's clock, so that the file does not change from run to
	// run; it returns the golden file's header.
	Write func(t *testing.T, p *sqlconn.Pool, url string) []string
	// Check reads the golden rows back through a store of today's code
	// on p's database, loaded from the golden file of schema version v,
	// and compares them with the values it holds, written by hand; then
	// it uses them (the rows must go on working). Opening the store
	// migrates the tables to today's version.
	Check func(t *testing.T, v int, p *sqlconn.Pool, url string)
}

// openSQLite returns a pool on a new SQLite file, closed at the end of
// the test, and its URL.
func openSQLite(t *testing.T) (*sqlconn.Pool, string) {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "golden.db")
	p, err := sqlconn.Open(sqlconn.Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p, url
}

// version reads the schema version from the meta table.
func (s Store) version(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT version FROM "`+s.Meta+`" WHERE id = 1`).Scan(&v))
	return v
}

// Run is a store's TestGolden, the same for every store: it checks every
// golden file in [Dir] against today's code, in subtests v<N> and
// current, as the package documentation says, and with -update-golden
// writes the golden file of today's version (never an older one). It
// runs in the test's package directory, where Dir is; it does not call
// t.Parallel, and its subtests run one after another.
func Run(t *testing.T, s Store) {
	t.Helper()
	updateCmd := "go test " + s.Pkg + " -run TestGolden -update-golden"

	// Today's tables, made on an empty database.
	p, url := openSQLite(t)
	require.NoError(t, s.Open(t, p, url).Close())
	current := s.version(t, p.DB)
	created, err := Dump(t.Context(), p.DB, nil, s.Tables)
	require.NoError(t, err)
	fresh, err := TableInfo(t.Context(), p.DB, s.Tables)
	require.NoError(t, err)

	check := func(t *testing.T, v int, f File) {
		p, url := openSQLite(t)
		require.NoError(t, Load(t.Context(), p.DB, f), "load the golden file of version %d", v)
		require.Equal(t, v, s.version(t, p.DB), "%s must hold tables of its version", Path(v))
		s.Check(t, v, p, url)
		assert.Equal(t, current, s.version(t, p.DB), "opening the store migrates the tables to today's version")
		migrated, err := TableInfo(t.Context(), p.DB, s.Tables)
		require.NoError(t, err)
		assert.Equal(t, fresh, migrated, "tables migrated from version %d must be the tables today's code creates", v)
	}
	vs, err := versions()
	require.NoError(t, err)
	passed := map[int]bool{}
	for _, v := range vs {
		f, _, err := read(v)
		require.NoError(t, err)
		passed[v] = t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			if v > current {
				t.Fatalf("%s is of schema version %d, newer than today's code (%d): a golden file is written only by the code of its version", Path(v), v, current)
			}
			check(t, v, f)
		})
	}
	if len(vs) > 0 {
		for v := vs[0]; v < current; v++ {
			if !slices.Contains(vs, v) {
				t.Errorf("%s is missing: golden files are kept forever (each version's tables must still open and migrate); restore it from version control", Path(v))
			}
		}
	}

	t.Run("current", func(t *testing.T) {
		old, ok, err := read(current)
		require.NoError(t, err)
		if !ok && !*update {
			t.Fatalf("schema version is %d but %s has no v%d.sql: run\n\t%s\nand keep the old files", current, Dir, current, updateCmd)
		}
		if ok && !slices.Equal(old.Schema, created.Schema) {
			t.Fatalf("today's code creates tables that differ from schema version %d's (%s), without a new version.\n"+
				"A schema change is a migration: append it to the migrations (schema version %d), then run\n\t%s\n"+
				"and keep %s: it must go on opening and migrating.\nVersion %d's tables:\n\t%s\nToday's:\n\t%s",
				current, Path(current), current+1, updateCmd, Path(current),
				current, strings.Join(old.Schema, "\n\t"), strings.Join(created.Schema, "\n\t"))
		}

		p, url := openSQLite(t)
		header := s.Write(t, p, url)
		made, err := Dump(t.Context(), p.DB, header, s.Tables)
		require.NoError(t, err)
		require.Equal(t, created.Schema, made.Schema, "writing the golden state must not change the tables")

		if *update {
			if ok && !passed[current] {
				t.Fatalf("not rewriting %s: today's code does not read its rows as before (subtest v%d failed). Rows already stored are in that form: "+
					"reading them differently needs a migration. If only the golden state changed (the generator and the expected values together), delete %s and run\n\t%s",
					Path(current), current, Path(current), updateCmd)
			}
			require.NoError(t, os.MkdirAll(Dir, 0o755))
			require.NoError(t, os.WriteFile(Path(current), []byte(made.String()), 0o644))
			t.Logf("wrote %s", Path(current))
			if !ok {
				t.Run(fmt.Sprintf("v%d", current), func(t *testing.T) { check(t, current, made) })
			}
			return
		}
		if !slices.Equal(old.Rows, made.Rows) {
			t.Errorf("today's code writes the golden state differently from %s (same tables).\n"+
				"Rows stored by earlier code are in the old form: if today's code still reads them as before (subtest v%d passes), run\n\t%s\n"+
				"to record the new form; if a stored value's meaning changed, that needs a migration.\nIn %s:\n\t%s\nWritten today:\n\t%s",
				Path(current), current, updateCmd, Path(current), strings.Join(old.Rows, "\n\t"), strings.Join(made.Rows, "\n\t"))
		}
		if !slices.Equal(old.Header, made.Header) {
			t.Errorf("the header of %s differs from the generator's: run\n\t%s", Path(current), updateCmd)
		}
	})
}
