package wire_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestGoldenEnvelopes decodes envelopes as nodes of this protocol version
// (and, for request.unversioned.json, nodes from before versions existed;
// for error-reply.v1.json, nodes from before the error object carried its
// retry class) wrote them, and compares them with values written out here
// by hand, so that a change to the decoder that would misread a running
// cluster's older nodes fails. A file marked current must also be what
// the encoder writes today, byte for byte: a change to the encoding is a
// change to the wire format (see "Wire format and versions" in the
// package documentation). Never edit a golden file; for a new version, or
// a compatible addition (an optional field), add one and keep the old
// ones, no longer marked current.
func TestGoldenEnvelopes(t *testing.T) {
	const (
		vm     = "932763162d054c04adaab6ab498c9139"
		client = "3694776ab31a45709259254a018913ca"
		owner  = "7d2c9a4e1b3f4c5d8e6f7a8b9c0d1e2f"
		corr   = "0b1c2d3e4f5a4b6c8d9e0f1a2b3c4d5e"
		trace  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	request := &wire.Envelope{
		Protocol: 1, ID: "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4", Kind: wire.KindRequest, Type: "refnode.v1.StartVm",
		ServiceID: "api.portal", ResourceUUID: vm, CorrelationID: corr, ReplyTo: "cloudbus.reply." + client,
		Source: client, Timeout: 10 * time.Second, Deadline: 1796083200000000000,
		Headers: map[string]string{"cloudbus-retry": "2", "traceparent": trace},
		Body:    []byte(`{"uuid":"` + vm + `"}`),
	}
	unversioned := *request
	unversioned.Headers = map[string]string{"traceparent": trace}
	notFound := &message.Error{Code: message.ErrNotFound.Code, Description: "not found", Details: "vm " + vm,
		Cause: &message.Error{Description: "store: read vm: sql: no rows in result set"}}
	errorReply := func(id string, e *message.Error) *wire.Envelope {
		return &wire.Envelope{Protocol: 1, ID: id, Kind: wire.KindReply, ResourceUUID: vm, CorrelationID: corr, Source: owner, Error: e}
	}
	for _, tc := range []struct {
		file    string
		want    *wire.Envelope
		current bool // written by this version: the encoder must write exactly these bytes
		// For an error reply: the sentinel it matches and its retry class.
		is    *message.Error
		retry message.Retry
	}{
		{file: "request.v1.json", want: request, current: true},
		{file: "request.unversioned.json", want: &unversioned},
		{file: "reply.v1.json", current: true, want: &wire.Envelope{
			Protocol: 1, ID: "a1b2c3d4e5f64718293a4b5c6d7e8f90", Kind: wire.KindReply, Type: "refnode.v1.VmReply",
			ResourceUUID: vm, CorrelationID: corr, Source: owner, Headers: map[string]string{"traceparent": trace},
			Body: []byte(`{"vm":{"uuid":"` + vm + `","name":"web-1","image_uuid":"5e0c1d2b3a4f4e5d9c8b7a6f5e4d3c2b",` +
				`"host_uuid":"8a7b6c5d4e3f4a2b9c1d0e1f2a3b4c5d","cpus":2,"memory_mb":2048,"state":"running"},` +
				`"node":"` + owner + `","portal":"` + client + `"}`),
		}},
		// Written before the error object carried its retry class: the
		// class comes from the receiver's own table.
		{file: "error-reply.v1.json", want: errorReply("b2c3d4e5f6a74829304a5b6c7d8e9f01", notFound), is: message.ErrNotFound, retry: message.RetryNever},
		{file: "error-reply-retry.v1.json", want: errorReply("b2c3d4e5f6a74829304a5b6c7d8e9f01", notFound), current: true, is: message.ErrNotFound, retry: message.RetryNever},
		// A code a service registered (message.RegisterCode) and this
		// receiver did not: its class comes from the wire.
		{file: "error-reply-custom.v1.json", current: true, is: message.NewError("volume_attached", ""), retry: message.RetryNever, want: errorReply("e5f6a7b8c9d04b52637d8e9f0a1b2c34", &message.Error{
			Code: "volume_attached", Description: "the volume is attached to another VM",
			Details: "volume 5e0c1d2b3a4f4e5d9c8b7a6f5e4d3c2b is attached to vm 8a7b6c5d4e3f4a2b9c1d0e1f2a3b4c5d",
			Cause:   &message.Error{Code: message.ErrConflict.Code, Description: "the resource's state conflicts with the request"},
		})},
		{file: "event-node-left.v1.json", current: true, want: &wire.Envelope{
			Protocol: 1, ID: "c3d4e5f6a7b84930415b6c7d8e9f0a12", Kind: wire.KindEvent, Type: wire.TypeNodeLeft,
			Source: client,
			Body:   []byte(`{"node":"` + owner + `","epoch":1796083200123456789,"reason":"evicted","by":"` + client + `"}`),
		}},
		{file: "send.v1.json", current: true, want: &wire.Envelope{
			Protocol: 1, ID: "d4e5f6a7b8c94a41526c7d8e9f0a1b23", Kind: wire.KindSend, Type: "refnode.v1.StopVm",
			ServiceID: "vmInstance." + owner, ResourceUUID: vm, Source: client, Timeout: 5 * time.Second,
			Body: []byte(`{"uuid":"` + vm + `"}`),
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data := mustRead(t, tc.file)
			got, err := wire.DecodeEnvelope(data, 0)
			require.NoError(t, err, "a golden envelope must still decode")
			if tc.current {
				again, err := wire.EncodeEnvelope(got, 0)
				require.NoError(t, err)
				assert.Equal(t, string(data), string(again),
					"the encoder no longer writes protocol version %d as it did: that changes the wire format; "+
						"see the package documentation on versions", wire.ProtocolVersion)
			}
			if tc.want.Error != nil {
				require.NotNil(t, got.Error)
				assert.Equal(t, tc.want.Error.Code, got.Error.Code)
				assert.Equal(t, tc.want.Error.Description, got.Error.Description)
				assert.Equal(t, tc.want.Error.Details, got.Error.Details)
				require.NotNil(t, got.Error.Cause, "the cause chain survives")
				assert.EqualError(t, got.Error.Unwrap(), tc.want.Error.Cause.Error())
				assert.ErrorIs(t, got.Error, tc.is)
				assert.Equal(t, tc.retry, got.Error.Retry())
				got.Error, tc.want.Error = nil, nil // compared field by field
			}
			assert.Equal(t, tc.want, got)
		})
	}

	// Lifecycle bodies decode through every registry.
	ev, err := wire.DecodeEnvelope(mustRead(t, "event-node-left.v1.json"), 0)
	require.NoError(t, err)
	reg := message.NewRegistry()
	message.MustRegister[wire.NodeLeft](reg, wire.TypeNodeLeft)
	left, err := message.DecodeAs[wire.NodeLeft](reg, ev.Type, ev.Body)
	require.NoError(t, err)
	assert.Equal(t, wire.NodeLeft{Node: owner, Epoch: 1796083200123456789, Reason: wire.LeaveEvicted, By: client}, left)
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	require.NoError(t, err)
	return bytes.TrimSuffix(data, []byte("\n"))
}
