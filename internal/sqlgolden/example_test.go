package sqlgolden_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/sqlgolden"
)

// Dump writes a table as a golden file: its CREATE statement as SQLite
// keeps it, its indexes, and each row in its storage class, one line
// each; text that would break the line is written as a blob cast to
// text.
func ExampleDump() {
	dir, _ := os.MkdirTemp("", "sqlgolden-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	p, err := sqlconn.Open(sqlconn.Config{URL: "sqlite:" + filepath.Join(dir, "golden.db")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	for _, q := range []string{
		`CREATE TABLE "golden_items" (id TEXT PRIMARY KEY, n INTEGER, body BLOB)`,
		`CREATE INDEX "golden_items_n" ON "golden_items" (n)`,
		`INSERT INTO "golden_items" VALUES ('it''s', 2.5, X'00FF'), ('two
lines', 7, NULL)`,
	} {
		if _, err := p.DB.ExecContext(ctx, q); err != nil {
			fmt.Println(err)
			return
		}
	}

	f, err := sqlgolden.Dump(ctx, p.DB, []string{"Golden file of the example."}, []string{"golden_items"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(f)
	// Output:
	// -- Golden file of the example.
	// CREATE TABLE "golden_items" (id TEXT PRIMARY KEY, n INTEGER, body BLOB);
	// CREATE INDEX "golden_items_n" ON "golden_items" (n);
	// INSERT INTO "golden_items" (id, n, body) VALUES ('it''s', 2.5, X'00FF');
	// INSERT INTO "golden_items" (id, n, body) VALUES (CAST(X'74776F0A6C696E6573' AS TEXT), 7, NULL);
}
