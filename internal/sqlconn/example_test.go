package sqlconn_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// A store opens a pool from a URL and brings its tables to the version
// it knows; opening them again finds them current.
func Example() {
	dir, _ := os.MkdirTemp("", "sqlconn-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	p, err := sqlconn.Open(sqlconn.Config{URL: "sqlite:" + filepath.Join(dir, "app.db")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	items := sqlconn.QuoteIdent(p.URL.Dialect, "app_items")
	schema := sqlconn.Schema{
		Dialect:    p.URL.Dialect,
		Meta:       "app_meta",
		Migrations: [][]string{{"CREATE TABLE " + items + " (id TEXT PRIMARY KEY, n INTEGER NOT NULL)"}},
		Lock:       "example.app",
		Owner:      "example", Elsewhere: "use another file",
	}
	found, err := schema.Migrate(ctx, p.DB)
	fmt.Println("found version", found, err)
	found, err = schema.Migrate(ctx, p.DB)
	fmt.Println("found version", found, err)
	_, err = p.DB.ExecContext(ctx, sqlconn.Rebind(p.URL.Dialect, "INSERT INTO "+items+" (id, n) VALUES (?, ?)"), "a", 1)
	fmt.Println(p.URL.Dialect, err)
	// Output:
	// found version 0 <nil>
	// found version 1 <nil>
	// sqlite <nil>
}

// MaskURL hides the password of any URL or DSN the stores accept.
func ExampleMaskURL() {
	fmt.Println(sqlconn.MaskURL("postgres://cloudbus:s3cret@db:5432/cloudbus?sslmode=require"))
	fmt.Println(sqlconn.MaskURL("cloudbus:s3cret@tcp(db:3306)/cloudbus"))
	// Output:
	// postgres://cloudbus:xxxxx@db:5432/cloudbus?sslmode=require
	// cloudbus:xxxxx@tcp(db:3306)/cloudbus
}
