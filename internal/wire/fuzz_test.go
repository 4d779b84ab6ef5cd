package wire_test

import (
	"reflect"
	"testing"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzDecodeEnvelope: decoding bytes from outside never panics, and what
// decodes re-encodes to something that decodes to the same envelope.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","kind":"request","type":"test.v1.StartVm","service_id":"vm.x","correlation_id":"c","reply_to":"r","timeout_ns":1000,"headers":{"traceparent":"00-1-2-01"},"body":{"vm_uuid":"932763162d054c04adaab6ab498c9139"}}`,
		`{"id":"b","kind":"reply","correlation_id":"c","error":{"code":"not_found","description":"x","cause":{"code":"internal"}}}`,
		`{"id":"c","kind":"event","type":"cloudbus.v1.NodeLeft","body":{"node":"3694776ab31a45709259254a018913ca","epoch":3,"reason":"evicted"}}`,
		`{"id":"d","kind":"send","type":"test.v1.StopVm","service_id":"vm.x","resource_uuid":"932763162d054c04adaab6ab498c9139"}`,
		`{}`, `null`, `[]`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := wire.DecodeEnvelope(data, 1<<16)
		if err != nil {
			if message.CodeOf(err) == "" {
				t.Fatalf("decode error without a code: %v", err)
			}
			return
		}
		again, err := wire.EncodeEnvelope(e, 1<<20)
		if err != nil {
			t.Fatalf("a decoded envelope does not re-encode: %v", err)
		}
		e2, err := wire.DecodeEnvelope(again, 1<<20)
		if err != nil {
			t.Fatalf("a re-encoded envelope does not decode: %v", err)
		}
		if e.Error != nil && e2.Error != nil && e.Error.Error() != e2.Error.Error() {
			t.Fatalf("error text changed: %q vs %q", e.Error, e2.Error)
		}
		e.Error, e2.Error = nil, nil
		e.Body, e2.Body = nil, nil // RawMessage is compacted on re-encode
		if len(e.Headers) == 0 {
			e.Headers = nil // "headers":{} decodes to an empty map, which encodes to nothing
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed the envelope:\n%+v\n%+v", e, e2)
		}
	})
}
