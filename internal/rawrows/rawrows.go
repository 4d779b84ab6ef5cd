// Package rawrows is test support for the fuzz tests that write
// arbitrary values into a store's SQLite tables with raw statements and
// read them back through the store's API (heartbeat/sqlstore,
// fence/sqlfence, refnode's sqldb): a column value of any SQL type, and
// a row read as the driver gives it.
package rawrows

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
)

// Value returns one column's value for a raw row: kind picks its SQL
// type whatever the column's declared type (SQLite keeps what it is
// given unless the column's affinity converts it), so the store reads
// what another program, a manual fix or a damaged file may have left.
// natural is the value the column would normally hold; i, fl, s and b
// are the fuzzer's integer, float, text and blob.
func Value(kind uint64, natural any, i int64, fl float64, s string, b []byte) any {
	switch kind & 7 {
	case 1:
		return fl
	case 2:
		return s
	case 3:
		return b // a BLOB
	case 4:
		return nil
	case 5:
		return i
	case 6:
		if n, ok := natural.(int64); ok {
			return strconv.FormatInt(n, 10) // an integer as text: INTEGER affinity converts it
		}
		return natural
	default:
		return natural
	}
}

// Row reads the n columns of the only row of query q as the driver gives
// them: int64, float64, string, []byte or nil. It fails the test if the
// query fails.
func Row(t testing.TB, db *sql.DB, q string, n int) []any {
	t.Helper()
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := db.QueryRowContext(context.Background(), q).Scan(ptrs...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return vals
}
