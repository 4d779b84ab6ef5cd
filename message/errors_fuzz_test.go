package message_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzErrorJSON: the error object of a reply, decoded from outside bytes,
// never panics; a decoded error always has a code (an empty top-level code
// becomes internal), a built-in code keeps its own retry class whatever
// the wire says, its cause chain is at most 8 deep and made of
// *message.Error only, it matches the sentinel of its code, and it
// re-encodes to JSON that decodes to the same error (the round trip is
// stable after one decode).
func FuzzErrorJSON(f *testing.F) {
	for _, s := range []string{
		`{"code":"not_found","description":"not found","details":"vm 932763162d054c04adaab6ab498c9139"}`,
		`{"code":"internal","description":"x","cause":{"code":"busy","cause":{"description":"plain"}}}`,
		`{"description":"no code"}`,
		`{"code":"from_a_newer_node"}`,
		`{"code":"from_a_newer_node","retry":"never"}`,
		`{"code":"not_found","retry":"safe"}`,
		`{"code":"x","retry":"partial","cause":{"code":"","retry":"never","cause":{"code":"y","retry":"ran"}}}`,
		`{"retry":"never"}`, `{"code":"x","retry":null}`, `{"code":"x","retry":1}`,
		`{"code":"","cause":{"code":""}}`,
		`{"cause":{"cause":{"cause":{"cause":{"cause":{"cause":{"cause":{"cause":{"cause":{"cause":{"code":"deep"}}}}}}}}}}}`,
		`{"code":null,"description":null,"cause":null}`,
		`{"Code":"busy","CAUSE":{"code":"timeout"},"code":"not_owner"}`,
		`{"code":"a\ud800b","description":"\u0000"}`,
		`{"code":1}`, `{"cause":[]}`, `{"cause":"x"}`, `[]`, `null`, `"x"`, ``, `{`, "{\"code\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e message.Error
		if err := json.Unmarshal(data, &e); err != nil {
			return // not an error object: the envelope decoder refuses it as bad_request
		}
		if isJSONNull(data) {
			return // null leaves the value as it was (encoding/json's rule)
		}
		if e.Code == "" {
			t.Fatalf("decoded an error without a code from %q", data)
		}
		if depth := causeDepth(t, &e); depth > 8 {
			t.Fatalf("cause chain %d deep from %q, want at most 8", depth, data)
		}
		if slices.Contains(message.Codes(), e.Code) {
			if !errors.Is(&e, message.NewError(e.Code, "")) {
				t.Fatalf("%v does not match the sentinel of its code %s", &e, e.Code)
			}
			if e.Retry() != e.Code.Retry() {
				t.Fatalf("built-in code %q has retry class %v from the wire, want its own %v", e.Code, e.Retry(), e.Code.Retry())
			}
		} else if r := e.Retry(); r < message.RetryUnknown || r > message.RetryRan {
			t.Fatalf("unknown code %q has retry class %v, not one of the four", e.Code, r)
		}
		if got := message.CodeOf(&e); got != e.Code {
			t.Fatalf("CodeOf = %q, want %q", got, e.Code)
		}
		_ = e.Error()
		again, err := json.Marshal(&e)
		if err != nil {
			t.Fatalf("a decoded error does not re-encode: %v", err)
		}
		var e2 message.Error
		if err := json.Unmarshal(again, &e2); err != nil {
			t.Fatalf("a re-encoded error does not decode: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed the error:\n%#v\n%#v\nfrom %q via %s", e, e2, data, again)
		}
		if e.Error() != e2.Error() {
			t.Fatalf("round trip changed the text: %q vs %q", e.Error(), e2.Error())
		}
	})
}

// causeDepth returns how many causes hang below e, failing if one is not
// an *message.Error (the wire knows no other kind).
func causeDepth(t *testing.T, e *message.Error) int {
	n := 0
	for c := e.Cause; c != nil; n++ {
		ce, ok := c.(*message.Error)
		if !ok {
			t.Fatalf("decoded cause %d is a %T, want *message.Error", n+1, c)
		}
		c = ce.Cause
	}
	return n
}

func isJSONNull(data []byte) bool {
	var v any
	return json.Unmarshal(data, &v) == nil && v == nil
}
