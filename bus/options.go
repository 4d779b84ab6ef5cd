package bus

import (
	"maps"
	"time"
)

// Option is a per-call knob for Send, Call and Broadcast.
type Option func(*callOptions)

type callOptions struct {
	timeout  time.Duration
	headers  map[string]string
	resource string
}

// WithTimeout bounds the call by d, in addition to ctx's deadline (the
// earlier wins). Default: ctx's deadline, or Config.DefaultTimeout when
// ctx has none. The remaining time travels with the message, so the
// receiver's handler gets the same deadline.
func WithTimeout(d time.Duration) Option {
	return func(o *callOptions) { o.timeout = d }
}

// WithHeader adds a header that passes through the bus untouched, for
// example a W3C traceparent. Default: no headers.
func WithHeader(key, value string) Option {
	return func(o *callOptions) {
		if o.headers == nil {
			o.headers = make(map[string]string)
		}
		o.headers[key] = value
	}
}

// WithHeaders adds all of h (copied) as headers. Default: no headers.
func WithHeaders(h map[string]string) Option {
	return func(o *callOptions) {
		if len(h) == 0 {
			return
		}
		if o.headers == nil {
			o.headers = make(map[string]string, len(h))
		}
		maps.Copy(o.headers, h)
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
	return func(o *callOptions) { o.resource = resourceUUID }
}
