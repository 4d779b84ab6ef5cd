package bus

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/internal/wire"
)

func TestTraceContextValidation(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		tp string
		ok bool
	}{
		{valid, true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"", false},
		{strings.ToUpper(valid), false},
		{valid + "-00", false}, // version 00 has four fields
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false}, // no dash after the flags
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", maxTraceParentBytes), false},
	} {
		assert.Equal(t, tc.ok, validTraceParent(tc.tp), "%q", tc.tp)
		tp, _ := TraceContextFrom(WithTraceContext(t.Context(), tc.tp, ""))
		if tc.ok {
			assert.Equal(t, tc.tp, tp)
		} else {
			assert.Empty(t, tp, "%q is dropped", tc.tp)
		}
	}
	// A malformed traceparent hides the one carried before.
	ctx := WithTraceContext(t.Context(), valid, "a=1")
	tp, ts := TraceContextFrom(WithTraceContext(ctx, "garbage", "b=2"))
	assert.Empty(t, tp)
	assert.Empty(t, ts)
	// A bad tracestate is dropped alone.
	for _, bad := range []string{strings.Repeat("a", MaxTraceStateBytes+1), "a=1\nb=2", "a=\u00e9"} {
		tp, ts = TraceContextFrom(WithTraceContext(t.Context(), valid, bad))
		assert.Equal(t, valid, tp)
		assert.Empty(t, ts, "%q", bad)
	}
	tp, ts = TraceContextFrom(WithTraceContext(t.Context(), valid, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"))
	assert.Equal(t, valid, tp)
	assert.Equal(t, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", ts)
}

func TestStampTrace(t *testing.T) {
	const (
		own   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	ctx := WithTraceContext(t.Context(), other, "x=1")
	shared := map[string]string{HeaderTraceParent: own, HeaderTraceState: "y=2", "k": "v"}

	env := &wire.Envelope{Headers: shared}
	stampTrace(ctx, env, false)
	assert.Equal(t, own, env.Headers[HeaderTraceParent], "the sender's own wins")

	env = &wire.Envelope{Headers: shared}
	stampTrace(ctx, env, true)
	assert.Equal(t, map[string]string{HeaderTraceParent: other, HeaderTraceState: "x=1", "k": "v"}, env.Headers, "a forward continues ctx's")
	assert.Equal(t, own, shared[HeaderTraceParent], "the shared map is left alone")

	env = &wire.Envelope{}
	stampTrace(WithTraceContext(t.Context(), other, ""), env, false)
	assert.Equal(t, map[string]string{HeaderTraceParent: other}, env.Headers)

	bad := map[string]string{HeaderTraceParent: "garbage", HeaderTraceState: "y=2", "k": "v"}
	env = &wire.Envelope{Headers: bad}
	stampTrace(t.Context(), env, true)
	assert.Equal(t, map[string]string{"k": "v"}, env.Headers, "a forward drops a malformed traceparent")
	env = &wire.Envelope{Headers: bad}
	stampTrace(t.Context(), env, false)
	assert.Equal(t, "garbage", env.Headers[HeaderTraceParent], "a sender's own is sent as set")
}
