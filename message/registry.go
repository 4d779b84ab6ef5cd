package message

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxTypeNameLen bounds type names so a hostile envelope cannot carry an
// arbitrarily long one through lookups and error messages.
const maxTypeNameLen = 128

// ValidTypeName reports whether name is a well-formed message type name:
// at most 128 characters, dot-separated segments, a version segment
// ("v1") just before the final segment, e.g. "refnode.v1.StartVm".
//
// It matches ^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z][A-Za-z0-9_-]*)*\.v[0-9]+\.[A-Za-z][A-Za-z0-9_]*$
// without a regular expression, since every envelope is checked.
func ValidTypeName(name string) bool {
	if len(name) > maxTypeNameLen {
		return false
	}
	last := strings.LastIndexByte(name, '.')
	if last < 0 {
		return false
	}
	ver := strings.LastIndexByte(name[:last], '.')
	if ver < 0 || !validSegment(name[last+1:], false) || !isVersion(name[ver+1:last]) {
		return false
	}
	for seg := range strings.SplitSeq(name[:ver], ".") {
		if !validSegment(seg, true) {
			return false
		}
	}
	return true
}

// validSegment: a letter, then letters, digits, '_' (and '-' if dash).
func validSegment(s string, dash bool) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '_' && !(dash && c == '-') {
			return false
		}
	}
	return true
}

// isVersion: "v" and one or more digits.
func isVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// Registry maps stable, versioned type names to Go types. Decoding only
// ever instantiates a registered type: an envelope naming anything else,
// including the name of a real Go type that was not registered, fails
// with [ErrUnknownMessage].
//
// A Registry is safe for concurrent use. Register types at start-up,
// before the bus delivers messages; there is no global registry, pass
// one to the bus. A new Registry already holds the lifecycle events
// ([NodeJoined], [NodeLeft]) and [Empty].
type Registry struct {
	mu     sync.RWMutex
	byName map[string]reflect.Type
	byType map[reflect.Type]string
}

// NewRegistry returns a registry holding [Empty].
func NewRegistry() *Registry {
	r := &Registry{
		byName: make(map[string]reflect.Type),
		byType: make(map[reflect.Type]string),
	}
	MustRegister[Empty](r, TypeEmpty)
	return r
}

// Register registers T under name. Registering the same type under the
// same name again is a no-op; reusing a name for another type, or a type
// under a second name, is an error, as is a malformed name or a pointer,
// interface, func or chan type (register the value type; pointers to it
// encode the same). Names are part of the wire format: never change one,
// add a new version instead.
func Register[T any](r *Registry, name string) error {
	t := reflect.TypeFor[T]()
	if !ValidTypeName(name) {
		return fmt.Errorf("message: register %s: invalid type name %q: want dot-separated segments with a version before the last one, e.g. \"refnode.v1.StartVm\"", t, name)
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return fmt.Errorf("message: register %q: type %s is a %s; register a value type such as a struct", name, t, t.Kind())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byName[name]; ok {
		if old == t {
			return nil
		}
		return fmt.Errorf("message: register %s: name %q is already registered for %s", t, name, old)
	}
	if old, ok := r.byType[t]; ok {
		return fmt.Errorf("message: register %q: type %s is already registered as %q", name, t, old)
	}
	r.byName[name] = t
	r.byType[t] = name
	return nil
}

// MustRegister is like [Register] but panics on error. Use it at
// start-up, where a bad registration is a programming error.
func MustRegister[T any](r *Registry, name string) {
	if err := Register[T](r, name); err != nil {
		panic(err)
	}
}

// NameOf returns the registered name of v's type; a pointer is looked up
// by the type it points to. An unregistered type fails with
// [ErrUnknownMessage].
func (r *Registry) NameOf(v any) (string, error) {
	t := reflect.TypeOf(v)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	r.mu.RLock()
	name, ok := r.byType[t]
	r.mu.RUnlock()
	if !ok {
		return "", ErrUnknownMessage.WithDetails(fmt.Sprintf("Go type %v is not registered; call message.Register", t))
	}
	return name, nil
}

// NameFor returns the registered name of T, like [Registry.NameOf].
func NameFor[T any](r *Registry) (string, error) {
	var zero T
	return r.NameOf(&zero)
}

// Known reports whether name is registered.
func (r *Registry) Known(name string) bool {
	r.mu.RLock()
	_, ok := r.byName[name]
	r.mu.RUnlock()
	return ok
}

// Names returns the registered names, sorted. The caller owns the slice.
func (r *Registry) Names() []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Encode returns the registered name of v's type and its JSON body.
// v may be a value or a non-nil pointer to one.
func (r *Registry) Encode(v any) (name string, body []byte, err error) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return "", nil, ErrBadRequest.WithDetails("cannot encode a nil pointer")
	}
	name, err = r.NameOf(v)
	if err != nil {
		return "", nil, err
	}
	body, err = json.Marshal(v)
	if err != nil {
		return "", nil, ErrBadRequest.WithDetails(fmt.Sprintf("encode %s", name)).WithCause(err)
	}
	return name, body, nil
}

// Decode instantiates the type registered as name and decodes body into
// it, returning a pointer to the new value (*T for a type registered as
// T). An unregistered name fails with [ErrUnknownMessage] before anything
// is instantiated; a body that is not valid UTF-8 JSON of that type, or
// has trailing data, fails with [ErrBadRequest]. An empty body decodes to
// the zero value. Unknown JSON fields are ignored, so a newer sender may
// add optional fields without a new version.
func (r *Registry) Decode(name string, body []byte) (any, error) {
	r.mu.RLock()
	t, ok := r.byName[name]
	r.mu.RUnlock()
	if !ok {
		return nil, unknownType(name)
	}
	p := reflect.New(t)
	if err := decodeBody(name, body, p.Interface()); err != nil {
		return nil, err
	}
	return p.Interface(), nil
}

// DecodeAs decodes body as T, checking that name is the name T is
// registered under; a mismatch or an unregistered name fails with
// [ErrUnknownMessage].
func DecodeAs[T any](r *Registry, name string, body []byte) (T, error) {
	var zero T
	want, err := NameFor[T](r)
	if err != nil {
		return zero, err
	}
	if name != want {
		if !r.Known(name) {
			return zero, unknownType(name)
		}
		return zero, ErrUnknownMessage.WithDetails(fmt.Sprintf("got %q, want %q", truncate(name), want))
	}
	var v T
	if err := decodeBody(name, body, &v); err != nil {
		return zero, err
	}
	return v, nil
}

func decodeBody(name string, body []byte, into any) error {
	if len(body) == 0 {
		return nil
	}
	if !utf8.Valid(body) {
		return ErrBadRequest.WithDetails(fmt.Sprintf("body of %s is not valid UTF-8", name))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return ErrBadRequest.WithDetails(fmt.Sprintf("decode body of %s", name)).WithCause(err)
	}
	return nil
}

func unknownType(name string) *Error {
	return ErrUnknownMessage.WithDetails(fmt.Sprintf("no type is registered as %q", truncate(name)))
}

func truncate(s string) string {
	if len(s) > maxTypeNameLen {
		return s[:maxTypeNameLen] + "..."
	}
	return s
}
