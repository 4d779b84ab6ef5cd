package message

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
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
		for _, r := range []string{"ſ", "K", "17f", "17F", "212a", "212A", "212a"} {
			if bytes.Contains(data, []byte(r)) {
				return // encoding/json folds these into 's' and 'k' in keys; we fold ASCII only
			}
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

// FuzzEnvelopeEncodeMatchesEncodingJSON: the hand-written encoder's output
// decodes, with encoding/json, to the envelope encoded.
func FuzzEnvelopeEncodeMatchesEncodingJSON(f *testing.F) {
	f.Add("id-1", "test.v1.X", "svc.n", "traceparent", "00-\"x\"\n\x01", int64(1500), []byte(`{"a":[1,"b"]}`))
	f.Add("", "", "", "", "", int64(0), []byte(nil))
	f.Fuzz(func(t *testing.T, id, typ, svc, hk, hv string, timeout int64, body []byte) {
		e := &Envelope{ID: id, Kind: KindRequest, Type: typ, ServiceID: svc, Timeout: time.Duration(timeout), Body: body}
		if hk != "" {
			e.Headers = map[string]string{hk: hv}
		}
		data, err := appendEnvelope(nil, e)
		valid := utf8.ValidString(id) && utf8.ValidString(typ) && utf8.ValidString(svc) &&
			(hk == "" || utf8.ValidString(hk) && utf8.ValidString(hv)) && (len(body) == 0 || json.Valid(body))
		if (err == nil) != valid {
			t.Fatalf("encode error %v, input valid %v", err, valid)
		}
		if err != nil {
			return
		}
		var back Envelope
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("encoding/json cannot read %q: %v", data, err)
		}
		if len(e.Body) == 0 {
			e.Body = nil
		} else { // encoding/json drops the whitespace around a raw value
			var buf bytes.Buffer
			_ = json.Compact(&buf, e.Body)
			e.Body = buf.Bytes()
			buf.Reset()
			_ = json.Compact(&buf, back.Body)
			back.Body = buf.Bytes()
		}
		if !reflect.DeepEqual(*e, back) {
			t.Fatalf("round trip differs:\n%+v\n%+v\n%s", *e, back, data)
		}
	})
}

func BenchmarkEnvelope(b *testing.B) {
	e := &Envelope{ID: NewUUID(), Kind: KindRequest, Type: "test.v1.StartVm", ServiceID: "vmInstance.3694776ab31a45709259254a018913ca",
		ResourceUUID: "932763162d054c04adaab6ab498c9139", CorrelationID: "c", ReplyTo: "cloudbus.reply.3694776ab31a45709259254a018913ca",
		Source: "3694776ab31a45709259254a018913ca", Timeout: time.Second, Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Body: json.RawMessage(`{"vm_uuid":"932763162d054c04adaab6ab498c9139"}`)}
	data, _ := json.Marshal(e)
	b.Run("encode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = appendEnvelope(make([]byte, 0, sizeHint(e)), e)
		}
	})
	b.Run("encode/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(e)
		}
	})
	b.Run("decode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var x Envelope
			_ = parseEnvelope(data, &x)
		}
	})
	b.Run("decode/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var x Envelope
			_ = json.Unmarshal(data, &x)
		}
	})
}
