package sqlconn_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// FuzzSchemaVersion writes an arbitrary value (of any SQL type) into the
// meta row's version with a raw UPDATE, or deletes the row, and opens the
// tables again with Schema.Migrate, as every store does when a node
// starts. Migrate never panics: it fails, saying so, on a version it
// cannot read or one newer than it knows, and otherwise reports the
// version found and leaves the tables at its own version.
func FuzzSchemaVersion(f *testing.F) {
	ctx := context.Background()
	p, err := sqlconn.Open(sqlconn.Config{URL: "sqlite:" + filepath.Join(f.TempDir(), "schema.db")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = p.Close() })
	s := sqlconn.Schema{
		Dialect:  sqlconn.SQLite,
		Meta:     "fz_meta",
		Counters: []string{"last_epoch"},
		Migrations: [][]string{
			{`CREATE TABLE IF NOT EXISTS "fz_a" (x INTEGER)`},
			{`CREATE TABLE IF NOT EXISTS "fz_b" (x INTEGER)`},
		},
		Lock: "fuzz", Owner: "fuzz test", Elsewhere: "use another meta table",
	}
	if _, err := s.Migrate(ctx, p.DB); err != nil {
		f.Fatal(err)
	}
	// kind: 0 an integer, 1 a real, 2 a text, 3 a blob, 4 NULL, 5 the
	// integer as text, 6 the meta row deleted.
	// A negative version once made Migrate index its migrations with it
	// and panic.
	for _, v := range []int64{0, 1, 2, 3, 1 << 40, -1, -(1 << 62)} {
		f.Add(byte(0), v, 0.0, "")
	}
	f.Add(byte(1), int64(0), 1.5, "")
	f.Add(byte(1), int64(0), 2.0, "")
	f.Add(byte(2), int64(0), 0.0, "two")
	f.Add(byte(2), int64(0), 0.0, " 1")
	f.Add(byte(3), int64(0), 0.0, "1")
	f.Add(byte(4), int64(0), 0.0, "")
	f.Add(byte(5), int64(2), 0.0, "")
	f.Add(byte(6), int64(0), 0.0, "")
	f.Fuzz(func(t *testing.T, kind byte, n int64, fl float64, str string) {
		var v any
		switch kind % 7 {
		case 0:
			v = n
		case 1:
			v = fl
		case 2:
			v = str
		case 3:
			v = []byte(str)
		case 4:
			v = nil
		case 5:
			v = strconv.FormatInt(n, 10)
		}
		q, args := `UPDATE "fz_meta" SET version = ? WHERE id = 1`, []any{v}
		if kind%7 == 6 {
			q, args = `DELETE FROM "fz_meta"`, nil
		}
		if _, err := p.DB.ExecContext(ctx, q, args...); err != nil {
			return // NULL into a NOT NULL column
		}
		var stored any
		if err := p.DB.QueryRowContext(ctx, `SELECT version FROM "fz_meta" WHERE id = 1`).Scan(&stored); err != nil {
			stored = "(no row)"
		}
		found, err := s.Migrate(ctx, p.DB)
		if err == nil {
			if found < 0 || found > s.Version() {
				t.Fatalf("stored version %#v: Migrate found %d without error, outside 0 to %d", stored, found, s.Version())
			}
			if n, ok := stored.(int64); ok && int64(found) != n {
				t.Fatalf("stored version %d: Migrate found %d", n, found)
			}
			var now int64
			if err := p.DB.QueryRowContext(ctx, `SELECT version FROM "fz_meta" WHERE id = 1`).Scan(&now); err != nil || now != int64(s.Version()) {
				t.Fatalf("stored version %#v: after Migrate the version is %d (%v), want %d", stored, now, err, s.Version())
			}
		} else {
			if n, ok := stored.(int64); ok && n >= 0 && n <= int64(s.Version()) {
				t.Fatalf("stored version %d: Migrate fails: %v", n, err)
			}
			if n, ok := stored.(int64); ok && n > int64(s.Version()) && !strings.Contains(err.Error(), "newer than this fuzz test knows") {
				t.Fatalf("stored version %d: Migrate fails without naming the newer version: %v", n, err)
			}
		}
		// Leave the tables as a store would find them next.
		if _, err := p.DB.ExecContext(ctx, `UPDATE "fz_meta" SET version = ? WHERE id = 1`, s.Version()); err != nil {
			t.Fatal(err)
		}
	})
}
