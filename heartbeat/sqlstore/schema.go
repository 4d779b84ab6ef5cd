package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// migrate creates the tables if missing and brings them to
// schemaVersion under the schema lock (see [Pool.WithSchemaLock]), so
// that nodes opening the store at the same time do it once. It returns
// the version found. A version newer than this code's is an error: an
// older node must not write tables whose meaning changed.
func migrate(ctx context.Context, db *sql.DB, d Dialect, st statements, table string) (found int, err error) {
	err = withSchemaLock(ctx, db, d, "cloudbus.sqlstore."+table, func(ctx context.Context, ex Execer) error {
		var err error
		found, err = migrateLocked(ctx, ex, st)
		return err
	})
	return found, err
}

// migrateLocked does migrate's work under the lock.
func migrateLocked(ctx context.Context, ex Execer, st statements) (int, error) {
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
		return found, fmt.Errorf("the tables have schema version %d, newer than this cloudbus knows (%d): upgrade this node, or use another Table", found, schemaVersion)
	}
	for v := found; v < schemaVersion; v++ {
		for _, stmt := range st.migrations[v] {
			if _, err := ex.ExecContext(ctx, stmt); err != nil {
				return found, fmt.Errorf("migrate the schema from version %d to %d: %w", v, v+1, err)
			}
		}
		if _, err := ex.ExecContext(ctx, st.setVersion, v+1); err != nil {
			return found, fmt.Errorf("record schema version %d: %w", v+1, err)
		}
	}
	return found, nil
}

// errNoMeta is returned when the meta row is gone, as after a manual
// DELETE: the store cannot issue epochs.
var errNoMeta = errors.New("the meta row (id 1) is missing from the meta table: reopen the store to recreate it")
