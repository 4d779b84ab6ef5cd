package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/message"
)

// ProtocolVersion is the version of the wire protocol this package
// speaks and writes into every envelope it encodes (the "protocol"
// field). An envelope without the field is version 1. A receiver refuses
// an envelope of a higher version with [message.ErrBadRequest] naming both
// versions, so that a caller learns of the mismatch at once. The rules
// for compatible changes are in the package documentation ("Wire format
// and versions").
const ProtocolVersion = 1

// Kind says what an envelope is for.
type Kind uint8

// The kinds of envelope.
const (
	// KindSend is a one-way message to a service; no reply is sent.
	KindSend Kind = iota + 1
	// KindRequest is a message that expects a reply at ReplyTo.
	KindRequest
	// KindReply answers the request with the same CorrelationID.
	KindReply
	// KindEvent is broadcast to every node.
	KindEvent
)

// String returns the kind's wire name, or "Kind(n)" for an unknown value.
func (k Kind) String() string {
	switch k {
	case KindSend:
		return "send"
	case KindRequest:
		return "request"
	case KindReply:
		return "reply"
	case KindEvent:
		return "event"
	default:
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
}

// kindNames holds the wire names MarshalText returns, made once: an
// envelope's encoding then costs no allocation for its kind.
var kindNames = [...][]byte{KindSend: []byte("send"), KindRequest: []byte("request"), KindReply: []byte("reply"), KindEvent: []byte("event")}

// MarshalText encodes k as its wire name; unknown kinds are an error.
// The slice is shared: the caller must not modify it (appending to it
// copies).
func (k Kind) MarshalText() ([]byte, error) {
	if k < KindSend || k > KindEvent {
		return nil, fmt.Errorf("message: unknown kind %d", uint8(k))
	}
	b := kindNames[k]
	return b[:len(b):len(b)], nil
}

// UnmarshalText decodes a wire name; unknown names are an error.
func (k *Kind) UnmarshalText(b []byte) error {
	for c := KindSend; c <= KindEvent; c++ {
		if string(b) == c.String() {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("message: unknown kind %q", truncate(string(b)))
}

// Envelope is what every transport carries: routing fields, the time left
// until the sender's deadline, headers and a JSON body of a registered
// type. Transports treat it as opaque bytes ([EncodeEnvelope],
// [DecodeEnvelope]); only the bus fills and reads it.
//
// An Envelope is not safe for concurrent mutation; once handed to a bus
// or transport it must not be changed.
type Envelope struct {
	// Protocol is the wire protocol version the sender speaks; 0 (the
	// field absent) means 1. [EncodeEnvelope] writes [ProtocolVersion]
	// when it is 0; [Envelope.Validate] refuses a version above
	// ProtocolVersion.
	Protocol int `json:"protocol,omitempty"`
	// ID uniquely identifies this message (a canonical UUID).
	ID string `json:"id"`
	// Kind says whether this is a one-way send, a request, a reply or an event.
	Kind Kind `json:"kind"`
	// Type is the registered, versioned name of the body's type
	// (e.g. "refnode.v1.StartVm"). A reply without body (an error, or a
	// handler that returned nothing) leaves it empty.
	Type string `json:"type,omitempty"`
	// ServiceID is the target service id, "<service>.<nodeUUID>" or
	// "api.portal"; empty for events.
	ServiceID string `json:"service_id,omitempty"`
	// ResourceUUID, optional, is the canonical UUID of the resource the
	// message is about; it is what the ring hashes.
	ResourceUUID string `json:"resource_uuid,omitempty"`
	// CorrelationID ties a reply to its request.
	CorrelationID string `json:"correlation_id,omitempty"`
	// ReplyTo is where a request's reply goes: a reply queue, named
	// "<prefix>.reply.<anything>" or by the broker ("amq.gen-..."), at
	// most 255 bytes. A receiver drops unrun a request whose ReplyTo names
	// anything else (bus.CloudBus.ValidReplyTo).
	ReplyTo string `json:"reply_to,omitempty"`
	// Source names the sender (a node UUID or client id), for tracing.
	Source string `json:"source,omitempty"`
	// Timeout is the time left until the sender's deadline when the
	// message was sent; 0 means none. A receiver that cannot use
	// Deadline counts it from the message's arrival.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Deadline is the sender's deadline in cluster time (see the package
	// documentation), in nanoseconds since the Unix epoch; 0 means the
	// sender knows no cluster time, and only Timeout applies. A receiver
	// with cluster time runs the message only before it.
	//
	// A client that is not a node measures the cluster time through any
	// node: it sends a request of type "cloudbus.v1.ClusterTimeQuery"
	// (empty body) to api.portal at local time s and gets, at local time
	// r, a "cloudbus.v1.ClusterTime" reply {"now_ns", "error_ns"}; its
	// offset is now_ns - (s+r)/2, within (r-s)/2 + error_ns. It then
	// writes Deadline = local now + offset + time left - that error
	// bound (service.Client does so, measuring again every 10 s).
	Deadline int64 `json:"deadline_ns,omitempty"`
	// Headers pass through untouched (e.g. a W3C traceparent).
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the JSON encoding of a value of the registered Type.
	Body json.RawMessage `json:"body,omitempty"`
	// Error is set on a reply whose request failed.
	Error *message.Error `json:"error,omitempty"`

	// marshaled is Body as MarkBodyMarshaled saw it: the output of
	// encoding/json.Marshal, written as it is while Body is still it.
	marshaled []byte
}

// MarkBodyMarshaled records that Body, as it is now, is the output of
// encoding/json.Marshal (as [message.Registry.Encode] returns it): valid,
// compact JSON with <, > and & escaped, exactly what [EncodeEnvelope]
// would make of it. EncodeEnvelope then copies it as it is instead of
// checking and compacting it again, which costs about 7 µs of a 1 KiB
// body's 9 µs. Assigning another Body undoes the mark.
func (e *Envelope) MarkBodyMarshaled() { e.marshaled = e.Body }

// bodyMarshaled reports whether Body is still what MarkBodyMarshaled saw.
func (e *Envelope) bodyMarshaled() bool {
	return len(e.Body) > 0 && len(e.Body) == len(e.marshaled) && &e.Body[0] == &e.marshaled[0]
}

// Reply returns a reply envelope for the request e: kind reply, the same
// correlation id, addressed to e.ReplyTo, with e's headers. The caller
// sets Type and Body, or Error.
func (e *Envelope) Reply() *Envelope {
	return &Envelope{
		ID:            message.NewUUID(),
		Kind:          KindReply,
		ServiceID:     e.ReplyTo,
		ResourceUUID:  e.ResourceUUID,
		CorrelationID: e.CorrelationID,
		Headers:       e.Headers,
	}
}

// maxIDLen bounds ids, service ids and reply addresses: 255 bytes, what
// an AMQP short string (a routing key, a queue name) holds, so that no
// field a transport puts in a frame can make the broker close the
// connection.
const maxIDLen = 255

// Validate checks the envelope's fields and returns every problem found,
// joined, as an error matching [message.ErrBadRequest] (or [message.ErrInvalidUUID] for a
// non-canonical resource UUID).
func (e *Envelope) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, message.ErrBadRequest.WithDetails(fmt.Sprintf(format, args...)))
	}
	if e.Protocol < 0 || e.Protocol > ProtocolVersion {
		bad("unsupported protocol version %d: this node speaks version %d; send version %d or upgrade this node", e.Protocol, ProtocolVersion, ProtocolVersion)
	}
	if e.ID == "" || len(e.ID) > maxIDLen {
		bad("id must be 1 to %d bytes", maxIDLen)
	}
	if e.Kind < KindSend || e.Kind > KindEvent {
		bad("unknown kind %d", uint8(e.Kind))
	}
	if e.Type != "" && !message.ValidTypeName(e.Type) {
		bad("malformed type name %q", truncate(e.Type))
	}
	if e.Type == "" && e.Kind != KindReply {
		bad("type is required on a %s", e.Kind)
	}
	if len(e.ServiceID) > maxIDLen || len(e.ReplyTo) > maxIDLen || len(e.CorrelationID) > maxIDLen || len(e.Source) > maxIDLen {
		bad("service id, reply-to, correlation id and source are limited to %d bytes", maxIDLen)
	}
	switch e.Kind {
	case KindSend, KindRequest:
		if e.ServiceID == "" {
			bad("a %s needs a target service id", e.Kind)
		}
	}
	if e.Kind == KindRequest && (e.ReplyTo == "" || e.CorrelationID == "") {
		bad("a request needs reply-to and a correlation id")
	}
	if e.Kind == KindReply && e.CorrelationID == "" {
		bad("a reply needs a correlation id")
	}
	if e.ResourceUUID != "" && !message.IsCanonicalUUID(e.ResourceUUID) {
		_, err := message.NormalizeUUID(e.ResourceUUID)
		if err == nil {
			shown := e.ResourceUUID
			if len(shown) > 64 {
				shown = shown[:64] + "..."
			}
			err = &message.Error{Code: message.ErrInvalidUUID.Code, Description: "invalid UUID: want 32 hex digits, optionally dashed 8-4-4-4-12",
				Details: fmt.Sprintf("%q: not canonical: normalize it with message.NormalizeUUID", shown)}
		}
		errs = append(errs, err)
	}
	if e.Timeout < 0 {
		bad("negative timeout %s", e.Timeout)
	}
	if e.Deadline < 0 {
		bad("negative deadline %d", e.Deadline)
	}
	for k := range e.Headers {
		if k == "" {
			bad("empty header name")
			break
		}
	}
	return errors.Join(errs...)
}

// EncodeEnvelope validates e and encodes it as the JSON of its struct
// tags (with encoding/json). It fails with an error matching
// [message.ErrBadRequest] (or [message.ErrInvalidUUID]) if [Envelope.Validate] does, if a
// string field, header or the body is not valid UTF-8 (nothing is
// silently replaced), or if the body is not valid JSON. An encoding
// larger than maxSize bytes (DefaultMaxSize if maxSize <= 0) fails with
// [message.ErrTooLarge], so nothing oversize is ever sent. The caller owns the
// returned slice. EncodeEnvelope does not modify e and is safe for
// concurrent use on an envelope no one mutates.
func EncodeEnvelope(e *Envelope, maxSize int) ([]byte, error) {
	if e == nil {
		return nil, message.ErrBadRequest.WithDetails("encode envelope: nil envelope")
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("message: encode envelope: %w", err)
	}
	data, err := marshalEnvelope(e)
	if err != nil {
		return nil, fmt.Errorf("message: encode envelope: %w", err)
	}
	if err := checkSize(len(data), maxSize); err != nil {
		return nil, err
	}
	return data, nil
}

// DecodeEnvelope decodes and validates an envelope received from outside.
// A resource UUID in any form [message.NormalizeUUID] accepts (dashed, upper
// case) is normalized to the canonical form the ring hashes, and an
// envelope without a protocol version gets version 1. It rejects input larger than maxSize bytes (DefaultMaxSize if
// maxSize <= 0) with [message.ErrTooLarge], invalid UTF-8, malformed JSON and
// trailing data with [message.ErrBadRequest]. The body is not decoded: the type
// it names is looked up in a [Registry] later, so decoding never
// instantiates an unregistered type.
func DecodeEnvelope(data []byte, maxSize int) (*Envelope, error) {
	if err := checkSize(len(data), maxSize); err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		return nil, message.ErrBadRequest.WithDetails("envelope is not valid UTF-8")
	}
	var e Envelope
	if err := parseEnvelope(data, &e); err != nil {
		return nil, message.ErrBadRequest.WithDetails("decode envelope").WithCause(err)
	}
	if e.Protocol == 0 {
		e.Protocol = 1 // written before versions existed
	}
	if e.ResourceUUID != "" && !message.IsCanonicalUUID(e.ResourceUUID) {
		// Any spelling NormalizeUUID accepts is taken: the dashed form and
		// upper case name the same resource. Validate reports the rest.
		if u, err := message.NormalizeUUID(e.ResourceUUID); err == nil {
			e.ResourceUUID = u
		}
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("message: decode envelope: %w", err)
	}
	return &e, nil
}

func checkSize(n, maxSize int) error {
	if maxSize <= 0 {
		maxSize = message.DefaultMaxSize
	}
	if n == maxSize+1 { // perhaps cut short by a transport (amqpbus): the true size is unknown
		return message.ErrTooLarge.WithDetails(fmt.Sprintf("more than the limit of %d bytes", maxSize))
	}
	if n > maxSize {
		return message.ErrTooLarge.WithDetails(fmt.Sprintf("%d bytes exceeds the limit of %d bytes", n, maxSize))
	}
	return nil
}

// ReplyAddress reads, leniently, where a request that [DecodeEnvelope]
// refused wants its reply: its reply_to and correlation_id, if data is a
// JSON object of kind "request" whose two fields are strings of 1 to 255
// bytes, whatever else is wrong with it. A receiver answers such a
// request with the decoding error instead of silence (after checking the
// address is a reply queue).
//
// Input that is not JSON throughout (nested too deep, say), or longer
// than maxSize (DefaultMaxSize if <= 0) and perhaps cut short by a
// transport, is read up to the fault, or its first maxSize bytes: "kind",
// "reply_to" and "correlation_id" are found if they come before it (as
// the fields before "body" do in what [EncodeEnvelope] writes).
func ReplyAddress(data []byte, maxSize int) (replyTo, correlationID string, ok bool) {
	var kind string
	if checkSize(len(data), maxSize) != nil {
		if maxSize <= 0 {
			maxSize = message.DefaultMaxSize
		}
		kind, replyTo, correlationID = replyAddressPrefix(data[:maxSize])
	} else {
		var v struct {
			Kind          string `json:"kind"`
			ReplyTo       string `json:"reply_to"`
			CorrelationID string `json:"correlation_id"`
		}
		if json.Unmarshal(data, &v) == nil {
			kind, replyTo, correlationID = v.Kind, v.ReplyTo, v.CorrelationID
		} else { // nested too deep, cut, not JSON past the address: read up to the fault
			kind, replyTo, correlationID = replyAddressPrefix(data)
		}
	}
	if kind != "request" || replyTo == "" || len(replyTo) > maxIDLen || correlationID == "" || len(correlationID) > maxIDLen ||
		!utf8.ValidString(replyTo) || !utf8.ValidString(correlationID) {
		return "", "", false
	}
	return replyTo, correlationID, true
}

// replyAddressPrefix reads the top-level "kind", "reply_to" and
// "correlation_id" strings of a JSON object that may be cut anywhere,
// stopping at the first thing it cannot read or once it has all three.
func replyAddressPrefix(data []byte) (kind, replyTo, correlationID string) {
	p := &parser{data: data}
	if !p.consume('{') {
		return
	}
	for {
		p.ws()
		key, err := p.str()
		if err != nil || !p.consume(':') {
			return
		}
		p.ws()
		var dst *string
		switch foldKey(key) {
		case "kind":
			dst = &kind
		case "reply_to":
			dst = &replyTo
		case "correlation_id":
			dst = &correlationID
		}
		if dst != nil && !p.isNull() {
			if *dst, err = p.str(); err != nil {
				return
			}
		} else if dst == nil && p.skip(1) != nil {
			return
		}
		if kind != "" && replyTo != "" && correlationID != "" || !p.consume(',') {
			return
		}
	}
}

// HeaderTraceParent and HeaderTraceState are the W3C Trace Context
// headers (https://www.w3.org/TR/trace-context/), under their W3C names:
// the bus carries them from a handler's incoming message to the messages
// it sends, and never interprets them further.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)
