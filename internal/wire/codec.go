package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/message"
)

// The envelope's JSON is encoded with encoding/json and decoded by hand.
//
// Decoding is on the receive path of every message and takes bytes from
// outside: the hand-written decoder below is 3.3 to 4 times faster than
// encoding/json (BenchmarkEnvelope, decode/*). It follows encoding/json's
// rules for the struct tags of [Envelope] exactly; a differential fuzz
// test (FuzzEnvelopeCodecMatchesEncodingJSON) keeps the two in agreement.
//
// Encoding used to be hand-written too. Measured side by side in one run
// (BenchmarkEnvelope, encode/*, which keeps that encoder in codec_test.go
// as the baseline; Go 1.26, 2 vCPUs, three runs of -count 10), it was no
// faster than encoding/json (1.3-2.3 µs against 1.3-2.1 µs per envelope,
// no significant difference, benchstat p > 0.05 each time) and allocated
// more (1,400 B in 4 allocations against 600 B in 5), so encoding/json
// does it now. Re-run the benchmark before bringing a hand-written
// encoder back.
//
// What encoding/json spends on an envelope grows with its body, which it
// checks and compacts again although the bus's registry made it with
// encoding/json already: 9.3-11 µs for an envelope with a 1 KiB body.
// A body marked with [Envelope.MarkBodyMarshaled] is copied instead, after
// the rest of the envelope (spliceBody): 2.6-3.1 µs, the same bytes
// (BenchmarkEncodeDecodeEnvelope, body=1KiB; TestSplicedBody).

// marshalEnvelope encodes e with encoding/json. It first refuses what
// encoding/json would silently change (a string field or header that is
// not valid UTF-8 would be sent with U+FFFD in place of the bad bytes) or
// what no receiver could decode (a body that is not valid UTF-8), and
// names an invalid JSON body. A zero Protocol is written as
// [ProtocolVersion]. The output is exactly the JSON of e's
// struct tags: empty optional fields left out, headers sorted by key,
// the body compacted, and <, > and & in strings escaped as \u003c,
// \u003e and \u0026, which every JSON decoder reads back unchanged.
func marshalEnvelope(e *Envelope) ([]byte, error) {
	if !envelopeUTF8(e) {
		return nil, message.ErrBadRequest.WithDetails("a string field or header is not valid UTF-8")
	}
	if e.Error == nil && e.bodyMarshaled() {
		return spliceBody(e)
	}
	if !utf8.Valid(e.Body) {
		return nil, message.ErrBadRequest.WithDetails("body is not valid UTF-8")
	}
	if e.Protocol == 0 {
		c := *e // e is not ours to change
		c.Protocol = ProtocolVersion
		e = &c
	}
	data, err := json.Marshal(e)
	if err != nil {
		if len(e.Body) > 0 && !json.Valid(e.Body) {
			return nil, message.ErrBadRequest.WithDetails("body is not valid JSON").WithCause(err)
		}
		return nil, message.ErrBadRequest.WithDetails("encode envelope").WithCause(err)
	}
	return data, nil
}

// spliceBody encodes e, whose Body encoding/json made and whose Error is
// nil, without compacting the body again: the rest of the envelope with
// encoding/json, then the body, the last field, as it is. The output is
// the bytes encoding/json makes of the whole envelope (TestSplicedBody).
func spliceBody(e *Envelope) ([]byte, error) {
	c := *e
	c.Body, c.marshaled = nil, nil
	if c.Protocol == 0 {
		c.Protocol = ProtocolVersion
	}
	head, err := json.Marshal(&c)
	if err != nil {
		return nil, message.ErrBadRequest.WithDetails("encode envelope").WithCause(err)
	}
	const field = `,"body":`
	out := make([]byte, 0, len(head)+len(field)+len(e.Body))
	out = append(out, head[:len(head)-1]...) // without its closing brace
	out = append(out, field...)
	out = append(out, e.Body...)
	return append(out, '}'), nil
}

// envelopeUTF8 reports whether every string field and header of e is
// valid UTF-8.
func envelopeUTF8(e *Envelope) bool {
	for _, s := range [...]string{e.ID, e.Type, e.ServiceID, e.ResourceUUID, e.CorrelationID, e.ReplyTo, e.Source} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	for k, v := range e.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// errSyntax is returned for input that is not the JSON of an envelope.
var errSyntax = errors.New("invalid JSON")

// parser decodes one envelope object from valid UTF-8 input.
type parser struct {
	data []byte
	pos  int
	// text is data as a string when data is at most sharedTextMax bytes:
	// the strings decoded from it (keys, ids, headers) are then slices
	// of it instead of one allocation each (23 of the 108 allocations of
	// a membus Call). A larger envelope decodes each string on its own,
	// so that an id kept by its receiver does not keep a large message
	// alive.
	text string
}

// sharedTextMax bounds the envelopes whose decoded strings share one
// copy of the input (see parser.text): an envelope of at most 4 KiB.
const sharedTextMax = 4 << 10

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
// rules for the struct: unknown fields are ignored, keys match
// case-insensitively (with Unicode folding, see foldKey), nesting is
// bounded, and anything after the object is an error. A repeated key is decoded again over what the earlier one set:
// a later string, kind, timeout, body or error replaces the earlier one,
// later headers are merged into the earlier ones. null leaves a string,
// kind or timeout as it was, clears headers and error, and sets the body
// to the raw "null" (as json.RawMessage does).
func parseEnvelope(data []byte, e *Envelope) error {
	p := &parser{data: data}
	if len(data) <= sharedTextMax {
		p.text = string(data)
	}
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
		n, err := p.int64(key)
		if err != nil {
			return err
		}
		e.Timeout = time.Duration(n)
		return nil
	case "protocol":
		if p.isNull() {
			return nil
		}
		n, err := p.int64(key)
		if err != nil {
			return err
		}
		e.Protocol = int(n)
		return nil
	case "deadline_ns":
		if p.isNull() {
			return nil
		}
		n, err := p.int64(key)
		if err != nil {
			return err
		}
		e.Deadline = n
		return nil
	case "headers":
		return p.headers(e)
	case "body":
		start := p.pos
		if err := p.skip(1); err != nil {
			return err
		}
		// Like encoding/json's RawMessage, a null body is kept as "null".
		e.Body = append([]byte(nil), p.data[start:p.pos]...)
		return nil
	case "error":
		start := p.pos
		if err := p.skip(1); err != nil {
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
			e.Error = new(message.Error)
		}
		return json.Unmarshal(raw, e.Error)
	default:
		return p.skip(1)
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
		e.Headers = nil // like encoding/json, null clears a map set by an earlier "headers"
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
	// The usual string: up to the next quote, no escape and no control
	// character. IndexByte finds both bytes many at a time.
	if q := bytes.IndexByte(p.data[start+1:], '"'); q >= 0 {
		seg := p.data[start+1 : start+1+q]
		if bytes.IndexByte(seg, '\\') < 0 && !hasControl(seg) {
			p.pos = start + q + 2
			if p.text != "" {
				return p.text[start+1 : p.pos-1], nil
			}
			return string(seg), nil
		}
	}
	p.pos++
	escaped := false
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !escaped {
				if p.text != "" {
					return p.text[start+1 : p.pos-1], nil
				}
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

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time: a word w has one if (w - 0x20 in every byte) & ^w has a byte's
// high bit set, exactly then for bounds up to 0x80.
func hasControl(b []byte) bool {
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		if (w-0x2020202020202020)&^w&0x8080808080808080 != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !isHex(c) {
			return false
		}
	}
	return true
}

// maxDepth bounds nesting, as encoding/json does: at most 10000 arrays
// and objects open at once, the envelope itself included.
const maxDepth = 10000

// skip checks the JSON value at p.pos and moves past it. depth is the
// number of arrays and objects the value is inside (1 for a field of the
// envelope).
func (p *parser) skip(depth int) error {
	p.ws()
	if p.pos >= len(p.data) {
		return p.fail("unexpected end")
	}
	switch c := p.data[p.pos]; {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{':
		if depth >= maxDepth {
			return p.fail("too deeply nested")
		}
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
		if depth >= maxDepth {
			return p.fail("too deeply nested")
		}
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

// int64 reads a JSON number at p.pos that must be an integer fitting
// int64, as encoding/json requires of an int64 field; name is the key,
// for the error.
func (p *parser) int64(name string) (int64, error) {
	start := p.pos
	if err := p.number(); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(p.data[start:p.pos]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", name)
	}
	return n, nil
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
// case-insensitively like encoding/json: it folds each rune to the
// smallest of its Unicode case-fold set, so U+017F (ſ) matches 's' and
// U+212A (Kelvin sign) 'k', then lower-cases ASCII. A key of lower-case
// ASCII is returned as is, without allocating.
func foldKey(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
			return foldKeySlow(k)
		}
	}
	return k
}

func foldKeySlow(k string) string {
	b := make([]byte, 0, len(k))
	for _, r := range k {
		if r >= utf8.RuneSelf {
			r = foldRune(r)
		}
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// foldRune returns the smallest rune of r's case-fold set, as
// encoding/json does when it matches keys to field names.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// truncate shortens a type name quoted in an error.
func truncate(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
