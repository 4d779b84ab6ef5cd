package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Code classifies an error so that it survives the wire. Codes are stable
// lower-case strings: the built-in ones ([Codes]) and those a service
// registers ([RegisterCode]). A code unknown to this process (from a newer
// node, or registered only by the service that sent it) is kept, and its
// retry class is the one the error carried on the wire ([Error.Retry]).
type Code string

// The built-in codes; codeTable gives each its retry class.
const (
	codeTimeout        Code = "timeout"
	codeCanceled       Code = "canceled"
	codeNoRoute        Code = "no_route"
	codeUnknownMessage Code = "unknown_message"
	codeBadReply       Code = "bad_reply"
	codeNodeLeft       Code = "node_left"
	codeNotOwner       Code = "not_owner"
	codeBusy           Code = "busy"
	codeBadRequest     Code = "bad_request"
	codeInvalidUUID    Code = "invalid_uuid"
	codeNotFound       Code = "not_found"
	codeTooLarge       Code = "too_large"
	codeInternal       Code = "internal"
	codeClosed         Code = "closed"
	codeUnavailable    Code = "unavailable"
	codeNotSent        Code = "not_sent"
	codeConflict       Code = "conflict"
	codePrecondition   Code = "failed_precondition"
	codeAlreadyExists  Code = "already_exists"
)

// Retry is what is known of whether a failed operation happened, and so
// whether retrying is safe. Classes are only ever added after these.
type Retry int

const (
	// RetryUnknown: it may have happened; retry only if idempotent.
	RetryUnknown Retry = iota
	// RetrySafe: it did not happen; a retry may succeed.
	RetrySafe
	// RetryNever: it did not happen, and a retry fails the same way.
	RetryNever
	// RetryRan: it happened; a retry repeats it.
	RetryRan
)

// String describes r, or returns "Retry(n)" for an unknown value.
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

// Codes lists every built-in code, in table order; the caller owns the
// slice. Codes registered with [RegisterCode] are not in it.
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
	{codeConflict, RetryNever},
	{codePrecondition, RetryNever},
	{codeAlreadyExists, RetryNever},
}

// Retry returns c's retry class in this process: a built-in code's, or a
// code's registered with [RegisterCode]; [RetryUnknown] for any other
// code. An error received from a peer may know more: see [Error.Retry].
func (c Code) Retry() Retry {
	r, _ := lookupRetry(c)
	return r
}

// lookupRetry returns c's class and true if c is built in or registered.
func lookupRetry(c Code) (Retry, bool) {
	for _, e := range codeTable {
		if e.code == c {
			return e.retry, true
		}
	}
	return registeredRetry(c)
}

// String returns the code itself.
func (c Code) String() string { return string(c) }

// Error is the coded error a reply carries: a code, a description for
// people, and optional details and cause. It keeps its code through JSON,
// and [Error.Is] compares codes. It is safe to share once built; the With
// methods return copies.
type Error struct {
	// Code classifies the error.
	Code Code
	// Description says what failed.
	Description string
	// Details adds specifics; optional.
	Details string
	// Cause is the underlying error; optional.
	Cause error

	// sent is the retry class the error carried on the wire, kept only
	// for a code this process does not know ([Error.Retry]).
	sent Retry
}

// The sentinels, one per built-in code; match them with errors.Is, never
// ==. By retry class: nothing happened and a retry may succeed with
// ErrNoRoute, ErrNotOwner, ErrBusy and ErrNotSent (which also matches
// ErrUnavailable); nothing happened and a retry fails the same way with
// ErrUnknownMessage, ErrBadRequest, ErrInvalidUUID, ErrNotFound,
// ErrTooLarge, ErrConflict, ErrFailedPrecondition and ErrAlreadyExists;
// the outcome is unknown with ErrTimeout, ErrCanceled, ErrNodeLeft,
// ErrInternal, ErrClosed and ErrUnavailable; the handler ran with
// ErrBadReply.
//
// ErrBadRequest says the request itself is wrong (malformed, out of its
// limits); the three that follow it in the list below say the request is
// well formed but the state it meets refuses it. ErrConflict: the
// resource's state conflicts with the request (a volume attached to
// another VM, a VM that is running); ErrFailedPrecondition: a condition
// the request states does not hold (an expected version, "only if
// stopped"); ErrAlreadyExists: what the request would create exists
// already. A service with failures of its own registers codes for them
// with [RegisterCode].
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

	ErrConflict           = &Error{Code: codeConflict, Description: "the resource's state conflicts with the request"}
	ErrFailedPrecondition = &Error{Code: codePrecondition, Description: "a precondition of the request does not hold"}
	ErrAlreadyExists      = &Error{Code: codeAlreadyExists, Description: "already exists"}
)

// NewError returns an error with the given code and description.
func NewError(code Code, description string) *Error {
	return &Error{Code: code, Description: description}
}

// Errorf returns an error with code and a description formatted by
// fmt.Sprintf; an error wrapped with %w becomes the Cause.
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

// Error formats "code: description: details: cause", leaving out empty parts.
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

// Is reports whether target is an *Error with the same code. A timeout
// also matches context.DeadlineExceeded, a cancellation context.Canceled.
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

// Retry reports whether retrying is safe. For a code this process knows
// (built in, or registered with [RegisterCode]) it is the code's class,
// whatever a peer wrote: a peer cannot change a known code's class. For
// any other code it is the class the error carried on the wire (the
// "retry" field, which nodes write since the field was added), and
// [RetryUnknown] if it carried none, as from an older node.
func (e *Error) Retry() Retry {
	if r, ok := lookupRetry(e.Code); ok {
		return r
	}
	return e.sent
}

// maxCauseDepth bounds the cause chain put on the wire.
const maxCauseDepth = 8

type wireError struct {
	Code        Code       `json:"code"`
	Retry       string     `json:"retry,omitempty"`
	Description string     `json:"description,omitempty"`
	Details     string     `json:"details,omitempty"`
	Cause       *wireError `json:"cause,omitempty"`
}

// retryNames are the retry classes' names on the wire, by value.
var retryNames = [...]string{RetryUnknown: "unknown", RetrySafe: "safe", RetryNever: "never", RetryRan: "ran"}

// wireRetry returns the name of code's class as e has it, or "" for no
// code (a plain cause).
func wireRetry(code Code, r Retry) string {
	if code == "" || r < 0 || int(r) >= len(retryNames) {
		return ""
	}
	return retryNames[r]
}

// parseRetry returns the class named s: RetryUnknown for a name this
// version does not know (a class added later).
func parseRetry(s string) Retry {
	for r, name := range retryNames {
		if s == name {
			return Retry(r)
		}
	}
	return RetryUnknown
}

func toWire(e *Error, depth int) *wireError {
	w := &wireError{Code: e.Code, Retry: wireRetry(e.Code, e.Retry()), Description: e.Description, Details: e.Details}
	if e.Cause != nil && depth < maxCauseDepth {
		w.Cause = causeToWire(e.Cause, depth+1)
	}
	return w
}

// causeToWire keeps a cause's code only if it is or wraps one.
func causeToWire(err error, depth int) *wireError {
	if e, ok := err.(*Error); ok {
		return toWire(e, depth)
	}
	var e *Error
	if errors.As(err, &e) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		a := AsError(err)
		return &wireError{Code: a.Code, Retry: wireRetry(a.Code, a.Retry()), Description: a.Description}
	}
	return &wireError{Description: err.Error()}
}

func fromWire(w *wireError, depth int) *Error {
	e := &Error{Code: w.Code, Description: w.Description, Details: w.Details}
	if e.Code == "" && depth == 0 {
		e.Code = codeInternal
	}
	if _, known := lookupRetry(e.Code); !known && e.Code != "" {
		e.sent = parseRetry(w.Retry)
	}
	if w.Cause != nil && depth < maxCauseDepth {
		e.Cause = fromWire(w.Cause, depth+1)
	}
	return e
}

// MarshalJSON encodes e with its causes, at most 8 deep, each coded one
// with its retry class ([Error.Retry]) as "retry": "safe", "never",
// "unknown" or "ran". A cause keeps its code only if it is or wraps an
// *Error or a context error.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(toWire(e, 0))
}

// UnmarshalJSON decodes [Error.MarshalJSON]'s output; an empty top-level
// code becomes "internal" and causes past 8 deep are dropped. The
// "retry" class is kept only for a code this process does not know, and
// a class name it does not know reads as [RetryUnknown].
func (e *Error) UnmarshalJSON(data []byte) error {
	var w wireError
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = *fromWire(&w, 0)
	return nil
}

// AsError converts err for the wire; nil stays nil and an *Error is
// returned as is. An error that wraps *Errors becomes the first one's code,
// description and cause, with the text wrapping it and every wrapped
// *Error's details as details. A context error becomes a timeout or a
// cancellation, anything else internal with err's text.
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
		return &Error{Code: e.Code, Description: e.Description, Details: d, Cause: e.Cause, sent: e.sent}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: codeTimeout, Description: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: codeCanceled, Description: err.Error()}
	}
	return &Error{Code: codeInternal, Description: err.Error()}
}

// collectErrors appends the *Errors err wraps, outermost first.
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
// CodeOf(err).Retry() knows only the classes of this process's codes;
// AsError(err).Retry() also knows the class a received error carried on
// the wire, for a code this process did not register.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return AsError(err).Code
}
