package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// migrate creates the tables if missing and brings them to
// schemaVersion under the schema lock, so that nodes opening the store
// at the same time do it once. It returns the version found. A version
// newer than this code's is an error: an older node must not write
// tables whose meaning changed. The meta table's row holds last_epoch
// beside the version.
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

// errNoMeta is returned when the meta row is gone, as after a manual
// DELETE: the store cannot issue epochs.
var errNoMeta = errors.New("the meta row (id 1) is missing from the meta table: reopen the store to recreate it")
