package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Verbatim is an API message that counts its decodings.
type Verbatim struct {
	Resource string `json:"resource"`
	Note     string `json:"note"`
}

// ResourceUUID makes Verbatim a message.Routed type.
func (m Verbatim) ResourceUUID() string { return m.Resource }

var verbatimDecodes, verbatimReplyDecodes atomic.Int32

func (m *Verbatim) UnmarshalJSON(b []byte) error {
	verbatimDecodes.Add(1)
	type plain Verbatim
	return json.Unmarshal(b, (*plain)(m))
}

// VerbatimReply is the reply to Verbatim. A handler chooses its encoding
// (raw); a decoding keeps the bytes it was given (got) and counts itself.
type VerbatimReply struct {
	Node string `json:"node"`
	raw  []byte
	got  []byte
}

func (m VerbatimReply) MarshalJSON() ([]byte, error) {
	if m.raw != nil {
		return m.raw, nil
	}
	type plain VerbatimReply
	return json.Marshal(plain(m))
}

func (m *VerbatimReply) UnmarshalJSON(b []byte) error {
	verbatimReplyDecodes.Add(1)
	m.got = append([]byte(nil), b...)
	type plain VerbatimReply
	return json.Unmarshal(b, (*plain)(m))
}

// TestPortalForwardsBytes: api.portal forwards a request's body to the
// owner as it arrived and hands the owner's reply body back as the owner
// sent it. Bodies that a decode and encode would change (field order,
// unknown fields, escapes) arrive byte for byte; the request is decoded
// once (by the owner's bus) and the reply only by the caller; the owner's
// error reaches the caller as it sent it; a type the portal's node has not
// registered is refused as a service queue refuses it.
func TestPortalForwardsBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry()
		message.MustRegister[Verbatim](reg, "svctest.v1.Verbatim")
		message.MustRegister[VerbatimReply](reg, "svctest.v1.VerbatimReply")
		var mu sync.Mutex
		seen := map[string][]byte{} // resource -> the body its handler got
		ran := map[string]string{}  // resource -> the node its handler ran on
		replyBody := func(node string) []byte {
			return []byte(`{"zz_extra":{"k":"\/","n":[1.50,2]},"node":` + fmt.Sprintf("%q", node) + `,"unicode":"d\u00e9j\u00e0"}`)
		}
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, r *bus.Request, m Verbatim) (VerbatimReply, error) {
			mu.Lock()
			seen[m.Resource] = append([]byte(nil), busx.EnvelopeOf(r).Body...)
			ran[m.Resource] = r.Node()
			mu.Unlock()
			if m.Note == "refuse" {
				return VerbatimReply{}, message.ErrNotFound.WithDetails("the owner's own words").WithCause(message.ErrBusy.WithDetails("its cause"))
			}
			return VerbatimReply{raw: replyBody(r.Node())}, nil
		})
		c := servicetest.Start(t, servicetest.Options{Nodes: 3, Registry: reg,
			Services: func(int, nodekit.Env) []service.Service { return []service.Service{service.API("verbatim", mux)} }})

		// By hand, through the portal: whichever node's portal takes
		// them, the owners see and send exactly these bytes.
		for range 6 {
			res := message.NewUUID()
			body := []byte(`{"note":"caf\u00e9 \/ 1","zz_unknown":{"b":[1,2.50,true],"s":"\u0041"},"resource":"` + res + `"}`)
			verbatimDecodes.Store(0)
			verbatimReplyDecodes.Store(0)
			reply := rawRequest(t, c, bus.APIPortal, &wire.Envelope{Type: "svctest.v1.Verbatim", ResourceUUID: res, Body: body})
			require.Nil(t, reply.Error)
			mu.Lock()
			got, node := seen[res], ran[res]
			mu.Unlock()
			assert.Equal(t, c.Owner(res), node, "the owner ran it")
			assert.Equal(t, string(body), string(got), "the handler sees the request's body as the sender wrote it")
			assert.Equal(t, "svctest.v1.VerbatimReply", reply.Type)
			assert.Equal(t, string(replyBody(node)), string(reply.Body), "the sender gets the reply's body as the handler's bus wrote it")
			assert.EqualValues(t, 1, verbatimDecodes.Load(), "the request is decoded once, by the owner's bus, not by the portal's")
			assert.Zero(t, verbatimReplyDecodes.Load(), "nobody decodes the reply on its way back")
		}

		// Through a Client: the reply decoded once, by the client, from
		// the owner's bytes.
		client := c.Client(t)
		res := message.NewUUID()
		verbatimDecodes.Store(0)
		verbatimReplyDecodes.Store(0)
		got, err := service.Call[VerbatimReply](t.Context(), client, Verbatim{Resource: res, Note: "typed"})
		require.NoError(t, err)
		assert.Equal(t, c.Owner(res), got.Node)
		assert.Equal(t, string(replyBody(got.Node)), string(got.got), "the client decodes the owner's bytes")
		assert.EqualValues(t, 1, verbatimDecodes.Load(), "the request is decoded once")
		assert.EqualValues(t, 1, verbatimReplyDecodes.Load(), "the reply is decoded once, by the client")

		// The owner's error, as it sent it.
		_, err = service.Call[VerbatimReply](t.Context(), client, Verbatim{Resource: message.NewUUID(), Note: "refuse"})
		var e *message.Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, message.ErrNotFound.Code, e.Code)
		assert.Equal(t, "the owner's own words", e.Details)
		assert.ErrorIs(t, e, message.ErrBusy, "with its cause")

		// A type no registry of the cluster holds: the portal refuses it
		// as a service queue does, without forwarding it.
		unknown := &wire.Envelope{Type: "svctest.v1.Nowhere", Body: []byte(`{}`)}
		viaPortal := rawRequest(t, c, bus.APIPortal, unknown)
		direct := rawRequest(t, c, bus.ServiceID("verbatim", c.Node(0).UUID()), unknown)
		require.NotNil(t, viaPortal.Error)
		require.NotNil(t, direct.Error)
		assert.ErrorIs(t, viaPortal.Error, message.ErrUnknownMessage)
		assert.Equal(t, direct.Error.Error(), viaPortal.Error.Error())
	})
}
