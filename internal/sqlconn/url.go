package sqlconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// mask replaces every secret in logs and errors.
const mask = "xxxxx"

// URL is a parsed database URL: its dialect, what the driver takes, and
// what may be shown. The zero value names no database; a URL made by
// hand (URL{Dialect: d, Masked: "..."}) names one without secrets to
// scrub. A URL is a value: copies are independent and safe to share.
type URL struct {
	// Dialect is the URL's database.
	Dialect Dialect
	// Masked is the URL with its passwords replaced by "xxxxx", for logs
	// and errors.
	Masked string

	dsn     string   // for the driver; holds the password; never shown
	secrets []string // passwords to scrub from driver errors
}

// ParseURL parses raw, a database URL in one of these forms, for dialect
// d (Auto: inferred from raw's form):
//
//	sqlite:/var/lib/cloudbus/cloudbus.db      SQLite, absolute path
//	sqlite:cloudbus.db                        SQLite, relative path
//	file:/var/lib/cloudbus/cloudbus.db?...    SQLite URI, as modernc.org/sqlite takes it
//	postgres://user:password@host:5432/db?sslmode=disable   (or postgresql://)
//	mysql://user:password@host:3306/db?tls=true
//	user:password@tcp(host:3306)/db?parseTime=true          go-sql-driver/mysql's DSN
//
// A go-sql-driver/mysql DSN is recognized by its tcp(...) or unix(...)
// address; other forms of it need d set to MySQL. With d set to Postgres,
// a key=value connection string ("host=... password=...") is accepted
// too. Query parameters are passed to the driver. An in-memory SQLite
// database is refused: it is private to one connection. The errors name
// raw masked, never whole; they carry no package prefix (callers add
// theirs).
func ParseURL(raw string, d Dialect) (URL, error) {
	if d == Auto {
		d = inferDialect(raw)
		if d == Auto {
			return URL{}, fmt.Errorf("cannot tell the database of URL %s: use sqlite:/path/file.db, postgres://..., mysql://... or user:password@tcp(host:3306)/db", MaskURL(raw))
		}
	}
	switch d {
	case SQLite:
		return parseSQLite(raw)
	case Postgres:
		return parsePostgres(raw)
	case MySQL:
		return parseMySQL(raw)
	}
	return URL{}, fmt.Errorf("unknown %s", d)
}

// inferDialect tells the dialect from raw's form, or Auto.
func inferDialect(raw string) Dialect {
	switch {
	case strings.HasPrefix(raw, "sqlite:"), strings.HasPrefix(raw, "file:"):
		return SQLite
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return Postgres
	case strings.HasPrefix(raw, "mysql://"), mysqlDSN.MatchString(raw):
		return MySQL
	}
	return Auto
}

// mysqlDSN matches go-sql-driver/mysql's DSN with an explicit network:
// [user[:password]@]tcp(address)/db.
var mysqlDSN = regexp.MustCompile(`^(.*@)?(tcp|tcp4|tcp6|unix)\([^)]*\)/`)

// sqliteEscaper escapes the characters that end or escape a path in a
// SQLite URI filename.
var sqliteEscaper = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// parseSQLite turns sqlite:PATH[?query], sqlite:///PATH[?query] or a
// file: URI into a file: URI for modernc.org/sqlite. The busy timeout and
// journal pragmas are added by Open.
func parseSQLite(raw string) (URL, error) {
	u := URL{Dialect: SQLite, Masked: raw}
	if strings.HasPrefix(raw, "file:") {
		u.dsn = raw
	} else {
		rest := strings.TrimPrefix(raw, "sqlite:")
		if strings.HasPrefix(rest, "//") {
			rest = rest[2:]
			if !strings.HasPrefix(rest, "/") {
				return URL{}, fmt.Errorf("URL %s names a host; SQLite is a local file: use sqlite:/absolute/path.db or sqlite:relative/path.db", raw)
			}
		}
		path, query, _ := strings.Cut(rest, "?")
		if path == "" {
			return URL{}, fmt.Errorf("URL %s is not a database file: it has no path; use sqlite:/absolute/path.db", raw)
		}
		u.dsn = "file:" + sqliteEscaper.Replace(path)
		if query != "" {
			u.dsn += "?" + query
		}
	}
	path, query, _ := strings.Cut(strings.TrimPrefix(u.dsn, "file:"), "?")
	if path == ":memory:" || strings.Contains(query, "mode=memory") || path == "" {
		return URL{}, fmt.Errorf("URL %s is not a database file; an in-memory SQLite database is private to one connection, so no other connection or process could share it: use a file", raw)
	}
	return u, nil
}

// pgKeywordPassword matches a password in a key=value connection string.
var pgKeywordPassword = regexp.MustCompile(`((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// pgUnquote undoes the escapes of a quoted value of a key=value string.
var pgUnquote = strings.NewReplacer(`\'`, `'`, `\\`, `\`)

// parsePostgres accepts a postgres:// URL or a key=value string.
func parsePostgres(raw string) (URL, error) {
	u := URL{Dialect: Postgres, dsn: raw}
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		p, err := url.Parse(raw)
		if err != nil {
			return URL{}, errors.New("URL is not a valid postgres:// URL (not shown: it may hold a password)")
		}
		u.Masked, u.secrets = maskURL(p)
		return u, nil
	}
	if !strings.Contains(raw, "=") {
		return URL{}, fmt.Errorf("URL %s is neither a postgres:// URL nor a key=value connection string", MaskURL(raw))
	}
	for _, m := range pgKeywordPassword.FindAllStringSubmatch(raw, -1) {
		v := m[2]
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = v[1 : len(v)-1]
			u.secrets = append(u.secrets, v, pgUnquote.Replace(v)) // as written, and as the driver reads it
		} else {
			u.secrets = append(u.secrets, v)
		}
	}
	u.Masked = pgKeywordPassword.ReplaceAllString(raw, "${1}"+mask)
	return u, nil
}

// parseMySQL accepts a mysql:// URL, turned into the driver's DSN, or the
// driver's DSN itself.
func parseMySQL(raw string) (URL, error) {
	u := URL{Dialect: MySQL}
	if strings.HasPrefix(raw, "mysql://") {
		p, err := url.Parse(raw)
		if err != nil {
			return URL{}, errors.New("URL is not a valid mysql:// URL (not shown: it may hold a password)")
		}
		u.Masked, u.secrets = maskURL(p)
		addr := p.Host
		if addr != "" && p.Port() == "" {
			addr = net.JoinHostPort(p.Hostname(), "3306")
		}
		var user string
		if p.User != nil {
			user = p.User.Username()
			if pw, ok := p.User.Password(); ok {
				user += ":" + pw
			}
			user += "@"
		}
		u.dsn = fmt.Sprintf("%stcp(%s)/%s", user, addr, strings.TrimPrefix(p.Path, "/"))
		if p.RawQuery != "" {
			u.dsn += "?" + p.RawQuery
		}
	} else {
		u.dsn = raw
	}
	cfg, err := mysql.ParseDSN(u.dsn)
	if err != nil {
		shown := u.Masked
		if shown == "" {
			shown = "(not shown: it may hold a password)"
		}
		return URL{}, fmt.Errorf("URL %s is not a MySQL URL or DSN (mysql://user:password@host:3306/db or user:password@tcp(host:3306)/db)", shown)
	}
	if cfg.Passwd != "" {
		u.secrets = append(u.secrets, cfg.Passwd)
	}
	if u.Masked == "" {
		u.Masked = raw
		if cfg.Passwd != "" {
			u.Masked = strings.Replace(raw, ":"+cfg.Passwd+"@", ":"+mask+"@", 1)
		}
	}
	return u, nil
}

// maskURL returns u with its password (in the user info and in password
// or sslpassword query parameters) masked, and the passwords found.
func maskURL(u *url.URL) (string, []string) {
	m := *u
	var secrets []string
	if m.User != nil {
		if pw, ok := m.User.Password(); ok {
			secrets = append(secrets, pw)
			m.User = url.UserPassword(m.User.Username(), mask)
		}
	}
	if m.RawQuery != "" {
		q := m.Query()
		for k, vs := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				secrets = append(secrets, vs...)
				q[k] = []string{mask}
			}
		}
		m.RawQuery = q.Encode()
	}
	if strings.Contains(u.Opaque+u.Path+u.RawQuery+u.Fragment, "@") {
		// An '@' past the host: user info cut short by a '/', '?' or
		// '#' typed unescaped in it, the password after it.
		return m.Scheme + "://(masked: an '@' outside the user info)", secrets
	}
	return m.Redacted(), secrets
}

// MaskURL returns u, in any form [ParseURL] accepts (or any other URL
// with a scheme), with its password replaced by "xxxxx", for logs and
// errors. A string that does not parse is replaced whole by
// "(unparsable URL)".
func MaskURL(u string) string {
	d := inferDialect(u)
	if d == Auto && strings.Contains(u, "=") && !strings.Contains(u, "://") && !strings.Contains(u, "@") {
		d = Postgres // a key=value connection string
	}
	if d == Auto {
		p, err := url.Parse(u)
		if err != nil || p.Scheme == "" || p.Opaque != "" {
			return "(unparsable URL)" // an opaque part may hold a password
		}
		s, _ := maskURL(p)
		return s
	}
	t, err := ParseURL(u, d)
	if err != nil {
		return "(unparsable URL)"
	}
	return t.Masked
}

// Scrub returns s with u's passwords (plain or URL-escaped) and its
// driver DSN replaced by masked forms: driver errors may quote them.
func (u URL) Scrub(s string) string {
	if u.dsn != "" && u.dsn != u.Masked {
		s = strings.ReplaceAll(s, u.dsn, u.Masked)
	}
	for _, pw := range u.secrets {
		if pw != "" {
			s = strings.ReplaceAll(s, pw, mask)
			// Escaped as in a query, a path, or a URL's user info.
			for _, esc := range []string{url.QueryEscape(pw), url.PathEscape(pw), strings.TrimPrefix(url.UserPassword("", pw).String(), ":")} {
				if esc != pw {
					s = strings.ReplaceAll(s, esc, mask)
				}
			}
		}
	}
	return s
}

// Fail wraps err, a driver's error from operation op on u's database, as
// "OP on MASKED: ERR", with u's passwords scrubbed from the driver's
// text. The chain keeps err and, if ctx ended, ctx's error, for
// errors.Is and errors.As. Callers add their package prefix.
func (u URL) Fail(ctx context.Context, op string, err error) error {
	de := &driverError{err: err, text: u.Scrub(err.Error())}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%s on %s: %w: %w", op, u.Masked, cerr, de)
	}
	return fmt.Errorf("%s on %s: %w", op, u.Masked, de)
}

// Mark returns err marked as a database error (see [IsDatabaseError]),
// with its text unchanged; nil for nil. A package that holds a *sql.DB
// but no URL (sqlfence) marks its driver's errors with it; [URL.Fail]
// marks its own.
func Mark(err error) error {
	if err == nil || IsDatabaseError(err) {
		return err
	}
	return &driverError{err: err, text: err.Error()}
}

// IsDatabaseError reports whether err's chain holds a driver's error
// wrapped by [URL.Fail] or [Mark]. Its text names the database (host,
// port, database name, user: the masked URL, or the driver's own words)
// and is meant for the process's log, not for a remote caller: refnode
// answers such errors with their code and a text that does not name the
// database.
func IsDatabaseError(err error) bool {
	var de *driverError
	return errors.As(err, &de)
}

// driverError is a driver's error whose text had any password removed;
// Unwrap gives the driver's error itself.
type driverError struct {
	err  error
	text string
}

func (e *driverError) Error() string { return e.text }
func (e *driverError) Unwrap() error { return e.err }
