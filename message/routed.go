package message

import (
	"fmt"
	"reflect"
)

// Routed is implemented by a payload type about one existing resource: the
// bus routes it by the resource's UUID and refuses it with [ErrBadRequest]
// where its envelope names no resource or another. ResourceUUID may have a
// value or pointer receiver; it is called concurrently and must not block
// or modify the value.
type Routed interface {
	// ResourceUUID returns the resource's UUID in a form NormalizeUUID
	// accepts; "" is an error.
	ResourceUUID() string
}

var routedType = reflect.TypeFor[Routed]()

// ResourceOf reports whether v, a value or a pointer, is Routed, and
// returns the canonical UUID it names, calling the method on a copy. A nil
// v, or a pointer to a pointer, is not routed. A nil pointer or an empty UUID fails with
// [ErrBadRequest], a malformed one with [ErrInvalidUUID], their details
// naming v's type. It is safe for concurrent use if the method is.
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
