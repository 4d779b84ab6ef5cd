package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Code classifies an error so that it survives the wire: a reply decoded on
// another node still matches the sentinel of its code with errors.Is.
// Codes are stable lower-case strings; [Codes] lists every code this
// package defines. A code unknown to this version (sent by a newer node)
// is kept as is and treated as [RetryUnknown].
//
// Each code belongs to one retry class ([Retry], reported by [Code.Retry]):
// [RetrySafe] (nothing happened, a retry may succeed), [RetryNever]
// (nothing happened, a retry fails the same way), [RetryUnknown] (the
// operation may have happened) or [RetryRan] (the operation happened).
type Code string

// The codes, one table. Each states whether retrying is safe, that is
// whether the failed operation may nevertheless have happened.
const (
	// codeTimeout: the deadline passed before a reply arrived. The handler
	// may have run, may be running, or may never run: outcome unknown.
	codeTimeout Code = "timeout"
	// codeCanceled: the caller canceled. Outcome unknown, as for a timeout.
	codeCanceled Code = "canceled"
	// codeNoRoute: no queue exists for the target service id, so nothing
	// was delivered. Retrying is safe (usually after the ring changes).
	codeNoRoute Code = "no_route"
	// codeUnknownMessage: the receiver has no registered type or handler for
	// the message type. Nothing ran; retrying fails the same way until the
	// receiver is upgraded.
	codeUnknownMessage Code = "unknown_message"
	// codeBadReply: the handler ran and replied, but its reply could not be
	// read as the type the caller asked for (a typed call whose reply is of
	// another registered type, or does not decode into the requested Go
	// type). The operation happened: do not retry unless repeating it is
	// intended; fix the caller's or the handler's reply type instead.
	codeBadReply Code = "bad_reply"
	// codeNodeLeft: the node the message went to left the cluster (goodbye or
	// eviction) before replying. Outcome unknown: the message may still run,
	// on that node or on the new owner. Retry only idempotent operations.
	codeNodeLeft Code = "node_left"
	// codeNotOwner: the receiver does not own the resource on its ring copy
	// and refused the message before running it. Retrying is safe once the
	// ring copies agree.
	codeNotOwner Code = "not_owner"
	// codeBusy: the receiver's queue for the resource is full and it refused
	// the message before running it. Retrying later is safe.
	codeBusy Code = "busy"
	// codeBadRequest: the request is malformed or invalid. Nothing ran;
	// retrying the same request fails the same way.
	codeBadRequest Code = "bad_request"
	// codeInvalidUUID: a resource or node UUID is malformed. Nothing ran;
	// retrying the same request fails the same way.
	codeInvalidUUID Code = "invalid_uuid"
	// codeNotFound: the resource does not exist. Retrying fails the same way
	// unless the resource is created meanwhile.
	codeNotFound Code = "not_found"
	// codeTooLarge: the message exceeds the size limit and was not sent.
	// Retrying the same message fails the same way.
	codeTooLarge Code = "too_large"
	// codeInternal: the handler failed or panicked. It may have done part of
	// its work: outcome unknown.
	codeInternal Code = "internal"
	// codeClosed: the bus or node is closed. A message not yet sent was not
	// sent, but a call in flight when the bus closed has an unknown outcome,
	// so the code as a whole is outcome unknown.
	codeClosed Code = "closed"
	// codeUnavailable: the transport lost its connection to the broker.
	// A call in flight may or may not have been delivered: outcome unknown.
	codeUnavailable Code = "unavailable"
	// codeNotSent: the transport refused the message before sending it
	// (it was reconnecting to the broker, or the broker refused the
	// publish), so nothing was delivered and nothing ran. Retrying is
	// safe. A transport's refusal also matches [ErrUnavailable], so code
	// that tests for a broker problem keeps working.
	codeNotSent Code = "not_sent"
)

// Retry says whether retrying an operation that failed with a code is
// safe, by what is known of whether the operation happened: not at all
// ([RetrySafe], [RetryNever]), maybe ([RetryUnknown]) or certainly
// ([RetryRan]). Values are stable: new classes are only ever added after
// the existing ones.
type Retry int

const (
	// RetryUnknown: the operation may have happened (outcome unknown).
	// Retry only operations that are idempotent.
	RetryUnknown Retry = iota
	// RetrySafe: the operation did not happen; retrying is safe and may succeed.
	RetrySafe
	// RetryNever: the operation did not happen and retrying the same request
	// fails the same way; fix the request instead.
	RetryNever
	// RetryRan: the operation happened on the receiver; only its outcome
	// could not be delivered in the form the caller asked for (see
	// [CodeBadReply]). Retrying repeats it: do so only if that is intended.
	RetryRan
)

// String returns the name of r, or "Retry(n)" for a value this package
// does not define.
func (r Retry) String() string {
	switch r {
	case RetryUnknown:
		return "unknown outcome: retry only if idempotent"
	case RetrySafe:
		return "safe to retry"
	case RetryNever:
		return "do not retry"
	case RetryRan:
		return "the operation ran: do not retry unless repeating it is intended"
	default:
		return fmt.Sprintf("Retry(%d)", int(r))
	}
}

// Codes lists every code this package defines, in table order. The caller
// owns the returned slice.
func Codes() []Code {
	out := make([]Code, len(codeTable))
	for i, c := range codeTable {
		out[i] = c.code
	}
	return out
}

var codeTable = []struct {
	code  Code
	retry Retry
}{
	{codeTimeout, RetryUnknown},
	{codeCanceled, RetryUnknown},
	{codeNoRoute, RetrySafe},
	{codeUnknownMessage, RetryNever},
	{codeBadReply, RetryRan},
	{codeNodeLeft, RetryUnknown},
	{codeNotOwner, RetrySafe},
	{codeBusy, RetrySafe},
	{codeBadRequest, RetryNever},
	{codeInvalidUUID, RetryNever},
	{codeNotFound, RetryNever},
	{codeTooLarge, RetryNever},
	{codeInternal, RetryUnknown},
	{codeClosed, RetryUnknown},
	{codeUnavailable, RetryUnknown},
	{codeNotSent, RetrySafe},
}

// Retry reports whether retrying after an error with code c is safe.
// Codes this package does not define report [RetryUnknown].
func (c Code) Retry() Retry {
	for _, e := range codeTable {
		if e.code == c {
			return e.retry
		}
	}
	return RetryUnknown
}

// String returns the code itself.
func (c Code) String() string { return string(c) }

// Error is the structured error carried by replies: a code, a description
// for people, optional details and an optional cause. It marshals to JSON
// and back without losing its code, and [Error.Is] compares codes, so
//
//	errors.Is(err, message.ErrNotFound)
//
// holds for an error decoded on another node. Values are safe to share once
// built; the With methods return copies.
type Error struct {
	// Code classifies the error; see the Code constants.
	Code Code
	// Description says what failed, for people.
	Description string
	// Details adds specifics (the offending value, the limit), optional.
	Details string
	// Cause is the underlying error, optional. On the wire it becomes an
	// *Error (see [AsError]), so its code survives too.
	Cause error
}

// The coded sentinels, one per code. Match them with errors.Is; never
// compare errors with ==. Each code's doc says whether retrying is safe.
var (
	ErrTimeout        = &Error{Code: codeTimeout, Description: "deadline exceeded"}
	ErrCanceled       = &Error{Code: codeCanceled, Description: "canceled by the caller"}
	ErrNoRoute        = &Error{Code: codeNoRoute, Description: "no queue for the target service"}
	ErrUnknownMessage = &Error{Code: codeUnknownMessage, Description: "unknown message type"}
	ErrBadReply       = &Error{Code: codeBadReply, Description: "the handler ran but its reply is not of the requested type"}
	ErrNodeLeft       = &Error{Code: codeNodeLeft, Description: "target node left the cluster; outcome unknown"}
	ErrNotOwner       = &Error{Code: codeNotOwner, Description: "this node does not own the resource"}
	ErrBusy           = &Error{Code: codeBusy, Description: "busy: queue for the resource is full"}
	ErrBadRequest     = &Error{Code: codeBadRequest, Description: "bad request"}
	ErrInvalidUUID    = &Error{Code: codeInvalidUUID, Description: "invalid UUID"}
	ErrNotFound       = &Error{Code: codeNotFound, Description: "not found"}
	ErrTooLarge       = &Error{Code: codeTooLarge, Description: "message too large"}
	ErrInternal       = &Error{Code: codeInternal, Description: "internal error"}
	ErrClosed         = &Error{Code: codeClosed, Description: "closed"}
	ErrUnavailable    = &Error{Code: codeUnavailable, Description: "transport unavailable"}
	ErrNotSent        = &Error{Code: codeNotSent, Description: "not sent: the transport refused the message before sending it"}
)

// NewError returns an error with the given code and description.
func NewError(code Code, description string) *Error {
	return &Error{Code: code, Description: description}
}

// Errorf returns an error with the given code and a description formatted
// as by fmt.Sprintf. If the format wraps an error with %w, that error
// becomes the Cause.
func Errorf(code Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	e := &Error{Code: code, Description: wrapped.Error()}
	if u := errors.Unwrap(wrapped); u != nil {
		e.Cause = u
	}
	return e
}

// WithDetails returns a copy of e with Details set.
func (e *Error) WithDetails(details string) *Error {
	c := *e
	c.Details = details
	return &c
}

// WithCause returns a copy of e with Cause set.
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.Cause = cause
	return &c
}

// Error formats the error as "code: description: details: cause",
// leaving out empty parts.
func (e *Error) Error() string {
	var b strings.Builder
	add := func(s string) {
		if s == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(s)
	}
	add(string(e.Code))
	add(e.Description)
	add(e.Details)
	if e.Cause != nil {
		add(e.Cause.Error())
	}
	return b.String()
}

// Is reports whether target is an *Error with the same code. A timeout also
// matches context.DeadlineExceeded and a cancellation context.Canceled, so
// code written against the context package keeps working.
func (e *Error) Is(target error) bool {
	switch target {
	case context.DeadlineExceeded:
		return e.Code == codeTimeout
	case context.Canceled:
		return e.Code == codeCanceled
	}
	t, ok := target.(*Error)
	return ok && t != nil && t.Code != "" && t.Code == e.Code
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Cause }

// Retry reports whether retrying is safe; see [Code.Retry].
func (e *Error) Retry() Retry { return e.Code.Retry() }

// maxCauseDepth bounds the cause chain put on the wire, so a cyclic or
// very deep chain cannot make a reply unbounded.
const maxCauseDepth = 8

type wireError struct {
	Code        Code       `json:"code"`
	Description string     `json:"description,omitempty"`
	Details     string     `json:"details,omitempty"`
	Cause       *wireError `json:"cause,omitempty"`
}

func toWire(e *Error, depth int) *wireError {
	w := &wireError{Code: e.Code, Description: e.Description, Details: e.Details}
	if e.Cause != nil && depth < maxCauseDepth {
		w.Cause = causeToWire(e.Cause, depth+1)
	}
	return w
}

// causeToWire keeps the chain of an *Error cause, the code (and full text)
// of a cause that wraps one or is a context error, and only the text of a
// plain Go error: a cause never gains a code it did not have.
func causeToWire(err error, depth int) *wireError {
	if e, ok := err.(*Error); ok {
		return toWire(e, depth)
	}
	var e *Error
	if errors.As(err, &e) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		a := AsError(err)
		return &wireError{Code: a.Code, Description: a.Description}
	}
	return &wireError{Description: err.Error()}
}

func fromWire(w *wireError, depth int) *Error {
	e := &Error{Code: w.Code, Description: w.Description, Details: w.Details}
	if e.Code == "" && depth == 0 {
		e.Code = codeInternal
	}
	if w.Cause != nil && depth < maxCauseDepth {
		e.Cause = fromWire(w.Cause, depth+1)
	}
	return e
}

// MarshalJSON encodes e with its cause chain (at most 8 deep). A cause
// that is not an *Error keeps its text, and its code only if it wraps an
// *Error or a context error; a plain Go cause is sent without a code, so
// it matches no sentinel on the other side.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(toWire(e, 0))
}

// UnmarshalJSON decodes an error encoded by [Error.MarshalJSON]. An empty
// top-level code becomes [codeInternal], so a decoded error always has a
// code; causes deeper than 8 are dropped.
func (e *Error) UnmarshalJSON(data []byte) error {
	var w wireError
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = *fromWire(&w, 0)
	return nil
}

// AsError converts any error into an *Error for the wire. nil stays nil.
// An *Error is returned as is. An error that wraps one (fmt.Errorf with
// %w, errors.Join) is sent as the first *Error it wraps: its code,
// description and cause, so that a client in any language reads the same
// fields whichever node answered (a call forwarded by api.portal, or
// refused while being decoded). The details are those of every *Error
// the chain wraps, joined by "; ", after the text that wraps the first
// one, if it wraps nothing else ("read vm: vm x" for
// fmt.Errorf("read vm: %w", ErrNotFound.WithDetails("vm x"))). context.DeadlineExceeded becomes [codeTimeout],
// context.Canceled [codeCanceled]; anything else becomes [codeInternal],
// with the error's text as the description.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	var all []*Error
	collectErrors(err, &all, 0)
	if len(all) > 0 {
		e := all[0]
		var details []string
		for _, x := range all {
			if x.Details != "" && !slices.Contains(details, x.Details) {
				details = append(details, x.Details)
			}
		}
		d := strings.Join(details, "; ")
		if context, ok := strings.CutSuffix(err.Error(), ": "+e.Error()); ok {
			if d == "" {
				d = context
			} else {
				d = context + ": " + d
			}
		}
		return &Error{Code: e.Code, Description: e.Description, Details: d, Cause: e.Cause}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: codeTimeout, Description: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: codeCanceled, Description: err.Error()}
	}
	return &Error{Code: codeInternal, Description: err.Error()}
}

// collectErrors appends the *Errors err wraps, outermost first, without
// looking inside an *Error (its Cause is its own).
func collectErrors(err error, into *[]*Error, depth int) {
	if err == nil || depth > maxCauseDepth {
		return
	}
	if e, ok := err.(*Error); ok {
		*into = append(*into, e)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		collectErrors(u.Unwrap(), into, depth+1)
	case interface{ Unwrap() []error }:
		for _, x := range u.Unwrap() {
			collectErrors(x, into, depth+1)
		}
	}
}

// CodeOf returns the code of err as [AsError] would assign it, or "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return AsError(err).Code
}
