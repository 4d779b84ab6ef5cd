package wire_test

import (
	"testing"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzReplyAddress: the lenient reader of a refused request's reply
// address never panics; what it returns is within the limits of an
// envelope field (1 to 255 bytes of valid UTF-8), so the refusal reply
// built from it always encodes; of input over maxSize it reads the first
// maxSize bytes only; and on a request that DecodeEnvelope accepts it
// agrees with DecodeEnvelope.
func FuzzReplyAddress(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","kind":"request","type":"test.v1.StartVm","service_id":"vm.x","correlation_id":"c","reply_to":"cloudbus.reply.n","timeout_ns":1000}`,
		`{"id":"a","kind":"request","type":"test.v1.StartVm","service_id":"vm.x","correlation_id":"c","reply_to":"r","timeout_ns":-1}`,
		`{"kind":"request","reply_to":"cloudbus.reply.n","correlation_id":"c","headers":{"a":1}}`,
		`{"kind":"request","Reply_To":"a","reply_to":"b","CORRELATION_ID":"c","ſervice_id":"x"}`,
		`{"kind":"request","reply_to":"","correlation_id":"c"}`,
		`{"kind":"send","reply_to":"r","correlation_id":"c"}`,
		`{"kind":"request","reply_to":"r\ud800","correlation_id":"c"}`,
		`{"kind":"request","reply_to":null,"correlation_id":"c"}`,
		`{"kind":"request","reply_to":1,"correlation_id":"c"}`,
		`{"kind":"request","reply_to":"r","correlation_id":"c"} trailing`,
		`[]`, `null`, ``, "\xff",
	} {
		f.Add([]byte(s), 0)
	}
	f.Add([]byte(`{"kind":"request","reply_to":"r","correlation_id":"c"}`), 10)
	f.Add([]byte(`{"kind":"request","reply_to":"r","correlation_id":"c","body":"xxxxxxxxxxxxxxxxxxx`), 60) // cut short: too large
	f.Fuzz(func(t *testing.T, data []byte, maxSize int) {
		if maxSize > 1<<20 {
			maxSize = 1 << 20
		}
		replyTo, corr, ok := wire.ReplyAddress(data, maxSize)
		if !ok {
			if replyTo != "" || corr != "" {
				t.Fatalf("not ok, but returned %q, %q", replyTo, corr)
			}
		} else {
			for _, s := range []string{replyTo, corr} {
				if s == "" || len(s) > 255 || !utf8.ValidString(s) {
					t.Fatalf("address part %q is not 1 to 255 bytes of UTF-8", s)
				}
			}
			reply := &wire.Envelope{ID: message.NewUUID(), Kind: wire.KindReply, ServiceID: replyTo, CorrelationID: corr,
				Source: "3694776ab31a45709259254a018913ca", Error: message.ErrBadRequest.WithDetails("refused")}
			if _, err := wire.EncodeEnvelope(reply, 0); err != nil {
				t.Fatalf("the refusal to %q (correlation %q) does not encode: %v", replyTo, corr, err)
			}
		}
		// Past maxSize a transport may have cut the input short: nothing
		// beyond the first maxSize bytes counts.
		limit := maxSize
		if limit <= 0 {
			limit = message.DefaultMaxSize
		}
		if len(data) > limit {
			other := append(data[:limit:limit], `,"kind":"x","reply_to":"y","correlation_id":"z"}`...)
			r2, c2, ok2 := wire.ReplyAddress(other, maxSize)
			if r2 != replyTo || c2 != corr || ok2 != ok {
				t.Fatalf("input over maxSize %d: what follows its first %d bytes changes the address from %q, %q, %v to %q, %q, %v",
					maxSize, limit, replyTo, corr, ok, r2, c2, ok2)
			}
		}
		e, err := wire.DecodeEnvelope(data, maxSize)
		if err != nil || e.Kind != wire.KindRequest {
			return
		}
		if !ok || replyTo != e.ReplyTo || corr != e.CorrelationID {
			t.Fatalf("DecodeEnvelope reads reply_to %q, correlation %q; ReplyAddress %q, %q, %v", e.ReplyTo, e.CorrelationID, replyTo, corr, ok)
		}
	})
}
