package message

import (
	"fmt"
	"reflect"
)

// Routed is implemented by a payload type about one existing resource
// (StartVm, GetHost, ...): the bus routes it by the resource's UUID, sets the
// envelope's resource_uuid from it, and refuses it (bad_request) when an
// envelope carrying it names no resource or a different one.
// Creation messages and messages about no resource do not implement it.
//
// ResourceUUID may be declared on the value or on the pointer receiver;
// [ResourceOf] finds it either way. It is called on the sender before the
// message is encoded and on the receiver after it is decoded, possibly
// from several goroutines at once, so it must not block or modify the
// value.
type Routed interface {
	// ResourceUUID returns the UUID of the resource the message is about,
	// in any form NormalizeUUID accepts. An empty string is an error when
	// the message is sent or received.
	ResourceUUID() string
}

var routedType = reflect.TypeFor[Routed]()

// ResourceOf reports whether v (a value or a pointer to one) is Routed, and if so returns
// the canonical UUID it names. A Routed value naming no resource fails with ErrBadRequest
// (details name the Go type and say ResourceUUID() returned ""), a malformed one with ErrInvalidUUID.
// It finds methods declared on the pointer receiver too, for a value v.
//
// For such a value ResourceOf calls the method on a copy, so v is never
// modified. A nil v is not routed (false, no error). A nil pointer of a
// Routed type is routed but names no resource: it fails with
// [ErrBadRequest] without calling ResourceUUID, so ResourceOf does not
// panic on it. A pointer to a pointer is never routed. Every error is an
// *[Error] whose details name v's Go type. ResourceOf is safe for
// concurrent use if v's ResourceUUID is.
func ResourceOf(v any) (uuid string, routed bool, err error) {
	r, ok := v.(Routed)
	rv := reflect.ValueOf(v)
	switch {
	case !rv.IsValid(): // v == nil
		return "", false, nil
	case rv.Kind() == reflect.Pointer && rv.IsNil():
		if !ok {
			return "", false, nil
		}
		return "", true, ErrBadRequest.WithDetails(fmt.Sprintf("%T is Routed but is a nil pointer: it names no resource", v))
	case !ok:
		// A value whose ResourceUUID has a pointer receiver: call it on an
		// addressable copy.
		if rv.Kind() == reflect.Pointer || !reflect.PointerTo(rv.Type()).Implements(routedType) {
			return "", false, nil
		}
		p := reflect.New(rv.Type())
		p.Elem().Set(rv)
		r = p.Interface().(Routed)
	}
	s := r.ResourceUUID()
	if s == "" {
		return "", true, ErrBadRequest.WithDetails(fmt.Sprintf("%T is Routed but its ResourceUUID() returned \"\": it names no resource", v))
	}
	u, err := NormalizeUUID(s)
	if err != nil {
		if e, ok := err.(*Error); ok {
			err = e.WithDetails(fmt.Sprintf("ResourceUUID() of %T: %s", v, e.Details))
		}
		return "", true, err
	}
	return u, true, nil
}
