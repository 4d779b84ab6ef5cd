package api

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/cloudbus-go/cloudbus/message"
)

// Domain limits, checked by each message's Validate: a message outside
// them is answered message.ErrBadRequest naming the field.
const (
	// MaxNameBytes bounds a name and a host address.
	MaxNameBytes = 255
	// MaxURLBytes bounds an image URL.
	MaxURLBytes = 2048
	// MaxCPUs bounds a VM's virtual CPUs.
	MaxCPUs = 256
	// MaxMemoryMB bounds a VM's memory: 4 TiB.
	MaxMemoryMB = 4 << 20
	// MaxImageSizeMB bounds an image's size: 64 TiB.
	MaxImageSizeMB = 64 << 20
)

// FieldError is one field of a message outside its limits.
type FieldError struct {
	// Field is the field's JSON name ("name", "cpus").
	Field string
	// Problem says what is wrong with it, after its name ("is 300 bytes,
	// more than 255").
	Problem string
}

// Error returns the field's name and the problem.
func (e FieldError) Error() string { return e.Field + " " + e.Problem }

// InvalidError is what Validate returns for a message with fields outside
// their limits: it matches message.ErrBadRequest (whose details name every
// field) and lists the fields, for a caller that answers per field (an
// HTTP API naming the field).
type InvalidError struct {
	// Fields are the fields outside their limits, in the message's order.
	Fields []FieldError
	err    error
}

// Error returns the message's name and every field's problem.
func (e *InvalidError) Error() string { return e.err.Error() }

// Unwrap returns the message.ErrBadRequest error that names the fields.
func (e *InvalidError) Unwrap() error { return e.err }

// problems collects the bad fields of one message.
type problems []FieldError

func (p *problems) text(field, v string, max int) {
	switch {
	case len(v) > max:
		*p = append(*p, FieldError{field, fmt.Sprintf("is %d bytes, more than %d", len(v), max)})
	case !utf8.ValidString(v):
		*p = append(*p, FieldError{field, "is not valid UTF-8"})
	}
}

func (p *problems) between(field string, v, lo, hi int64) {
	if v < lo || v > hi {
		*p = append(*p, FieldError{field, fmt.Sprintf("%d is out of range: %d to %d (0: the default)", v, lo, hi)})
	}
}

func (p problems) err(msg string) error {
	if len(p) == 0 {
		return nil
	}
	errs := make([]error, len(p))
	for i, f := range p {
		errs[i] = f
	}
	return &InvalidError{Fields: p, err: message.ErrBadRequest.WithDetails(msg + ": " + errors.Join(errs...).Error())}
}

// Validate checks the fields against the domain limits.
func (m AddHost) Validate() error {
	var p problems
	p.text("name", m.Name, MaxNameBytes)
	p.text("address", m.Address, MaxNameBytes)
	return p.err("AddHost")
}

// Validate checks the fields against the domain limits.
func (m AddImage) Validate() error {
	var p problems
	p.text("name", m.Name, MaxNameBytes)
	p.text("url", m.URL, MaxURLBytes)
	p.between("size_mb", m.SizeMB, 0, MaxImageSizeMB)
	return p.err("AddImage")
}

// Validate checks the fields against the domain limits: the name, and
// the name to compare with, like AddImage's name.
func (m SetImageName) Validate() error {
	var p problems
	p.text("name", m.Name, MaxNameBytes)
	if m.IfName != nil {
		p.text("if_name", *m.IfName, MaxNameBytes)
	}
	return p.err("SetImageName")
}

// Validate checks the fields against the domain limits.
func (m CreateVm) Validate() error {
	var p problems
	p.text("name", m.Name, MaxNameBytes)
	p.between("cpus", int64(m.CPUs), 0, MaxCPUs)
	p.between("memory_mb", int64(m.MemoryMB), 0, MaxMemoryMB)
	return p.err("CreateVm")
}

// Validate checks that the target host and the job are named.
func (m MigrateVm) Validate() error {
	var p problems
	p.uuid("host_uuid", m.HostUUID)
	p.uuid("job", m.Job)
	return p.err("MigrateVm")
}

func (p *problems) uuid(field, v string) {
	if _, err := message.NormalizeUUID(v); err != nil {
		*p = append(*p, FieldError{field, fmt.Sprintf("%q is not a UUID", v)})
	}
}
