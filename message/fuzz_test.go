package message_test

import (
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzDecodePayload: decoding (name, body) never panics and only ever
// yields a value of a registered type.
func FuzzDecodePayload(f *testing.F) {
	f.Add("test.v1.StartVm", []byte(`{"vm_uuid":"932763162d054c04adaab6ab498c9139"}`))
	f.Add("test.v1.StopVm", []byte(`{"vm_uuid":"x","force":true}`))
	f.Add("cloudbus.v1.NodeJoined", []byte(`{"node":"3694776ab31a45709259254a018913ca","epoch":1}`))
	f.Add("os.File", []byte(`{}`))
	f.Add("test.v1.StartVm", []byte(`{"vm_uuid":"a"} trailing`))
	f.Add("test.v1.StartVm", []byte("\xff"))
	r := testRegistry(f)
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		v, err := r.Decode(name, body)
		if err != nil {
			if message.CodeOf(err) == "" {
				t.Fatalf("decode error without a code: %v", err)
			}
			return
		}
		if !r.Known(name) {
			t.Fatalf("decoded unregistered type %q", name)
		}
		got, err := r.NameOf(v)
		if err != nil || got != name {
			t.Fatalf("decoded %q into %T (registered as %q, %v)", name, v, got, err)
		}
	})
}
