package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var codecSeeds = []string{
	`{"id":"a","kind":"request","type":"test.v1.StartVm","service_id":"vm.x","correlation_id":"c","reply_to":"r","timeout_ns":1000,"headers":{"traceparent":"00-1-2-01"},"body":{"vm_uuid":"932763162d054c04adaab6ab498c9139","n":[1,2.5e3,-0,true,null,{"x":"y"}]}}`,
	`{"id":"b","kind":"reply","correlation_id":"c","error":{"code":"not_found","description":"x","cause":{"code":"internal"}}}`,
	` { "ID" : "c" , "Kind":"event", "unknown":[{"a":[]}], "headers":{"a":"1"}, "headers":{"b":null}, "body":null, "type":null } `,
	`{"id":"\u0041\n\"q\"\\","kind":"send","service_id":"a\tb","timeout_ns":-0}`,
	`{"id":"x","kind":"send","timeout_ns":1.5}`,
	`{"id":"x","kind":"send","error":"nope"}`,
	`{"id":"x","kind":"sned"}`,
	`{"id":"x"} trailing`,
	`{"id":"x",}`,
	`{"body":01}`,
	`{}`, `[]`, `"s"`, ``,
	// Repeated keys: the later one is decoded over the earlier one, and
	// null means what it means to encoding/json for that field's type.
	`{"headers":{"a":"1"},"headers":null}`,
	`{"headers":{"a":"1"},"headers":{"b":"2"},"HEADERS":{"a":"3"}}`,
	`{"headers":null,"headers":{"a":"1"}}`,
	`{"headers":{"a":"1"},"headers":{}}`,
	`{"body":{"a":1},"body":null}`,
	`{"body":{"a":1},"body":[2]}`,
	`{"body":null,"body":"x"}`,
	`{"error":{"code":"busy","details":"d"},"error":null}`,
	`{"error":{"code":"busy","details":"d"},"error":{"code":"not_found"}}`,
	`{"error":null,"error":{"code":"busy"}}`,
	`{"error":{"code":"busy"},"error":"nope"}`,
	`{"id":"a","id":"b","Id":"c"}`,
	`{"id":"a","id":null}`,
	`{"kind":"send","kind":null}`,
	`{"kind":"send","kind":"event"}`,
	`{"timeout_ns":5,"timeout_ns":null}`,
	`{"timeout_ns":5,"timeout_ns":7}`,
	`{"id":"d","kind":"request","deadline_ns":1796000000123456789,"timeout_ns":5000000000}`,
	`{"deadline_ns":5,"deadline_ns":null}`,
	`{"deadline_ns":5,"Deadline_NS":7}`,
	`{"deadline_ns":1e3}`,
	`{"deadline_ns":9223372036854775808}`,
	`{"deadline_ns":-1}`,
	`{"service_id":"a","Service_ID":"b","service_id":null}`,
	// Keys that fold to a field name only under Unicode folding (U+017F
	// LATIN SMALL LETTER LONG S folds to s, U+212A KELVIN SIGN to k), and
	// the same as escapes.
	`{"ſource":"x","\u212aind":"send","\u017fervice_id":"y"}`,
	`{"headerſ":{"a":"1"},"headers":null}`,
	`{"ıd":"x","İD":"y"}`,
}

// FuzzEnvelopeCodecMatchesEncodingJSON keeps the hand-written envelope
// decoder in agreement with encoding/json on the same input: both accept
// or both reject, and what both accept decodes to the same envelope.
func FuzzEnvelopeCodecMatchesEncodingJSON(f *testing.F) {
	for _, s := range codecSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			return // rejected before decoding; null is a no-op for encoding/json
		}
		var want, got Envelope
		errWant := json.Unmarshal(data, &want)
		errGot := parseEnvelope(data, &got)
		if (errWant == nil) != (errGot == nil) {
			t.Fatalf("encoding/json says %v, the codec says %v, for %q", errWant, errGot, data)
		}
		if errWant != nil {
			return
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("decoded differently:\nencoding/json %+v\ncodec         %+v\ninput %q", want, got, data)
		}
	})
}

func TestDecodeRepeatedKeys(t *testing.T) {
	tests := []struct {
		in   string
		want Envelope
	}{
		{`{"headers":{"a":"1"},"headers":null}`, Envelope{}},
		{`{"headers":{"a":"1"},"headers":{"b":"2"}}`, Envelope{Headers: map[string]string{"a": "1", "b": "2"}}},
		{`{"headers":{"a":"1"},"headers":{"a":null}}`, Envelope{Headers: map[string]string{"a": ""}}},
		{`{"body":{"a":1},"body":null}`, Envelope{Body: json.RawMessage("null")}},
		{`{"body":{"a":1},"body":[2]}`, Envelope{Body: json.RawMessage("[2]")}},
		{`{"error":{"code":"busy","details":"d"},"error":null}`, Envelope{}},
		{`{"error":{"code":"busy","details":"d"},"error":{"code":"not_found"}}`, Envelope{Error: &message.Error{Code: message.ErrNotFound.Code}}},
		{`{"id":"a","ID":"b"}`, Envelope{ID: "b"}},
		{`{"id":"a","id":null}`, Envelope{ID: "a"}},
		{`{"kind":"send","kind":null}`, Envelope{Kind: KindSend}},
		{`{"timeout_ns":5,"timeout_ns":null}`, Envelope{Timeout: 5}},
		{`{"ſource":"x","\u212aind":"send"}`, Envelope{Source: "x", Kind: KindSend}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got, viaJSON Envelope
			require.NoError(t, parseEnvelope([]byte(tt.in), &got))
			require.NoError(t, json.Unmarshal([]byte(tt.in), &viaJSON))
			assert.Equal(t, tt.want, got)
			assert.Equal(t, viaJSON, got, "the codec must agree with encoding/json")
		})
	}
}

func TestDecodeNestingLimitMatchesEncodingJSON(t *testing.T) {
	// encoding/json allows 10000 nested containers, the envelope included.
	for _, n := range []int{maxDepth - 2, maxDepth - 1, maxDepth, maxDepth + 1} {
		for name, data := range map[string]string{
			"body":    `{"body":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`,
			"unknown": `{"x":` + strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) + `}`,
			"error":   `{"error":{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`,
		} {
			var want, got Envelope
			errWant := json.Unmarshal([]byte(data), &want)
			errGot := parseEnvelope([]byte(data), &got)
			assert.Equal(t, errWant == nil, errGot == nil, "%s nested %d deep: encoding/json says %v, the codec %v", name, n, errWant, errGot)
		}
	}
}

// FuzzEncodeEnvelopeRoundTrip: what the encoder accepts, the hand-written
// decoder reads back as the envelope encoded; the encoder refuses exactly
// the envelopes with invalid UTF-8 or an invalid JSON body.
func FuzzEncodeEnvelopeRoundTrip(f *testing.F) {
	f.Add("id-1", "test.v1.X", "svc.n", "traceparent", "00-\"x\"\n\x01", int64(1500), []byte(`{"a":[1,"b"]}`))
	f.Add("", "", "", "", "", int64(0), []byte(nil))
	f.Add("<&>\u2028\u2029", "\u007f", "\\", "k\x00", "\t\b\f", int64(-1), []byte(` {"html":"<&>\u2028"} `))
	f.Add("a", "b", "c", "h", "v", int64(1), []byte(`"\xff"`))
	f.Add("a", "b", "c", "h", "v", int64(1), []byte(`nul`))
	f.Fuzz(func(t *testing.T, id, typ, svc, hk, hv string, timeout int64, body []byte) {
		e := &Envelope{ID: id, Kind: KindRequest, Type: typ, ServiceID: svc, Timeout: time.Duration(timeout), Body: body}
		if hk != "" {
			e.Headers = map[string]string{hk: hv}
		}
		data, err := marshalEnvelope(e)
		valid := utf8.ValidString(id) && utf8.ValidString(typ) && utf8.ValidString(svc) &&
			(hk == "" || utf8.ValidString(hk) && utf8.ValidString(hv)) &&
			utf8.Valid(body) && (len(body) == 0 || json.Valid(body))
		if (err == nil) != valid {
			t.Fatalf("encode error %v, input valid %v", err, valid)
		}
		if err != nil {
			if message.CodeOf(err) != message.ErrBadRequest.Code {
				t.Fatalf("encode error without the bad_request code: %v", err)
			}
			return
		}
		var back Envelope
		if err := parseEnvelope(data, &back); err != nil {
			t.Fatalf("the decoder cannot read %q: %v", data, err)
		}
		if e.Protocol == 0 {
			e.Protocol = ProtocolVersion // written for a zero Protocol
		}
		if len(e.Body) == 0 {
			e.Body = nil
		} else { // encoding/json compacts a raw value and escapes <, >, &
			e.Body = compactJSON(t, e.Body)
			back.Body = compactJSON(t, back.Body)
		}
		if !reflect.DeepEqual(*e, back) {
			t.Fatalf("round trip differs:\n%+v\n%+v\n%s", *e, back, data)
		}
	})
}

// compactJSON returns the canonical form of a JSON value: compacted, with
// its strings in the escaping encoding/json uses.
func compactJSON(t *testing.T, raw []byte) []byte {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %q: %v", raw, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMarshalEnvelopeRefuses(t *testing.T) {
	ok := Envelope{ID: "a", Kind: KindSend, Type: "test.v1.X", ServiceID: "s"}
	tests := []struct {
		name   string
		change func(e *Envelope)
		want   string
	}{
		{"invalid UTF-8 id", func(e *Envelope) { e.ID = "a\xff" }, "string field or header is not valid UTF-8"},
		{"invalid UTF-8 source", func(e *Envelope) { e.Source = "\xc3" }, "string field or header is not valid UTF-8"},
		{"invalid UTF-8 header name", func(e *Envelope) { e.Headers = map[string]string{"\xff": "v"} }, "string field or header is not valid UTF-8"},
		{"invalid UTF-8 header value", func(e *Envelope) { e.Headers = map[string]string{"k": "\xff"} }, "string field or header is not valid UTF-8"},
		{"invalid UTF-8 body", func(e *Envelope) { e.Body = []byte("\"\xff\"") }, "body is not valid UTF-8"},
		{"invalid JSON body", func(e *Envelope) { e.Body = []byte(`{"a":`) }, "body is not valid JSON"},
		{"two JSON values", func(e *Envelope) { e.Body = []byte(`1 2`) }, "body is not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ok
			tt.change(&e)
			_, err := marshalEnvelope(&e)
			require.ErrorIs(t, err, message.ErrBadRequest)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The hand-written encoder that EncodeEnvelope used before it switched to
// encoding/json, kept here as the baseline of BenchmarkEnvelope so that the
// decision can be measured again (its strings now escaped by
// appendJSONString, which spliceBody uses). It is not used outside tests.

// appendEnvelope appends the JSON encoding of e to dst.
func appendEnvelope(dst []byte, e *Envelope) ([]byte, error) {
	kind, err := e.Kind.MarshalText()
	if err != nil {
		return nil, err
	}
	valid := utf8.ValidString(e.ID)
	dst = append(dst, `{"protocol":`...)
	dst = strconv.AppendInt(dst, int64(max(e.Protocol, ProtocolVersion)), 10)
	dst = append(dst, `,"id":`...)
	dst = appendJSONString(dst, e.ID)
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
		dst = appendJSONString(dst, f.v)
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
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = appendJSONString(dst, v)
		}
		dst = append(dst, '}')
	}
	if len(e.Body) > 0 {
		if !json.Valid(e.Body) {
			return nil, message.ErrBadRequest.WithDetails("body is not valid JSON")
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
		return nil, message.ErrBadRequest.WithDetails("a string field or header is not valid UTF-8")
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

// benchEnvelope is a typical request: every routing field, a traceparent
// header and a small body.
func benchEnvelope() *Envelope {
	return &Envelope{ID: "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4", Kind: KindRequest, Type: "test.v1.StartVm",
		ServiceID: "vmInstance.3694776ab31a45709259254a018913ca", ResourceUUID: "932763162d054c04adaab6ab498c9139",
		CorrelationID: "c", ReplyTo: "cloudbus.reply.3694776ab31a45709259254a018913ca",
		Source: "3694776ab31a45709259254a018913ca", Timeout: time.Second,
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Body:    json.RawMessage(`{"vm_uuid":"932763162d054c04adaab6ab498c9139"}`)}
}

func TestEncodeBaselineMatches(t *testing.T) {
	// The benchmark compares like with like: both encoders write the same JSON.
	e := benchEnvelope()
	e.Error = message.ErrNotFound.WithDetails("<vm>")
	a, err := marshalEnvelope(e)
	require.NoError(t, err)
	b, err := appendEnvelope(nil, e)
	require.NoError(t, err)
	assert.JSONEq(t, string(b), string(a))
}

// BenchmarkEnvelope measures the envelope encoders (encoding/json, used by
// EncodeEnvelope, and the hand-written baseline above) and decoders (the
// hand-written one, used by DecodeEnvelope, and encoding/json) side by
// side, in one run. Compare with
//
//	go test ./internal/wire -run '^$' -bench '^BenchmarkEnvelope$' -count 10 > bench.txt
//	benchstat -col /impl bench.txt
func BenchmarkEnvelope(b *testing.B) {
	e := benchEnvelope()
	data, err := json.Marshal(e)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"encode/impl=encoding-json", func() error { _, err := marshalEnvelope(e); return err }},
		{"encode/impl=hand-written", func() error { _, err := appendEnvelope(make([]byte, 0, sizeHint(e)), e); return err }},
		{"decode/impl=encoding-json", func() error { var x Envelope; return json.Unmarshal(data, &x) }},
		{"decode/impl=hand-written", func() error { var x Envelope; return parseEnvelope(data, &x) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeDecodeEnvelope measures the exported functions, with
// validation and the size check.
func BenchmarkEncodeDecodeEnvelope(b *testing.B) {
	e := benchEnvelope()
	data, err := EncodeEnvelope(e, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("EncodeEnvelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeEnvelope(e, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same envelope with its body marked as encoding/json's output, as
	// the bus marks what its registry encoded: encoded by hand
	// (spliceBody).
	marked := benchEnvelope()
	marked.MarkBodyMarshaled()
	b.Run("EncodeEnvelope/marked=true", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeEnvelope(marked, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A body marked as encoding/json's output, as the bus marks what its
	// registry encoded, with 1 KiB of text: copied, not compacted again.
	for _, marked := range []bool{false, true} {
		big := benchEnvelope()
		big.Body = json.RawMessage(`{"text":"` + strings.Repeat("0123456789abcdef", 64) + `","seq":1}`)
		if marked {
			big.MarkBodyMarshaled()
		}
		b.Run(fmt.Sprintf("EncodeEnvelope/body=1KiB/marked=%t", marked), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeEnvelope(big, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("DecodeEnvelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEnvelope(data, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
