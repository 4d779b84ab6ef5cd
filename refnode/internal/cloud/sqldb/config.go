package sqldb

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// DefaultPrefix is the default table prefix: tables refnode_hosts,
// refnode_images, refnode_vms and refnode_meta.
const DefaultPrefix = "refnode"

// DefaultMaxOpenConns is the default cap on a [Store]'s connection pool.
const DefaultMaxOpenConns = 4

// Config configures [Open]. Only URL is required; every other zero field
// takes the default written beside it.
type Config struct {
	// URL names the database; its form tells the dialect:
	//
	//	sqlite:/var/lib/refnode/refnode.db        SQLite, absolute path
	//	sqlite:refnode.db                         SQLite, relative path
	//	file:/var/lib/refnode/refnode.db?...      SQLite URI, as modernc.org/sqlite takes it
	//	postgres://user:password@host:5432/db?sslmode=disable   (or postgresql://)
	//	mysql://user:password@host:3306/db?tls=true
	//	user:password@tcp(host:3306)/db                         go-sql-driver/mysql's DSN
	//
	// Query parameters are passed to the driver. The password never
	// appears in logs or errors.
	URL string

	// Prefix starts the table names: Prefix_hosts, Prefix_images,
	// Prefix_vms and Prefix_meta. Lower-case letters, digits and
	// underscores, starting with a letter or underscore, at most 40
	// characters. Every node of one cluster uses the same prefix;
	// clusters (and tests) sharing a database use different ones.
	// Default [DefaultPrefix].
	Prefix string

	// MaxOpenConns caps the connection pool; idle connections are kept
	// up to the same number and closed after a minute unused. Default
	// [DefaultMaxOpenConns] (4).
	MaxOpenConns int

	// BusyTimeout is how long a SQLite statement waits for another
	// connection or process holding the write lock before it fails with
	// "database is locked". Ignored by other databases. Default 5 s.
	BusyTimeout time.Duration

	// Logger receives the store's few logs (open, tables created); nil
	// discards them. The URL is logged masked.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix // one cluster per database
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = DefaultMaxOpenConns // a few statements per operation
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second // a write takes microseconds: wait, don't fail
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// prefixPattern is a table prefix that leaves room for "_images" within
// every database's identifier limit (PostgreSQL: 63 bytes).
var prefixPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Validate reports every problem with the configuration at once. Zero
// fields are valid (they take defaults), except URL; the URL is named
// only in masked form.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("sqldb: config: URL is required, e.g. sqlite:refnode.db or postgres://user:password@127.0.0.1:5432/db"))
	} else if _, err := parseURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	if c.Prefix != "" && !prefixPattern.MatchString(c.Prefix) {
		errs = append(errs, fmt.Errorf("sqldb: config: Prefix %q is not a valid table prefix: use lower-case letters, digits and underscores, at most 40 characters", c.Prefix))
	}
	if c.MaxOpenConns < 0 {
		errs = append(errs, fmt.Errorf("sqldb: config: MaxOpenConns %d is negative; leave it 0 for the default (%d)", c.MaxOpenConns, DefaultMaxOpenConns))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqldb: config: BusyTimeout %s is negative; leave it 0 for the default (5s)", c.BusyTimeout))
	}
	return errors.Join(errs...)
}

// target is a parsed URL: the dialect, what the driver takes (it may
// hold a password: never shown), what may be shown, and the passwords to
// scrub from driver errors.
type target struct {
	dialect sqlstore.Dialect
	dsn     string
	masked  string
	secrets []string
}

// mysqlDSN matches go-sql-driver/mysql's DSN with an explicit network.
var mysqlDSN = regexp.MustCompile(`^([^/]*@)?(tcp|tcp4|tcp6|unix)\([^)]*\)/`)

// parseURL tells the dialect from raw's form and makes the driver's DSN.
// Its errors name raw only masked.
func parseURL(raw string) (target, error) {
	t := target{masked: sqlstore.MaskURL(raw)}
	switch {
	case strings.HasPrefix(raw, "sqlite:"), strings.HasPrefix(raw, "file:"):
		t.dialect = SQLite
		return t, t.sqlite(raw)
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		t.dialect, t.dsn = Postgres, raw
		u, err := url.Parse(raw)
		if err != nil {
			return t, fmt.Errorf("sqldb: config: URL %s is not a valid postgres:// URL", t.masked)
		}
		t.secrets = urlSecrets(u)
		return t, nil
	case strings.HasPrefix(raw, "mysql://"):
		t.dialect = MySQL
		u, err := url.Parse(raw)
		if err != nil {
			return t, fmt.Errorf("sqldb: config: URL %s is not a valid mysql:// URL", t.masked)
		}
		t.secrets = urlSecrets(u)
		mc := mysql.NewConfig()
		mc.Net, mc.Addr, mc.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
		if u.Port() == "" {
			mc.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		if u.User != nil {
			mc.User = u.User.Username()
			mc.Passwd, _ = u.User.Password()
		}
		t.dsn = mc.FormatDSN()
		if u.RawQuery != "" {
			sep := "?"
			if strings.Contains(t.dsn, "?") {
				sep = "&"
			}
			t.dsn += sep + u.RawQuery
		}
		return t, t.checkMySQL()
	case mysqlDSN.MatchString(raw):
		t.dialect, t.dsn = MySQL, raw
		return t, t.checkMySQL()
	}
	return t, fmt.Errorf("sqldb: config: cannot tell the database of URL %s: use sqlite:/path/refnode.db, postgres://..., mysql://... or user:password@tcp(host:3306)/db", t.masked)
}

// The dialects, as heartbeat/sqlstore names them.
const (
	// SQLite is an embedded database in one file (modernc.org/sqlite).
	SQLite = sqlstore.SQLite
	// Postgres is PostgreSQL (github.com/jackc/pgx/v5's database/sql driver).
	Postgres = sqlstore.Postgres
	// MySQL is MySQL or MariaDB (github.com/go-sql-driver/mysql).
	MySQL = sqlstore.MySQL
)

// sqlite turns sqlite:PATH[?query] into a file: URI; a file: URI is taken
// as is. An in-memory database is refused.
func (t *target) sqlite(raw string) error {
	if strings.HasPrefix(raw, "file:") {
		t.dsn = raw
	} else {
		path, query, _ := strings.Cut(strings.TrimPrefix(raw, "sqlite:"), "?")
		if strings.HasPrefix(path, "//") { // sqlite:///abs/path
			path = path[2:]
		}
		t.dsn = "file:" + strings.NewReplacer("%", "%25", "#", "%23").Replace(path)
		if query != "" {
			t.dsn += "?" + query
		}
	}
	path, query, _ := strings.Cut(strings.TrimPrefix(t.dsn, "file:"), "?")
	if path == "" || path == ":memory:" || strings.Contains(query, "mode=memory") {
		return fmt.Errorf("sqldb: config: URL %s is not a database file; an in-memory SQLite database is private to one connection: use a file, or package memdb for one process", t.masked)
	}
	return nil
}

// checkMySQL parses t.dsn with the driver and records its password.
func (t *target) checkMySQL() error {
	mc, err := mysql.ParseDSN(t.dsn)
	if err != nil {
		return fmt.Errorf("sqldb: config: URL %s is not a MySQL URL or DSN (mysql://user:password@host:3306/db or user:password@tcp(host:3306)/db)", t.masked)
	}
	if mc.Passwd != "" {
		t.secrets = append(t.secrets, mc.Passwd)
	}
	return nil
}

// urlSecrets returns the passwords in u: its user info's and those of
// query parameters whose key mentions a password.
func urlSecrets(u *url.URL) []string {
	var out []string
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw)
		}
	}
	for k, vs := range u.Query() {
		if strings.Contains(strings.ToLower(k), "password") {
			out = append(out, vs...)
		}
	}
	return out
}

// scrub removes every password of t from s: driver errors may quote one.
func (t target) scrub(s string) string {
	for _, pw := range t.secrets {
		if pw != "" {
			s = strings.ReplaceAll(s, pw, "xxxxx")
			if esc := url.QueryEscape(pw); esc != pw {
				s = strings.ReplaceAll(s, esc, "xxxxx")
			}
		}
	}
	return s
}

// sqliteDSN adds the store's pragmas to a file: URI.
func sqliteDSN(uri string, busy time.Duration) string {
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + url.Values{
		"_pragma": {
			"busy_timeout(" + strconv.FormatInt(busy.Milliseconds(), 10) + ")",
			"journal_mode(WAL)",
			"synchronous(NORMAL)",
		},
		"_txlock": {"immediate"},
	}.Encode()
}
