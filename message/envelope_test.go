package message_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	r := testRegistry(t)
	name, body, err := r.Encode(startVM{VMUUID: "932763162d054c04adaab6ab498c9139"})
	require.NoError(t, err)
	in := &message.Envelope{
		ID:            message.NewUUID(),
		Kind:          message.KindRequest,
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
	data, err := message.EncodeEnvelope(in, 0)
	require.NoError(t, err)
	out, err := message.DecodeEnvelope(data, 0)
	require.NoError(t, err)
	assert.Equal(t, in, out)

	reply := out.Reply()
	reply.Error = message.ErrNotFound.WithDetails("vm gone")
	data, err = message.EncodeEnvelope(reply, 0)
	require.NoError(t, err)
	back, err := message.DecodeEnvelope(data, 0)
	require.NoError(t, err)
	assert.Equal(t, message.KindReply, back.Kind)
	assert.Equal(t, "c1", back.CorrelationID)
	assert.Equal(t, in.ReplyTo, back.ServiceID)
	assert.Equal(t, in.Headers, back.Headers, "headers pass through untouched")
	assert.ErrorIs(t, back.Error, message.ErrNotFound)
}

func TestEncodeEnvelopeRefusesOversizeAndInvalid(t *testing.T) {
	e := &message.Envelope{ID: "a", Kind: message.KindSend, Type: "test.v1.StartVm", ServiceID: "vm.x",
		Body: []byte(`{"vm_uuid":"` + strings.Repeat("x", 2000) + `"}`)}
	_, err := message.EncodeEnvelope(e, 1000)
	assert.ErrorIs(t, err, message.ErrTooLarge)
	assert.Contains(t, err.Error(), "exceeds the limit of 1000 bytes")

	e.Kind = 0
	_, err = message.EncodeEnvelope(e, 0)
	assert.ErrorIs(t, err, message.ErrBadRequest)
	assert.Contains(t, err.Error(), "unknown kind")

	bad := &message.Envelope{Kind: message.KindRequest, ResourceUUID: "93276316-2d05-4c04-adaa-b6ab498c9139", Timeout: -1}
	err = bad.Validate()
	assert.ErrorIs(t, err, message.ErrBadRequest)
	assert.ErrorIs(t, err, message.ErrInvalidUUID)
	for _, want := range []string{"id must be", "type is required", "target service id", "reply-to", "not canonical", "negative timeout"} {
		assert.Contains(t, err.Error(), want, "Validate reports every problem at once")
	}
}

func TestKindText(t *testing.T) {
	for k := message.KindSend; k <= message.KindEvent; k++ {
		b, err := k.MarshalText()
		require.NoError(t, err)
		var back message.Kind
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, k, back)
	}
	assert.Equal(t, "Kind(9)", message.Kind(9).String())
	_, err := message.Kind(9).MarshalText()
	assert.Error(t, err)
	assert.Equal(t, `unknown("x")`, message.LeaveReason("x").String())
	assert.Equal(t, "evicted", message.LeaveEvicted.String())
}
