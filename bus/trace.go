package bus

import (
	"context"
	"maps"

	"github.com/cloudbus-go/cloudbus/internal/wire"
)

// The W3C Trace Context headers (https://www.w3.org/TR/trace-context/).
// The bus puts a valid pair found on an incoming message into its
// handler's ctx ([TraceContextFrom]) and onto every message sent with a
// ctx that carries one ([WithTraceContext]), unless the sender set the
// header itself ([WithHeader]). A malformed value is dropped, never an
// error.
const (
	// HeaderTraceParent is "version-traceid-parentid-flags" in lowercase
	// hex, e.g. "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".
	HeaderTraceParent = wire.HeaderTraceParent
	// HeaderTraceState is the vendors' list, at most MaxTraceStateBytes.
	HeaderTraceState = wire.HeaderTraceState
)

// MaxTraceStateBytes bounds a tracestate the bus carries (W3C: 512); a
// longer one is dropped, its traceparent kept.
const MaxTraceStateBytes = 512

// maxTraceParentBytes bounds a traceparent of a future version, which may
// append fields to version 00's 55 bytes.
const maxTraceParentBytes = 256

type traceKey struct{}

type traceContext struct{ parent, state string }

// WithTraceContext returns ctx carrying the W3C trace context traceparent
// and tracestate, which the bus sets on every message sent with it. A
// malformed traceparent (see [HeaderTraceParent]) gives ctx carrying
// none, hiding any ctx carried before; a malformed or oversized
// tracestate is dropped alone.
func WithTraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	if !validTraceParent(traceparent) {
		return context.WithValue(ctx, traceKey{}, traceContext{})
	}
	if !validTraceState(tracestate) {
		tracestate = ""
	}
	return context.WithValue(ctx, traceKey{}, traceContext{traceparent, tracestate})
}

// TraceContextFrom returns the W3C trace context ctx carries, or "" and
// "". A handler's ctx carries its message's.
func TraceContextFrom(ctx context.Context) (traceparent, tracestate string) {
	tc, _ := ctx.Value(traceKey{}).(traceContext)
	return tc.parent, tc.state
}

// incomingTrace returns ctx carrying the trace context of env's headers,
// if it has a valid one.
func incomingTrace(ctx context.Context, env *wire.Envelope) context.Context {
	tp := env.Headers[HeaderTraceParent]
	if tp == "" {
		return ctx
	}
	return WithTraceContext(ctx, tp, env.Headers[HeaderTraceState])
}

// stampTrace sets the trace context ctx carries on env, unless env names
// a traceparent already (the sender's own) and force is false; with
// force, a malformed one is removed when ctx carries none. A copy of the
// headers is written: env's map may be shared.
func stampTrace(ctx context.Context, env *wire.Envelope, force bool) {
	tp, ts := TraceContextFrom(ctx)
	if tp == "" {
		if old, set := env.Headers[HeaderTraceParent]; force && set && !validTraceParent(old) {
			h := maps.Clone(env.Headers) // a forward drops a malformed one
			delete(h, HeaderTraceParent)
			delete(h, HeaderTraceState)
			env.Headers = h
		}
		return
	}
	if _, set := env.Headers[HeaderTraceParent]; set && !force {
		return
	}
	h := make(map[string]string, len(env.Headers)+2)
	maps.Copy(h, env.Headers)
	h[HeaderTraceParent] = tp
	delete(h, HeaderTraceState)
	if ts != "" {
		h[HeaderTraceState] = ts
	}
	env.Headers = h
}

// validTraceParent reports whether s is a W3C traceparent this bus
// carries: version 00 exactly, or a later version (not ff) with at least
// version 00's fields and at most maxTraceParentBytes.
func validTraceParent(s string) bool {
	if len(s) < 55 || len(s) > maxTraceParentBytes {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if !lowerHex(s[0:2]) || !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return false
	}
	switch {
	case s[0:2] == "ff":
		return false
	case s[0:2] == "00" && len(s) != 55:
		return false
	case len(s) > 55 && s[55] != '-':
		return false
	}
	return !allZero(s[3:35]) && !allZero(s[36:52])
}

// validTraceState reports whether s is short enough and printable ASCII.
func validTraceState(s string) bool {
	if len(s) > MaxTraceStateBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
