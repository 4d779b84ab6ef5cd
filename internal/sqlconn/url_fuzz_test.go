package sqlconn_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// buildURL writes a database URL of one of the forms ParseURL takes,
// with password pw, and returns the password as the form holds it.
func buildURL(form byte, user, pw, host, db, query string) (string, sqlconn.Dialect, string) {
	raw, d := buildRaw(form, user, pw, host, db, query)
	if form%8 == 3 {
		pw = unquotedValue(pw)
	}
	return raw, d, pw
}

// unquotedValue turns pw into a value a key=value string can hold
// unquoted: no space, quote or backslash.
func unquotedValue(pw string) string {
	return strings.NewReplacer(`'`, "_", `\`, "_").Replace(strings.Join(strings.Fields(pw), "_"))
}

func buildRaw(form byte, user, pw, host, db, query string) (string, sqlconn.Dialect) {
	switch form % 8 {
	case 0, 1:
		scheme := []string{"postgres", "mysql"}[form%2]
		u := url.URL{Scheme: scheme, User: url.UserPassword(user, pw), Host: host, Path: "/" + db, RawQuery: query}
		return u.String(), sqlconn.Auto
	case 2: // go-sql-driver/mysql's DSN: the password as is, after the user's first ':'
		// The driver splits at the last '/' and the last '@' before it:
		// only the password may hold them.
		plain := strings.NewReplacer("/", "_", "@", "_", "(", "_", ")", "_").Replace
		s := strings.ReplaceAll(user, ":", "_") + ":" + pw + "@tcp(" + plain(host) + ")/" + plain(db)
		if query != "" {
			s += "?" + plain(query)
		}
		return s, sqlconn.Auto
	case 3: // a PostgreSQL key=value string: an unquoted value ends at a space
		return "host=" + host + " user=" + user + " password=" + unquotedValue(pw) + " dbname=" + db, sqlconn.Postgres
	case 4: // a PostgreSQL key=value string, the password quoted
		return "host=" + host + " password='" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(pw) + "' dbname=" + db, sqlconn.Postgres
	case 6, 7: // a URL typed by hand: nothing escaped
		s := []string{"postgres", "mysql"}[form%2] + "://" + user + ":" + pw + "@" + host + "/" + db
		if query != "" {
			s += "?" + query
		}
		return s, sqlconn.Auto
	default: // the password as a query parameter
		u := url.URL{Scheme: "postgres", Host: host, Path: "/" + db, RawQuery: query}
		q := u.Query()
		q.Set("password", pw)
		u.RawQuery = q.Encode()
		return u.String(), sqlconn.Auto
	}
}

// FuzzURLMasksPassword: a database URL, in any form ParseURL accepts,
// never shows its password: not in URL.Masked, not in MaskURL's result,
// not in a driver error scrubbed with URL.Scrub, in plain or escaped
// form. (The house rule: never log a password.) A password counts as
// shown only where the same URL with another password does not show the
// same text, so a password that also spells the user or host is not
// taken for a leak.
func FuzzURLMasksPassword(f *testing.F) {
	for form := range byte(8) {
		f.Add(form, "cloudbus", "s3cr3t-pw", "db.example:5432", "cloudbus", "sslmode=disable")
	}
	f.Add(byte(0), "u", "p@ss:w/rd?#%", "h", "d", "")
	// A DSN whose password holds a '/' was not recognized, and the error
	// showed it whole.
	f.Add(byte(2), "u", "p@ss)w/rd", "h:3306", "d", "tls=true")
	f.Add(byte(2), "u", "pa:ss@word", "h:3306", "d", "")
	f.Add(byte(3), "u", "pass word", "h", "d", "")
	// Typed by hand, a password with a '/', '?' or '#' after digits makes
	// the user info a host and port: the password followed the host.
	f.Add(byte(6), "bob", "12/secret", "db", "x", "")
	f.Add(byte(7), "bob", "12?secret", "db:3306", "x", "")
	f.Add(byte(6), "bob", "1234#secret", "db", "x", "sslmode=disable")
	// A quoted password was scrubbed only as written, escapes and all.
	f.Add(byte(4), "u", "it's 'quoted'", "h", "d", "")
	f.Add(byte(5), "u", "a&b=c d", "h", "d", "sslpassword=other1")
	f.Add(byte(0), "u", "secretpw", "h", "d", "sslpassword=secretpw2&Password=x")
	f.Fuzz(func(t *testing.T, form byte, user, pw, host, db, query string) {
		raw, d, pw := buildURL(form, user, pw, host, db, query)
		u, err := sqlconn.ParseURL(raw, d)
		if err != nil {
			if leaks(err.Error(), pw) {
				if ctl := mustOther(t, form, user, pw, host, db, query, func(o string, d sqlconn.Dialect) string {
					_, err := sqlconn.ParseURL(o, d)
					if err == nil {
						return ""
					}
					return err.Error()
				}); !leaks(ctl, pw) {
					t.Fatalf("the error for %q shows its password %q: %v", raw, pw, err)
				}
			}
			return
		}
		shown := map[string]string{
			"Masked":  u.Masked,
			"MaskURL": sqlconn.MaskURL(raw),
			"Scrub":   u.Scrub(driverError(form, raw, pw)),
		}
		for what, s := range shown {
			if !leaks(s, pw) {
				continue
			}
			ctl := mustOther(t, form, user, pw, host, db, query, func(o string, d sqlconn.Dialect) string {
				ou, err := sqlconn.ParseURL(o, d)
				if err != nil {
					return ""
				}
				switch what {
				case "Masked":
					return ou.Masked
				case "MaskURL":
					return sqlconn.MaskURL(o)
				}
				return ou.Scrub("driver: cannot connect to " + o)
			})
			if !leaks(ctl, pw) {
				t.Fatalf("%s of %q shows its password %q: %s", what, raw, pw, s)
			}
		}
	})
}

// driverError is a driver's error that quotes what the driver was given
// (the URL itself, but for a mysql:// URL, which the driver gets as a
// DSN) and, if the URL's form says which its password is, the password
// (a URL typed by hand may not: a driver cannot quote as a password what
// it did not take for one).
func driverError(form byte, raw, pw string) string {
	s := "driver: cannot connect"
	if form%8 != 1 && form%8 != 7 {
		s += " to " + raw
	}
	if form%8 < 6 {
		s += " with password " + pw + " (" + url.QueryEscape(pw) + ")"
	}
	return s
}

// leaks reports whether s holds pw, plain or escaped, for a password long
// enough that finding it means something.
func leaks(s, pw string) bool {
	if len(pw) < 4 || strings.Contains("xxxxx", pw) {
		return false
	}
	for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), (&url.URL{User: url.UserPassword("", pw)}).String()[2:]} {
		if len(form) >= 4 && strings.Contains(s, form) {
			return true
		}
	}
	return false
}

// mustOther returns show applied to the same URL with another password
// of the same length, the control: what it shows is not the password.
func mustOther(t *testing.T, form byte, user, pw, host, db, query string, show func(string, sqlconn.Dialect) string) string {
	t.Helper()
	other := strings.Repeat("Q", len(pw))
	if other == pw {
		other = strings.Repeat("Z", len(pw))
	}
	o, d, _ := buildURL(form, user, other, host, db, query)
	return show(o, d)
}
