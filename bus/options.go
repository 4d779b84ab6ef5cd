package bus

import (
	"time"

	"github.com/cloudbus-go/cloudbus/internal/busx"
)

// Option is a per-call knob for Send, Call and Broadcast, made by one of
// the With functions.
type Option struct{ apply func(*busx.CallOptions) }

// applyOptions returns the options opts set.
func applyOptions(opts []Option) busx.CallOptions {
	if len(opts) == 0 {
		return busx.CallOptions{}
	}
	return applyGiven(opts)
}

// applyGiven is applyOptions for one or more options: the value the
// options write to escapes to the heap through their functions, and a
// call without options does not pay for it.
func applyGiven(opts []Option) busx.CallOptions {
	var o busx.CallOptions
	for _, opt := range opts {
		if opt.apply != nil {
			opt.apply(&o)
		}
	}
	return o
}

// WithTimeout bounds the call by d as well as by ctx (the earlier wins).
// Default: ctx's deadline, or Config.DefaultTimeout if it has none. The
// handler's ctx gets the same deadline.
func WithTimeout(d time.Duration) Option {
	return Option{func(o *busx.CallOptions) { o.Timeout = d }}
}

// WithHeader adds a header that passes through the bus untouched. A
// [HeaderTraceParent] set so is sent instead of the trace context ctx
// carries (with [HeaderTraceState] only if set so too). Default: none.
func WithHeader(key, value string) Option {
	return Option{func(o *busx.CallOptions) {
		if o.Headers == nil {
			o.Headers = make(map[string]string)
		}
		o.Headers[key] = value
	}}
}

// WithResource names the resource the message is about, for a payload
// type that is not message.Routed; messages about one resource run one at
// a time. A malformed UUID fails with message.ErrInvalidUUID, one that
// contradicts a Routed payload with message.ErrBadRequest, before anything
// is sent. Default: the resource the payload names, or none.
func WithResource(resourceUUID string) Option {
	return Option{func(o *busx.CallOptions) { o.Resource = resourceUUID }}
}

// WithID gives the message id (see [Request.ID]) instead of a fresh UUID,
// to send a logical message again. A malformed UUID fails with
// message.ErrInvalidUUID before anything is sent. Messages may share an
// id: each Call still gets its own reply. Default: a fresh UUID.
func WithID(id string) Option {
	return Option{func(o *busx.CallOptions) { o.ID, o.IDSet = id, true }}
}

// HeaderRetry carries [WithRetry]'s max with the message, in decimal, for
// the API portal that forwards it; a sender in another language may set
// it.
const HeaderRetry = "cloudbus-retry"

// WithRetry declares the message idempotent (its handler deduplicates by
// [Request.ID]) and allows up to max retries of a call about a resource
// whose owner left mid-call (message.ErrNodeLeft) or still refuses it
// (message.ErrNotOwner), each with the same id once the router's ring has
// changed. The handler may so run twice; after a node-left, a later
// refusal ends the call with message.ErrNodeLeft. A max below 1 fails with
// message.ErrBadRequest. Default: no retry.
//
// Only a router that knows the ring retries: service.Call and service.Send
// on a node, and the API portal. [Call] and [CloudBus.Send] only carry max
// as [HeaderRetry].
func WithRetry(max int) Option {
	return Option{func(o *busx.CallOptions) { o.Retry, o.RetrySet = max, true }}
}
