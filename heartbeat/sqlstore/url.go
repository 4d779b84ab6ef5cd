package sqlstore

import (
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

// target is a parsed [Config.URL]: the dialect, what the driver takes,
// and what may be shown.
type target struct {
	dialect Dialect
	dsn     string   // for the driver; holds the password; never shown
	masked  string   // for logs and errors
	secrets []string // passwords to scrub from driver errors
}

// parseURL parses raw for dialect d (DialectAuto: inferred from raw's
// form). Its errors never quote raw.
func parseURL(raw string, d Dialect) (target, error) {
	if d == DialectAuto {
		d = inferDialect(raw)
		if d == DialectAuto {
			return target{}, fmt.Errorf("sqlstore: config: cannot tell the database of URL %s: use sqlite:/path/file.db, postgres://..., mysql://... or user:password@tcp(host:3306)/db, or set Config.Dialect", MaskURL(raw))
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
	return target{}, fmt.Errorf("sqlstore: config: unknown %s", d)
}

// inferDialect tells the dialect from raw's form, or DialectAuto.
func inferDialect(raw string) Dialect {
	switch {
	case strings.HasPrefix(raw, "sqlite:"), strings.HasPrefix(raw, "file:"):
		return SQLite
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return Postgres
	case strings.HasPrefix(raw, "mysql://"), mysqlDSN.MatchString(raw):
		return MySQL
	}
	return DialectAuto
}

// mysqlDSN matches go-sql-driver/mysql's DSN with an explicit network:
// [user[:password]@]tcp(address)/db.
var mysqlDSN = regexp.MustCompile(`^([^/]*@)?(tcp|tcp4|tcp6|unix)\([^)]*\)/`)

// sqliteEscaper escapes the characters that end or escape a path in a
// SQLite URI filename.
var sqliteEscaper = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// parseSQLite turns sqlite:PATH[?query], sqlite:///PATH[?query] or a
// file: URI into a file: URI for modernc.org/sqlite. The busy timeout and
// journal pragmas are added at Open.
func parseSQLite(raw string) (target, error) {
	t := target{dialect: SQLite, masked: raw}
	if strings.HasPrefix(raw, "file:") {
		t.dsn = raw
	} else {
		rest := strings.TrimPrefix(raw, "sqlite:")
		if strings.HasPrefix(rest, "//") {
			rest = rest[2:]
			if !strings.HasPrefix(rest, "/") {
				return target{}, fmt.Errorf("sqlstore: config: URL %s names a host; SQLite is a local file: use sqlite:/absolute/path.db or sqlite:relative/path.db", raw)
			}
		}
		path, query, _ := strings.Cut(rest, "?")
		if path == "" {
			return target{}, fmt.Errorf("sqlstore: config: URL %s is not a database file: it has no path; use sqlite:/absolute/path.db", raw)
		}
		t.dsn = "file:" + sqliteEscaper.Replace(path)
		if query != "" {
			t.dsn += "?" + query
		}
	}
	path, query, _ := strings.Cut(strings.TrimPrefix(t.dsn, "file:"), "?")
	if path == ":memory:" || strings.Contains(query, "mode=memory") || path == "" {
		return target{}, fmt.Errorf("sqlstore: config: URL %s is not a database file; an in-memory SQLite database is private to one connection: use a file, or heartbeat/memstore for one process", raw)
	}
	return t, nil
}

// pgKeywordPassword matches a password in a key=value connection string.
var pgKeywordPassword = regexp.MustCompile(`((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// parsePostgres accepts a postgres:// URL or a key=value string.
func parsePostgres(raw string) (target, error) {
	t := target{dialect: Postgres, dsn: raw}
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return target{}, errors.New("sqlstore: config: URL is not a valid postgres:// URL (not shown: it may hold a password)")
		}
		t.masked, t.secrets = maskURL(u)
		return t, nil
	}
	if !strings.Contains(raw, "=") {
		return target{}, fmt.Errorf("sqlstore: config: URL %s is neither a postgres:// URL nor a key=value connection string", MaskURL(raw))
	}
	for _, m := range pgKeywordPassword.FindAllStringSubmatch(raw, -1) {
		t.secrets = append(t.secrets, strings.Trim(m[2], "'"))
	}
	t.masked = pgKeywordPassword.ReplaceAllString(raw, "${1}"+mask)
	return t, nil
}

// parseMySQL accepts a mysql:// URL, turned into the driver's DSN, or the
// driver's DSN itself.
func parseMySQL(raw string) (target, error) {
	t := target{dialect: MySQL}
	if strings.HasPrefix(raw, "mysql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return target{}, errors.New("sqlstore: config: URL is not a valid mysql:// URL (not shown: it may hold a password)")
		}
		t.masked, t.secrets = maskURL(u)
		addr := u.Host
		if addr != "" && u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		var user string
		if u.User != nil {
			user = u.User.Username()
			if pw, ok := u.User.Password(); ok {
				user += ":" + pw
			}
			user += "@"
		}
		t.dsn = fmt.Sprintf("%stcp(%s)/%s", user, addr, strings.TrimPrefix(u.Path, "/"))
		if u.RawQuery != "" {
			t.dsn += "?" + u.RawQuery
		}
	} else {
		t.dsn = raw
	}
	cfg, err := mysql.ParseDSN(t.dsn)
	if err != nil {
		shown := t.masked
		if shown == "" {
			shown = "(not shown: it may hold a password)"
		}
		return target{}, fmt.Errorf("sqlstore: config: URL %s is not a MySQL URL or DSN (mysql://user:password@host:3306/db or user:password@tcp(host:3306)/db)", shown)
	}
	if cfg.Passwd != "" {
		t.secrets = append(t.secrets, cfg.Passwd)
	}
	if t.masked == "" {
		t.masked = raw
		if cfg.Passwd != "" {
			t.masked = strings.Replace(raw, ":"+cfg.Passwd+"@", ":"+mask+"@", 1)
		}
	}
	return t, nil
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
	return m.Redacted(), secrets
}

// MaskURL returns u, in any form [Config.URL] accepts, with its password
// replaced by "xxxxx", for logs and errors. A string that does not parse
// is replaced whole by "(unparsable URL)".
func MaskURL(u string) string {
	d := inferDialect(u)
	if d == DialectAuto && strings.Contains(u, "=") && !strings.Contains(u, "://") {
		d = Postgres // a key=value connection string
	}
	if d == DialectAuto {
		p, err := url.Parse(u)
		if err != nil || p.Scheme == "" {
			return "(unparsable URL)"
		}
		s, _ := maskURL(p)
		return s
	}
	t, err := parseURL(u, d)
	if err != nil {
		return "(unparsable URL)"
	}
	return t.masked
}

// scrub returns s with every secret of t (plain or URL-escaped) replaced
// by the mask: driver errors may quote a DSN.
func (t target) scrub(s string) string {
	if t.dsn != "" && t.dsn != t.masked {
		s = strings.ReplaceAll(s, t.dsn, t.masked)
	}
	for _, pw := range t.secrets {
		if pw != "" {
			s = strings.ReplaceAll(s, pw, mask)
			if esc := url.QueryEscape(pw); esc != pw {
				s = strings.ReplaceAll(s, esc, mask)
			}
		}
	}
	return s
}
