package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// The envelope's JSON is encoded and decoded by hand: it is on the path of
// every message, and encoding/json's reflection spent a fifth of a busy
// node's CPU on it. The format is exactly the JSON of the struct tags of
// [Envelope]; a differential fuzz test keeps both decoders in agreement.

// appendEnvelope appends the JSON encoding of e to dst.
func appendEnvelope(dst []byte, e *Envelope) ([]byte, error) {
	kind, err := e.Kind.MarshalText()
	if err != nil {
		return nil, err
	}
	valid := utf8.ValidString(e.ID)
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, e.ID)
	dst = append(dst, `,"kind":"`...)
	dst = append(dst, kind...)
	dst = append(dst, '"')
	for _, f := range [...]struct{ name, v string }{
		{`,"type":`, e.Type}, {`,"service_id":`, e.ServiceID}, {`,"resource_uuid":`, e.ResourceUUID},
		{`,"correlation_id":`, e.CorrelationID}, {`,"reply_to":`, e.ReplyTo}, {`,"source":`, e.Source},
	} {
		if f.v == "" {
			continue
		}
		valid = valid && utf8.ValidString(f.v)
		dst = append(dst, f.name...)
		dst = appendString(dst, f.v)
	}
	if e.Timeout != 0 {
		dst = append(dst, `,"timeout_ns":`...)
		dst = strconv.AppendInt(dst, int64(e.Timeout), 10)
	}
	if len(e.Headers) > 0 {
		dst = append(dst, `,"headers":{`...)
		for i, k := range sortedKeys(e.Headers) {
			if i > 0 {
				dst = append(dst, ',')
			}
			v := e.Headers[k]
			valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, v)
		}
		dst = append(dst, '}')
	}
	if len(e.Body) > 0 {
		if !json.Valid(e.Body) {
			return nil, ErrBadRequest.WithDetails("body is not valid JSON")
		}
		dst = append(dst, `,"body":`...)
		dst = append(dst, e.Body...)
	}
	if e.Error != nil {
		b, err := json.Marshal(e.Error)
		if err != nil {
			return nil, err
		}
		dst = append(dst, `,"error":`...)
		dst = append(dst, b...)
	}
	if !valid {
		return nil, ErrBadRequest.WithDetails("a string field or header is not valid UTF-8")
	}
	return append(dst, '}'), nil
}

// sizeHint estimates the encoded size of e, to allocate once.
func sizeHint(e *Envelope) int {
	n := 160 + len(e.ID) + len(e.Type) + len(e.ServiceID) + len(e.ResourceUUID) +
		len(e.CorrelationID) + len(e.ReplyTo) + len(e.Source) + len(e.Body)
	for k, v := range e.Headers {
		n += len(k) + len(v) + 6
	}
	return n
}

// sortedKeys returns m's keys in order, so encodings are deterministic.
func sortedKeys(m map[string]string) []string {
	if len(m) == 1 {
		for k := range m {
			return []string{k}
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ { // insertion sort: header maps are tiny
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string (s is valid UTF-8).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// errSyntax is returned for input that is not the JSON of an envelope.
var errSyntax = errors.New("invalid JSON")

// parser decodes one envelope object from valid UTF-8 input.
type parser struct {
	data []byte
	pos  int
}

func (p *parser) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) consume(c byte) bool {
	p.ws()
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// parseEnvelope decodes data (valid UTF-8) into e, following encoding/json's
// rules for the struct: unknown fields are ignored, null leaves a field
// unset, keys match case-insensitively, a repeated key wins (headers
// merge), and anything after the object is an error.
func parseEnvelope(data []byte, e *Envelope) error {
	p := &parser{data: data}
	if !p.consume('{') {
		return p.fail("expected an object")
	}
	if p.consume('}') {
		return p.end()
	}
	for {
		p.ws()
		key, err := p.str()
		if err != nil {
			return err
		}
		if !p.consume(':') {
			return p.fail("expected ':'")
		}
		p.ws()
		if err := p.field(key, e); err != nil {
			return err
		}
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			return p.end()
		}
		return p.fail("expected ',' or '}'")
	}
}

func (p *parser) end() error {
	p.ws()
	if p.pos != len(p.data) {
		return p.fail("data after the envelope")
	}
	return nil
}

func (p *parser) fail(why string) error {
	return fmt.Errorf("%s at offset %d: %w", why, p.pos, errSyntax)
}

func (p *parser) isNull() bool {
	if len(p.data)-p.pos >= 4 && string(p.data[p.pos:p.pos+4]) == "null" {
		p.pos += 4
		return true
	}
	return false
}

// field decodes the value of key into e.
func (p *parser) field(key string, e *Envelope) error {
	var dst *string
	switch foldKey(key) {
	case "id":
		dst = &e.ID
	case "type":
		dst = &e.Type
	case "service_id":
		dst = &e.ServiceID
	case "resource_uuid":
		dst = &e.ResourceUUID
	case "correlation_id":
		dst = &e.CorrelationID
	case "reply_to":
		dst = &e.ReplyTo
	case "source":
		dst = &e.Source
	case "kind":
		if p.isNull() {
			return nil
		}
		s, err := p.str()
		if err != nil {
			return err
		}
		return e.Kind.UnmarshalText([]byte(s))
	case "timeout_ns":
		if p.isNull() {
			return nil
		}
		start := p.pos
		if err := p.number(); err != nil {
			return err
		}
		n, err := strconv.ParseInt(string(p.data[start:p.pos]), 10, 64)
		if err != nil {
			return errors.New("timeout_ns is not an integer")
		}
		e.Timeout = time.Duration(n)
		return nil
	case "headers":
		return p.headers(e)
	case "body":
		start := p.pos
		if err := p.skip(0); err != nil {
			return err
		}
		// Like encoding/json's RawMessage, a null body is kept as "null".
		e.Body = append([]byte(nil), p.data[start:p.pos]...)
		return nil
	case "error":
		start := p.pos
		if err := p.skip(0); err != nil {
			return err
		}
		raw := p.data[start:p.pos]
		if string(raw) == "null" {
			e.Error = nil
			return nil
		}
		if raw[0] != '{' {
			return errors.New("error is not an object")
		}
		if e.Error == nil {
			e.Error = new(Error)
		}
		return json.Unmarshal(raw, e.Error)
	default:
		return p.skip(0)
	}
	if p.isNull() {
		return nil
	}
	s, err := p.str()
	if err != nil {
		return err
	}
	*dst = s
	return nil
}

func (p *parser) headers(e *Envelope) error {
	if p.isNull() {
		return nil
	}
	if !p.consume('{') {
		return errors.New("headers is not an object")
	}
	if e.Headers == nil {
		e.Headers = make(map[string]string)
	}
	if p.consume('}') {
		return nil
	}
	for {
		p.ws()
		k, err := p.str()
		if err != nil {
			return err
		}
		if !p.consume(':') {
			return p.fail("expected ':'")
		}
		p.ws()
		if p.isNull() {
			e.Headers[k] = ""
		} else {
			v, err := p.str()
			if err != nil {
				return err
			}
			e.Headers[k] = v
		}
		if p.consume(',') {
			continue
		}
		if p.consume('}') {
			return nil
		}
		return p.fail("expected ',' or '}'")
	}
}

// str decodes a JSON string at p.pos.
func (p *parser) str() (string, error) {
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return "", p.fail("expected a string")
	}
	start := p.pos
	p.pos++
	escaped := false
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !escaped {
				return string(p.data[start+1 : p.pos-1]), nil
			}
			var s string // rare: let encoding/json unescape
			if err := json.Unmarshal(p.data[start:p.pos], &s); err != nil {
				return "", err
			}
			return s, nil
		case c == '\\':
			escaped = true
			if p.pos+1 >= len(p.data) {
				return "", p.fail("unterminated escape")
			}
			switch p.data[p.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.pos += 2
			case 'u':
				if p.pos+6 > len(p.data) || !isHex4(p.data[p.pos+2:p.pos+6]) {
					return "", p.fail("bad \\u escape")
				}
				p.pos += 6
			default:
				return "", p.fail("bad escape")
			}
		case c < 0x20:
			return "", p.fail("control character in string")
		default:
			p.pos++
		}
	}
	return "", p.fail("unterminated string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !isHex(c) {
			return false
		}
	}
	return true
}

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// skip checks the JSON value at p.pos and moves past it.
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return p.fail("too deeply nested")
	}
	p.ws()
	if p.pos >= len(p.data) {
		return p.fail("unexpected end")
	}
	switch c := p.data[p.pos]; {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{':
		p.pos++
		if p.consume('}') {
			return nil
		}
		for {
			p.ws()
			if _, err := p.str(); err != nil {
				return err
			}
			if !p.consume(':') {
				return p.fail("expected ':'")
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			if p.consume(',') {
				continue
			}
			if p.consume('}') {
				return nil
			}
			return p.fail("expected ',' or '}'")
		}
	case c == '[':
		p.pos++
		if p.consume(']') {
			return nil
		}
		for {
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			if p.consume(',') {
				continue
			}
			if p.consume(']') {
				return nil
			}
			return p.fail("expected ',' or ']'")
		}
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.data)-p.pos >= len(lit) && string(p.data[p.pos:p.pos+len(lit)]) == lit {
				p.pos += len(lit)
				return nil
			}
		}
		return p.fail("unexpected character")
	}
}

// number checks a JSON number at p.pos and moves past it.
func (p *parser) number() error {
	d := p.data
	i := p.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		return p.fail("bad number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return p.fail("bad number")
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return p.fail("bad number")
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	p.pos = i
	return nil
}

// foldKey maps a key to the envelope field it names, matching
// case-insensitively like encoding/json (ASCII only; other keys are
// unknown fields).
func foldKey(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			b := []byte(k)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return k
}
