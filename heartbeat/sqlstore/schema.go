package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// migrate creates or migrates the tables to schemaVersion, under a lock,
// and returns the version found; a newer one is an error.
func migrate(ctx context.Context, db *sql.DB, d Dialect, st statements, table string) (found int, err error) {
	return sqlconn.Schema{
		Dialect:    d,
		Meta:       table + "_meta",
		Counters:   []string{"last_epoch"},
		Migrations: st.migrations,
		Lock:       "cloudbus.sqlstore." + table,
		Owner:      "cloudbus",
		Elsewhere:  "use another Table",
	}.Migrate(ctx, db)
}

// errNoMeta means the meta row is gone: no epoch can be issued.
var errNoMeta = errors.New("the meta row (id 1) is missing from the meta table: reopen the store to recreate it")
