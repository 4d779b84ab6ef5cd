package wire_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	r := testRegistry(t)
	name, body, err := r.Encode(startVM{VMUUID: "932763162d054c04adaab6ab498c9139"})
	require.NoError(t, err)
	in := &wire.Envelope{
		Protocol:      wire.ProtocolVersion,
		ID:            message.NewUUID(),
		Kind:          wire.KindRequest,
		Type:          name,
		ServiceID:     "vmInstance.3694776ab31a45709259254a018913ca",
		ResourceUUID:  "932763162d054c04adaab6ab498c9139",
		CorrelationID: "c1",
		ReplyTo:       "reply.3694776ab31a45709259254a018913ca",
		Source:        "3694776ab31a45709259254a018913ca",
		Timeout:       1500 * time.Millisecond,
		Headers:       map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Body:          body,
	}
	data, err := wire.EncodeEnvelope(in, 0)
	require.NoError(t, err)
	out, err := wire.DecodeEnvelope(data, 0)
	require.NoError(t, err)
	assert.Equal(t, in, out)

	reply := out.Reply()
	reply.Error = message.ErrNotFound.WithDetails("vm gone")
	data, err = wire.EncodeEnvelope(reply, 0)
	require.NoError(t, err)
	back, err := wire.DecodeEnvelope(data, 0)
	require.NoError(t, err)
	assert.Equal(t, wire.KindReply, back.Kind)
	assert.Equal(t, "c1", back.CorrelationID)
	assert.Equal(t, in.ReplyTo, back.ServiceID)
	assert.Equal(t, in.Headers, back.Headers, "headers pass through untouched")
	assert.ErrorIs(t, back.Error, message.ErrNotFound)
}

func TestEncodeEnvelopeRefusesOversizeAndInvalid(t *testing.T) {
	e := &wire.Envelope{ID: "a", Kind: wire.KindSend, Type: "test.v1.StartVm", ServiceID: "vm.x",
		Body: []byte(`{"vm_uuid":"` + strings.Repeat("x", 2000) + `"}`)}
	_, err := wire.EncodeEnvelope(e, 1000)
	assert.ErrorIs(t, err, message.ErrTooLarge)
	assert.Contains(t, err.Error(), "exceeds the limit of 1000 bytes")

	e.Kind = 0
	_, err = wire.EncodeEnvelope(e, 0)
	assert.ErrorIs(t, err, message.ErrBadRequest)
	assert.Contains(t, err.Error(), "unknown kind")

	bad := &wire.Envelope{Kind: wire.KindRequest, ResourceUUID: "93276316-2d05-4c04-adaa-b6ab498c9139", Timeout: -1}
	err = bad.Validate()
	assert.ErrorIs(t, err, message.ErrBadRequest)
	assert.ErrorIs(t, err, message.ErrInvalidUUID)
	for _, want := range []string{"id must be", "type is required", "target service id", "reply-to", "not canonical", "negative timeout"} {
		assert.Contains(t, err.Error(), want, "Validate reports every problem at once")
	}
}

func TestKindText(t *testing.T) {
	for k := wire.KindSend; k <= wire.KindEvent; k++ {
		b, err := k.MarshalText()
		require.NoError(t, err)
		var back wire.Kind
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, k, back)
	}
	assert.Equal(t, "Kind(9)", wire.Kind(9).String())
	_, err := wire.Kind(9).MarshalText()
	assert.Error(t, err)
	assert.Equal(t, `unknown("x")`, wire.LeaveReason("x").String())
	assert.Equal(t, "evicted", wire.LeaveEvicted.String())
}

func TestEncodeEnvelopeWireFormat(t *testing.T) {
	// The field names, their order and what is left out are the wire
	// format: other nodes, and older versions, read them.
	e := &wire.Envelope{
		ID:            "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4",
		Kind:          wire.KindReply,
		Type:          "test.v1.StartVm",
		ServiceID:     "reply.n",
		ResourceUUID:  "932763162d054c04adaab6ab498c9139",
		CorrelationID: "c1",
		ReplyTo:       "r",
		Source:        "3694776ab31a45709259254a018913ca",
		Timeout:       1500 * time.Millisecond,
		Headers:       map[string]string{"z": "1", "a": "2"},
		Body:          []byte(`{ "vm_uuid" : "x" }`),
		Error:         message.ErrBusy.WithDetails("queue full"),
	}
	data, err := wire.EncodeEnvelope(e, 0)
	require.NoError(t, err)
	assert.Equal(t, `{"protocol":1,"id":"6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4","kind":"reply","type":"test.v1.StartVm",`+
		`"service_id":"reply.n","resource_uuid":"932763162d054c04adaab6ab498c9139","correlation_id":"c1",`+
		`"reply_to":"r","source":"3694776ab31a45709259254a018913ca","timeout_ns":1500000000,`+
		`"headers":{"a":"2","z":"1"},"body":{"vm_uuid":"x"},`+
		`"error":{"code":"busy","retry":"safe","description":"busy: queue for the resource is full","details":"queue full"}}`, string(data))

	minimal := &wire.Envelope{ID: "a", Kind: wire.KindEvent, Type: "test.v1.X", Headers: map[string]string{}}
	data, err = wire.EncodeEnvelope(minimal, 0)
	require.NoError(t, err)
	assert.Equal(t, `{"protocol":1,"id":"a","kind":"event","type":"test.v1.X"}`, string(data), "empty optional fields are left out")
}

func TestDecodeEnvelopeVersions(t *testing.T) {
	// Written before versions existed: version 1.
	e, err := wire.DecodeEnvelope([]byte(`{"id":"a","kind":"event","type":"test.v1.X"}`), 0)
	require.NoError(t, err)
	assert.Equal(t, 1, e.Protocol)
	e, err = wire.DecodeEnvelope([]byte(`{"protocol":1,"id":"a","kind":"event","type":"test.v1.X"}`), 0)
	require.NoError(t, err)
	assert.Equal(t, 1, e.Protocol)

	// A newer sender is refused, naming both versions, so that its caller
	// learns of the mismatch at once instead of being misread.
	_, err = wire.DecodeEnvelope([]byte(`{"protocol":2,"id":"a","kind":"request","type":"test.v1.X","service_id":"s","reply_to":"r","correlation_id":"c"}`), 0)
	require.ErrorIs(t, err, message.ErrBadRequest)
	assert.Contains(t, err.Error(), "unsupported protocol version 2: this node speaks version 1")
	for _, bad := range []string{`-1`, `1.5`, `"1"`, `99999999999999999999`} {
		_, err = wire.DecodeEnvelope([]byte(`{"protocol":`+bad+`,"id":"a","kind":"event","type":"test.v1.X"}`), 0)
		assert.ErrorIs(t, err, message.ErrBadRequest, "protocol %s", bad)
	}
}

func TestDecodeEnvelopeNormalizesResourceUUID(t *testing.T) {
	// Regression: a dashed or upper-case resource UUID was refused (and,
	// before that, dropped unanswered), although NormalizeUUID accepts
	// both. The receiver now normalizes it to the form the ring hashes.
	for _, u := range []string{
		"93276316-2d05-4c04-adaa-b6ab498c9139",
		"932763162D054C04ADAAB6AB498C9139",
		"93276316-2D05-4C04-ADAA-B6AB498C9139",
	} {
		e, err := wire.DecodeEnvelope([]byte(`{"id":"a","kind":"send","type":"test.v1.X","service_id":"s","resource_uuid":"`+u+`"}`), 0)
		require.NoError(t, err, u)
		assert.Equal(t, "932763162d054c04adaab6ab498c9139", e.ResourceUUID, u)
	}
	_, err := wire.DecodeEnvelope([]byte(`{"id":"a","kind":"send","type":"test.v1.X","service_id":"s","resource_uuid":"932763162d054c04adaab6ab498c913"}`), 0)
	assert.ErrorIs(t, err, message.ErrInvalidUUID, "31 digits are no UUID")
}

func TestEncodeEnvelopeRefusesWhatCannotBeSentFaithfully(t *testing.T) {
	base := wire.Envelope{ID: "a", Kind: wire.KindSend, Type: "test.v1.StartVm", ServiceID: "vm.x"}
	tests := []struct {
		name   string
		change func(*wire.Envelope)
		want   string
	}{
		{"invalid UTF-8 string", func(e *wire.Envelope) { e.CorrelationID = "c\xff" }, "not valid UTF-8"},
		{"invalid UTF-8 header", func(e *wire.Envelope) { e.Headers = map[string]string{"k": "\xfe"} }, "not valid UTF-8"},
		{"invalid UTF-8 body", func(e *wire.Envelope) { e.Body = []byte("\"\xff\"") }, "body is not valid UTF-8"},
		{"invalid JSON body", func(e *wire.Envelope) { e.Body = []byte(`{"vm_uuid":`) }, "body is not valid JSON"},
		{"empty header name", func(e *wire.Envelope) { e.Headers = map[string]string{"": "v"} }, "empty header name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := base
			tt.change(&e)
			_, err := wire.EncodeEnvelope(&e, 0)
			require.ErrorIs(t, err, message.ErrBadRequest)
			assert.Equal(t, message.ErrBadRequest.Code, message.CodeOf(err))
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := wire.EncodeEnvelope(nil, 0)
	assert.ErrorIs(t, err, message.ErrBadRequest, "a nil envelope is an error, not a panic")
}

func TestEncodeEnvelopeSizeLimitIsExact(t *testing.T) {
	e := &wire.Envelope{ID: "a", Kind: wire.KindSend, Type: "test.v1.StartVm", ServiceID: "vm.x"}
	data, err := wire.EncodeEnvelope(e, 0)
	require.NoError(t, err)
	_, err = wire.EncodeEnvelope(e, len(data))
	require.NoError(t, err, "an encoding of exactly maxSize bytes is accepted")
	_, err = wire.EncodeEnvelope(e, len(data)-1)
	require.ErrorIs(t, err, message.ErrTooLarge)
	_, err = wire.DecodeEnvelope(data, len(data)-1)
	require.ErrorIs(t, err, message.ErrTooLarge, "the decoder applies the same limit")
}

func TestEncodeEnvelopeEscapesRoundTrip(t *testing.T) {
	// encoding/json escapes <, >, & and U+2028/U+2029; the decoder reads
	// them back unchanged.
	e := &wire.Envelope{ID: "<a&b>\u2028", Kind: wire.KindSend, Type: "test.v1.StartVm", ServiceID: "vm.\"x\"\n",
		Headers: map[string]string{"k\t": "\x00\x1f"}, Body: []byte(`{"html":"<b>&amp;</b>"}`)}
	data, err := wire.EncodeEnvelope(e, 0)
	require.NoError(t, err)
	back, err := wire.DecodeEnvelope(data, 0)
	require.NoError(t, err)
	assert.Equal(t, e.ID, back.ID)
	assert.Equal(t, e.ServiceID, back.ServiceID)
	assert.Equal(t, e.Headers, back.Headers)
	var body struct{ HTML string }
	require.NoError(t, json.Unmarshal(back.Body, &body))
	assert.Equal(t, "<b>&amp;</b>", body.HTML)
}

// TestReplyAddressOfATooLongRequest: a request longer than the limit, as
// a transport hands it over cut short, still names its reply address if
// that comes before the part that makes it too long.
func TestReplyAddressOfATooLongRequest(t *testing.T) {
	head := `{"protocol":1,"id":"a","kind":"request","type":"test.v1.X","service_id":"s","correlation_id":"c1","reply_to":"cloudbus.reply.n","body":"`
	long := []byte(head + strings.Repeat("x", 100))
	limit := len(head) + 10
	replyTo, corr, ok := wire.ReplyAddress(long[:limit+1], limit) // cut to limit+1
	require.True(t, ok)
	assert.Equal(t, "cloudbus.reply.n", replyTo)
	assert.Equal(t, "c1", corr)
	_, _, ok = wire.ReplyAddress(long, len(head)-30)
	assert.False(t, ok, "the reply address is in the part cut off")
	_, _, ok = wire.ReplyAddress([]byte(`{"kind":"send","reply_to":"r","correlation_id":"c","body":"`+strings.Repeat("x", 100)), 70)
	assert.False(t, ok, "not a request")
	_, err := wire.DecodeEnvelope(long, len(head))
	assert.ErrorIs(t, err, message.ErrTooLarge)
}

type startVM struct {
	VMUUID string `json:"vm_uuid"`
	Host   string `json:"host,omitempty"`
}

func testRegistry(t testing.TB) *message.Registry {
	r := message.NewRegistry()
	require.NoError(t, message.Register[startVM](r, "test.v1.StartVm"))
	return r
}
