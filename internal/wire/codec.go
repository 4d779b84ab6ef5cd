package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/message"
)

// The envelope's JSON is decoded by hand, and encoded by hand or with
// encoding/json.
//
// Decoding is on the receive path of every message and takes bytes from
// outside: the hand-written decoder below is 3.3 to 4 times faster than
// encoding/json (BenchmarkEnvelope, decode/*). It follows encoding/json's
// rules for the struct tags of [Envelope] exactly; a differential fuzz
// test (FuzzEnvelopeCodecMatchesEncodingJSON) keeps the two in agreement.
//
// Encoding is done by hand for the envelopes the bus sends (every one
// whose body its registry made with encoding/json, marked with
// [Envelope.MarkBodyMarshaled], and without an error), and by
// encoding/json for the rest (error replies, bodies from elsewhere, which
// it checks and compacts). A general hand-written encoder, kept in
// codec_test.go as the baseline of BenchmarkEnvelope, was no faster than
// encoding/json (1.3-2.3 µs against 1.3-2.1 µs per envelope) and
// allocated more; the one here (spliceBody) writes only the fields of a
// marked envelope, into one allocation of the right size, and copies the
// body as it is instead of checking and compacting it again. Its output
// is encoding/json's byte for byte (TestSplicedBody, which encodes 2,000
// random envelopes both ways). Compare them with
// BenchmarkEncodeDecodeEnvelope (EncodeEnvelope against
// EncodeEnvelope/marked=true, and the 1 KiB bodies).

// marshalEnvelope encodes e, with spliceBody if its body is marked, else
// with encoding/json. It first refuses what
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
// nil, without reflection and without compacting the body again: the
// fields in the order of their struct tags, as encoding/json writes them
// (empty optional fields left out, headers sorted by name, strings
// escaped as appendJSONString says), then the body, the last field, as it
// is. The output is the bytes encoding/json makes of the whole envelope
// (TestSplicedBody), in one allocation of the right size. It is the
// encoding of every envelope the bus sends but for error replies: 0.3 µs
// instead of encoding/json's 1.3 µs (BenchmarkEncodeDecodeEnvelope).
// e's strings are valid UTF-8 (marshalEnvelope checked).
func spliceBody(e *Envelope) ([]byte, error) {
	kind, err := e.Kind.MarshalText()
	if err != nil {
		return nil, message.ErrBadRequest.WithDetails("encode envelope").WithCause(err)
	}
	protocol := e.Protocol
	if protocol == 0 {
		protocol = ProtocolVersion
	}
	var keys [4]string
	names := keys[:0]
	size := 200 + len(e.ID) + len(e.Type) + len(e.ServiceID) + len(e.ResourceUUID) + len(e.CorrelationID) +
		len(e.ReplyTo) + len(e.Source) + len(e.Body)
	for k, v := range e.Headers {
		names = append(names, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(names)
	out := make([]byte, 0, size)
	out = append(out, `{"protocol":`...)
	out = strconv.AppendInt(out, int64(protocol), 10)
	out = append(out, `,"id":`...)
	out = appendJSONString(out, e.ID)
	out = append(out, `,"kind":"`...)
	out = append(out, kind...)
	out = append(out, '"')
	for _, f := range [...]struct {
		key, value string
	}{
		{`,"type":`, e.Type},
		{`,"service_id":`, e.ServiceID},
		{`,"resource_uuid":`, e.ResourceUUID},
		{`,"correlation_id":`, e.CorrelationID},
		{`,"reply_to":`, e.ReplyTo},
		{`,"source":`, e.Source},
	} {
		if f.value != "" {
			out = append(out, f.key...)
			out = appendJSONString(out, f.value)
		}
	}
	if e.Timeout != 0 {
		out = append(out, `,"timeout_ns":`...)
		out = strconv.AppendInt(out, int64(e.Timeout), 10)
	}
	if e.Deadline != 0 {
		out = append(out, `,"deadline_ns":`...)
		out = strconv.AppendInt(out, e.Deadline, 10)
	}
	if len(names) > 0 {
		out = append(out, `,"headers":{`...)
		for i, k := range names {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, k)
			out = append(out, ':')
			out = appendJSONString(out, e.Headers[k])
		}
		out = append(out, '}')
	}
	out = append(out, `,"body":`...)
	out = append(out, e.Body...)
	return append(out, '}'), nil
}

// appendJSONString appends s, valid UTF-8, as encoding/json writes a
// string: quoted, with ", \ and the control characters escaped (\b, \f,
// \n, \r and \t by name, the others as \u00XX), and <, >, &, U+2028 and
// U+2029 as \u003c, \u003e, \u0026, \u2028 and \u2029.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if !escapedByte[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf { // 0xE2: perhaps U+2028 or U+2029
			if i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[s[i+2]&0xF])
				i += 3
				start = i
				continue
			}
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// escapedByte is false for the bytes appendJSONString copies as they are,
// true for those it escapes and for 0xE2, the first byte of U+2028 and
// U+2029.
var escapedByte = func() (t [256]bool) {
	for c := range t {
		t[c] = c < ' ' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c == 0xE2
	}
	return t
}()

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
