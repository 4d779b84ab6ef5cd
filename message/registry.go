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

const maxTypeNameLen = 128

// ValidTypeName reports a well-formed type name: at most 128 characters
// matching ^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z][A-Za-z0-9_-]*)*\.v[0-9]+\.[A-Za-z][A-Za-z0-9_]*$,
// such as "refnode.v1.StartVm".
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

// Registry maps stable, versioned type names to Go types; decoding a name
// not registered fails with [ErrUnknownMessage]. It is safe for concurrent
// use; register types before messages flow. A new Registry holds [Empty].
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

// Register registers the value type T under name; the same pair again is
// a no-op. A malformed name, a name or type already registered otherwise,
// or a pointer, interface, func or chan type is an error. Names are wire
// format: never change one, register a new version.
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

// MustRegister is [Register], panicking on error.
func MustRegister[T any](r *Registry, name string) {
	if err := Register[T](r, name); err != nil {
		panic(err)
	}
}

// NameOf returns the registered name of v's type, or of the type it
// points to; an unregistered one fails with [ErrUnknownMessage].
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

// Encode returns the registered name of v's type and v as JSON; v may be
// a non-nil pointer.
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

// Decode decodes body into a new value of the type registered as name and
// returns a pointer to it. An unregistered name fails with
// [ErrUnknownMessage] before anything is made; a body that is not valid
// UTF-8 JSON of the type, or has trailing data, with [ErrBadRequest]. An
// empty body gives the zero value; unknown fields are ignored.
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

// DecodeAs decodes body as T, which must be registered as name, else
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
