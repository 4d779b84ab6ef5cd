package sqlconn

import (
	"fmt"
	"strconv"
	"strings"
)

// Dialect is the SQL dialect of a database: it picks the driver and the
// statements. The zero value, Auto, means "infer it from the URL".
type Dialect int

// The dialects.
const (
	// Auto infers the dialect from the URL's form (see [ParseURL]).
	Auto Dialect = iota
	// SQLite is an embedded database in one file (modernc.org/sqlite, pure
	// Go): the processes of one machine share it.
	SQLite
	// Postgres is PostgreSQL (github.com/jackc/pgx/v5 through its
	// database/sql driver), version 10 or later.
	Postgres
	// MySQL is MySQL 5.7 or later, or MariaDB 10.3 or later
	// (github.com/go-sql-driver/mysql).
	MySQL
)

// String returns the dialect's name: "sqlite", "postgres", "mysql",
// "auto", or "Dialect(n)" for an unknown value.
func (d Dialect) String() string {
	switch d {
	case Auto:
		return "auto"
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// QuoteIdent quotes a table name for d: "name" (`name` for MySQL), and
// each part of a qualified "schema.name" separately. The name must not
// hold quotes; callers validate their names.
func QuoteIdent(d Dialect, name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + p + q
	}
	return strings.Join(parts, ".")
}

// Rebind turns the ? placeholders of query into PostgreSQL's $1, $2, ...
// for Postgres and returns query unchanged for the other dialects. The
// query must hold no literal question mark.
func Rebind(d Dialect, query string) string {
	if d != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
