package bus

import (
	"time"

	"github.com/cloudbus-go/cloudbus/internal/busx"
)

// Option is a per-call knob for Send, Call and Broadcast.
type Option func(*busx.CallOptions)

// WithTimeout bounds the call by d, in addition to ctx's deadline (the
// earlier wins). Default: ctx's deadline, or Config.DefaultTimeout when
// ctx has none. The remaining time travels with the message, so the
// receiver's handler gets the same deadline.
func WithTimeout(d time.Duration) Option {
	return func(o *busx.CallOptions) { o.Timeout = d }
}

// WithHeader adds a header that passes through the bus untouched, for
// example a W3C traceparent. Default: no headers.
func WithHeader(key, value string) Option {
	return func(o *busx.CallOptions) {
		if o.Headers == nil {
			o.Headers = make(map[string]string)
		}
		o.Headers[key] = value
	}
}

// WithResource names the resource the message is about, for payload
// types that do not name it themselves (prefer implementing
// message.Routed on the type: then every sender routes it alike and
// receivers check it). The receiver runs messages about one resource one
// at a time, in arrival order. The UUID is normalized; a malformed one
// fails the call with message.ErrInvalidUUID, and one that differs from
// the resource a message.Routed payload names fails with
// message.ErrBadRequest, before anything is sent. Default: the resource
// the payload names, if any; otherwise none, and the message runs
// concurrently with others.
func WithResource(resourceUUID string) Option {
	return func(o *busx.CallOptions) { o.Resource = resourceUUID }
}

// WithID makes id the message's id (wire.Envelope.ID, what a handler
// reads with Request.ID) instead of a fresh random UUID. Default: a fresh
// UUID for every message.
//
// Use it to send the same logical message again (a retry, a forward):
// it keeps its id, so a handler that deduplicates by id runs it once. The
// UUID is normalized; a malformed one fails the call with
// message.ErrInvalidUUID before anything is sent. Any number of messages
// may share an id, even concurrently: a Call matches its reply by a
// correlation id of its own, a fresh UUID for every call, never by the
// message id, so calls sharing one id each get their own reply, and the
// late reply of an earlier attempt never answers a later one.
func WithID(id string) Option {
	return func(o *busx.CallOptions) { o.ID, o.IDSet = id, true }
}

// HeaderRetry is the header that carries [WithRetry]'s max with the
// message, in decimal: the api.portal of a service.Node reads it and
// retries its forward to the resource's owner accordingly. A sender in
// another language may set it by hand.
const HeaderRetry = "cloudbus-retry"

// WithRetry declares the message idempotent (its handler deduplicates by
// message id, see [WithID]) and allows up to max retries of a call about
// a resource whose outcome is unknown because the owner died or left
// mid-call (message.ErrNodeLeft), or that the receiver still refuses as
// not the owner (message.ErrNotOwner) once the router's own re-routes
// are spent. Each retry is sent with the same message id, once the
// router's ring has changed (for node_left: once it no longer names the
// owner that left), within ctx; the handler may so run on both the old
// owner and the new one, and after a node_left a later attempt's refusal
// does not say the first attempt will not run: the router returns
// node_left then. max must be at least 1; a smaller one fails the
// call with message.ErrBadRequest before anything is sent. Default: no
// such retry; node_left reaches the caller.
//
// Only a router that knows the ring retries: service.Node.Call, and the
// api.portal of a service.Node for what it receives (from
// service.Client, or from any sender of an api.portal message).
// CloudBus.Call and CloudBus.Send never retry, whatever the target: they
// only carry max with the message, as the header [HeaderRetry], which
// the portal that takes an api.portal message applies to its forward. A
// Broadcast carries nothing.
func WithRetry(max int) Option {
	return func(o *busx.CallOptions) { o.Retry, o.RetrySet = max, true }
}
