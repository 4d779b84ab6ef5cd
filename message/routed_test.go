package message_test

import (
	"errors"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// getVM declares ResourceUUID on the value receiver.
type getVM struct {
	VMUUID string `json:"vm_uuid"`
}

func (m getVM) ResourceUUID() string { return m.VMUUID }

// migrateVM declares ResourceUUID on the pointer receiver, and records the
// call, to show that ResourceOf calls it on a copy.
type migrateVM struct {
	VMUUID string `json:"vm_uuid"`
	called bool
}

func (m *migrateVM) ResourceUUID() string {
	m.called = true
	return m.VMUUID
}

// derefVM's ResourceUUID would panic on a nil pointer.
type derefVM struct{ p *string }

func (m *derefVM) ResourceUUID() string { return *m.p }

// createVM is about no existing resource: not Routed.
type createVM struct {
	Name string `json:"name"`
}

var (
	_ message.Routed = getVM{}
	_ message.Routed = (*migrateVM)(nil)
)

func TestResourceOf(t *testing.T) {
	const canonical = "932763162d054c04adaab6ab498c9139"
	const dashed = "93276316-2D05-4C04-ADAA-B6AB498C9139"
	s := canonical
	tests := []struct {
		name       string
		v          any
		want       string
		wantRouted bool
		wantErr    *message.Error
		details    []string
	}{
		{name: "value receiver, value", v: getVM{VMUUID: canonical}, want: canonical, wantRouted: true},
		{name: "value receiver, pointer", v: &getVM{VMUUID: dashed}, want: canonical, wantRouted: true},
		{name: "pointer receiver, pointer", v: &migrateVM{VMUUID: canonical}, want: canonical, wantRouted: true},
		{name: "pointer receiver, value", v: migrateVM{VMUUID: dashed}, want: canonical, wantRouted: true},
		{name: "pointer receiver needing the pointer", v: derefVM{p: &s}, want: canonical, wantRouted: true},
		{name: "not routed, value", v: createVM{Name: "x"}},
		{name: "not routed, pointer", v: &createVM{Name: "x"}},
		{name: "not routed, nil pointer", v: (*createVM)(nil)},
		{name: "nil", v: nil},
		{name: "not a struct", v: 42},
		{name: "pointer to a pointer", v: func() any { p := &getVM{VMUUID: canonical}; return &p }()},
		{
			name: "empty, value receiver", v: getVM{}, wantRouted: true, wantErr: message.ErrBadRequest,
			details: []string{"message_test.getVM", `ResourceUUID() returned ""`},
		},
		{
			name: "empty, pointer receiver, value", v: migrateVM{}, wantRouted: true, wantErr: message.ErrBadRequest,
			details: []string{"message_test.migrateVM", `ResourceUUID() returned ""`},
		},
		{
			name: "nil pointer, value receiver", v: (*getVM)(nil), wantRouted: true, wantErr: message.ErrBadRequest,
			details: []string{"*message_test.getVM", "nil pointer"},
		},
		{
			name: "nil pointer, pointer receiver", v: (*derefVM)(nil), wantRouted: true, wantErr: message.ErrBadRequest,
			details: []string{"*message_test.derefVM", "nil pointer"},
		},
		{
			name: "malformed", v: getVM{VMUUID: "vm-1"}, wantRouted: true, wantErr: message.ErrInvalidUUID,
			details: []string{"message_test.getVM", `"vm-1"`, "length 4"},
		},
		{
			name: "urn form", v: &migrateVM{VMUUID: "urn:uuid:" + dashed}, wantRouted: true, wantErr: message.ErrInvalidUUID,
			details: []string{"*message_test.migrateVM", "length 45"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var routed bool
			var err error
			require.NotPanics(t, func() { got, routed, err = message.ResourceOf(tt.v) })
			assert.Equal(t, tt.wantRouted, routed, "routed")
			assert.Equal(t, tt.want, got)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			var me *message.Error
			require.True(t, errors.As(err, &me), "the error is a coded *message.Error")
			for _, d := range tt.details {
				assert.Contains(t, me.Details, d)
			}
		})
	}
}

func TestResourceOfDoesNotModifyAValue(t *testing.T) {
	v := migrateVM{VMUUID: "932763162d054c04adaab6ab498c9139"}
	_, routed, err := message.ResourceOf(v)
	require.NoError(t, err)
	require.True(t, routed)
	assert.False(t, v.called, "the pointer method ran on a copy")

	p := &migrateVM{VMUUID: "932763162d054c04adaab6ab498c9139"}
	_, _, err = message.ResourceOf(p)
	require.NoError(t, err)
	assert.True(t, p.called, "a pointer is used as is")
}

func TestResourceOfCanonicalDoesNotAllocate(t *testing.T) {
	v := &getVM{VMUUID: "932763162d054c04adaab6ab498c9139"}
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := message.ResourceOf(v); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "the common case, a pointer naming a canonical UUID, is free")
}
