package wire

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSplicedBody checks that an envelope whose body is marked as
// encoding/json's output encodes to exactly the bytes it would without
// the mark, for bodies of every kind of value and envelopes with and
// without their optional fields.
func TestSplicedBody(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	runes := []string{"a", "Z", "0", " ", "<", ">", "&", "\"", "\\", "\n", "\t", "\u2028", "\u2029", "é", "世", "😀", "\x01", "\x7f", "/"}
	str := func() string {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(runes[r.IntN(len(runes))])
		}
		return b.String()
	}
	type payload struct {
		Name   string            `json:"name"`
		N      int               `json:"n,omitempty"`
		F      float64           `json:"f"`
		Tags   []string          `json:"tags,omitempty"`
		Labels map[string]string `json:"labels,omitempty"`
		Raw    json.RawMessage   `json:"raw,omitempty"`
		When   time.Time         `json:"when"`
	}
	for i := range 2000 {
		p := payload{Name: str(), N: r.IntN(3) - 1, F: r.Float64() * 1e6, When: time.Unix(r.Int64N(1e10), r.Int64N(1e9)).UTC()}
		for range r.IntN(3) {
			p.Tags = append(p.Tags, str())
		}
		if r.IntN(2) == 0 {
			p.Labels = map[string]string{str(): str(), str(): str()}
		}
		if r.IntN(3) == 0 {
			p.Raw = json.RawMessage(` { "a" : [ 1 , "<b>" ] } `) // compacted by Marshal
		}
		body, err := json.Marshal(p)
		require.NoError(t, err)
		e := &Envelope{ID: "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4", Kind: Kind(1 + r.IntN(3)), Type: "test.v1.Thing", Body: body,
			ServiceID: "svc.node", CorrelationID: "c1", ReplyTo: "cloudbus.reply.x"}
		if r.IntN(2) == 0 {
			e.ResourceUUID, e.Source = "932763162d054c04adaab6ab498c9139", str()
			e.Timeout, e.Deadline = time.Duration(r.Int64N(1e10)), r.Int64N(1e18)
		}
		if r.IntN(2) == 0 {
			e.Headers = map[string]string{"traceparent": str(), "x-" + str(): str()}
		}
		if r.IntN(4) == 0 {
			e.Protocol = ProtocolVersion
		}
		want, err := EncodeEnvelope(e, 0)
		require.NoError(t, err)
		e.MarkBodyMarshaled()
		require.True(t, e.bodyMarshaled())
		got, err := EncodeEnvelope(e, 0)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "envelope %d: the spliced body must give encoding/json's bytes", i)
		back, err := DecodeEnvelope(got, 0)
		require.NoError(t, err)
		require.JSONEq(t, string(body), string(back.Body))
	}
}

// TestMarkBodyMarshaledFollowsTheBody checks that the mark covers only the
// body it saw: another body assigned later is compacted as any other,
// and a size limit applies to spliced envelopes too.
func TestMarkBodyMarshaledFollowsTheBody(t *testing.T) {
	e := &Envelope{ID: "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4", Kind: KindSend, Type: "test.v1.Thing", ServiceID: "svc.node", Body: json.RawMessage(`{"a":1}`)}
	e.MarkBodyMarshaled()
	e.Body = json.RawMessage(` { "a" : "<b>" } `)
	assert.False(t, e.bodyMarshaled(), "a new body is not marked")
	data, err := EncodeEnvelope(e, 0)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"body":{"a":"\u003cb\u003e"}`, "an unmarked body is compacted and escaped")

	e.Body = json.RawMessage(`{"a":"` + strings.Repeat("x", 100) + `"}`)
	e.MarkBodyMarshaled()
	_, err = EncodeEnvelope(e, 64)
	assert.Error(t, err, "the size limit holds for a marked body")

	var empty Envelope
	empty.MarkBodyMarshaled()
	assert.False(t, empty.bodyMarshaled(), "an empty body is never marked")
}

// TestHasControl checks the word-at-a-time scan against a byte loop, for
// every byte value at every position of short inputs and random longer
// ones.
func TestHasControl(t *testing.T) {
	naive := func(b []byte) bool {
		for _, c := range b {
			if c < 0x20 {
				return true
			}
		}
		return false
	}
	for n := range 20 {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				require.Equal(t, naive(b), hasControl(b), "len %d, byte %#x at %d", n, c, pos)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(0x1c + r.IntN(0x100-0x1c)) // mostly printable, near the bound, and high bytes
		}
		require.Equal(t, naive(b), hasControl(b), "%q", b)
	}
}
