package amqpbus

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// FuzzMaskURL: the broker URL, however its user, password, host and
// virtual host are spelled, never shows its password through MaskURL or
// through scrub (what the transport does to a library error that may
// quote the URL), in plain or escaped form. A password counts as shown
// only where the same URL with another password does not show the same
// text, so a password that also spells the user or host is not taken
// for a leak.
func FuzzMaskURL(f *testing.F) {
	f.Add(byte(0), "bob", "s3cret-pw", "rabbit.example:5672", "vh")
	f.Add(byte(0), "bob", "p@ss:w/rd?#%", "h", "")
	f.Add(byte(1), "bob", "p@ss word", "h:5671", "/")
	f.Add(byte(2), "bob", "plain/slash", "h", "vh")
	f.Add(byte(2), "bob", "at@sign", "h", "vh")
	f.Add(byte(3), "", "nouser", "h", "vh")
	// Typed by hand, a password of digits then '/', '?' or '#' makes the
	// user info a host and port, and the password followed the host:
	// MaskURL once showed it.
	f.Add(byte(2), "bob", "12/secret", "rabbit:5672", "vh")
	f.Add(byte(2), "bob", "1234#secret", "rabbit", "vh")
	f.Fuzz(func(t *testing.T, form byte, user, pw, host, vhost string) {
		raw := amqpURL(form, user, pw, host, vhost)
		show := func(raw, pw string) []string {
			return []string{MaskURL(raw), (&Transport{urls: []string{raw}}).scrub(errors.New("dial " + raw + ": password " + pw + " (" + url.QueryEscape(pw) + ") refused"))}
		}
		other := strings.Repeat("Q", len(pw))
		if other == pw {
			other = strings.Repeat("Z", len(pw))
		}
		ctl := show(amqpURL(form, user, other, host, vhost), pw)
		for i, s := range show(raw, pw) {
			if shows(s, pw) && !shows(ctl[i], pw) {
				t.Fatalf("%s of %q shows its password %q: %s", []string{"MaskURL", "scrub"}[i], raw, pw, s)
			}
		}
	})
}

// amqpURL writes a broker URL with password pw: escaped as a URL writes
// it, or as is (as an operator may type it).
func amqpURL(form byte, user, pw, host, vhost string) string {
	scheme := []string{"amqp", "amqps"}[form%2]
	if form%4 < 2 {
		return (&url.URL{Scheme: scheme, User: url.UserPassword(user, pw), Host: host, Path: "/" + vhost}).String()
	}
	return scheme + "://" + user + ":" + pw + "@" + host + "/" + vhost
}

// shows reports whether s holds pw, plain or escaped, for a password long
// enough that finding it means something.
func shows(s, pw string) bool {
	if len(pw) < 4 || strings.Contains("xxxxx", pw) {
		return false
	}
	for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), strings.TrimPrefix(url.UserPassword("", pw).String(), ":")} {
		if len(form) >= 4 && strings.Contains(s, form) {
			return true
		}
	}
	return false
}
