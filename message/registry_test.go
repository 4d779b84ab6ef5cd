package message_test

import (
	"strings"
	"testing"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type startVM struct {
	VMUUID string `json:"vm_uuid"`
	Host   string `json:"host,omitempty"`
}

type stopVM struct {
	VMUUID string `json:"vm_uuid"`
	Force  bool   `json:"force"`
}

func testRegistry(t testing.TB) *message.Registry {
	r := message.NewRegistry()
	require.NoError(t, message.Register[startVM](r, "test.v1.StartVm"))
	require.NoError(t, message.Register[stopVM](r, "test.v1.StopVm"))
	return r
}

func TestRegisterRules(t *testing.T) {
	r := testRegistry(t)
	assert.NoError(t, message.Register[startVM](r, "test.v1.StartVm"), "same type, same name: no-op")
	assert.ErrorContains(t, message.Register[stopVM](r, "test.v1.StartVm"), "already registered for")
	assert.ErrorContains(t, message.Register[startVM](r, "test.v2.StartVm"), "already registered as")
	assert.ErrorContains(t, message.Register[*startVM](r, "test.v1.Ptr"), "is a ptr")
	assert.ErrorContains(t, message.Register[error](r, "test.v1.Iface"), "is a interface")
	for _, bad := range []string{"", "StartVm", "test.StartVm", "test.v1.", ".v1.X", "test.v1.Start Vm", "test.v1x.StartVm", strings.Repeat("a", 130) + ".v1.X"} {
		assert.ErrorContains(t, message.Register[struct{ A int }](r, bad), "invalid type name", "name %q", bad)
	}
	assert.Panics(t, func() { message.MustRegister[stopVM](r, "test.v1.StartVm") })
	assert.Equal(t, []string{message.TypeEmpty, "test.v1.StartVm", "test.v1.StopVm"}, r.Names())
}

func TestRegistryEncodeDecode(t *testing.T) {
	r := testRegistry(t)
	name, body, err := r.Encode(&startVM{VMUUID: "932763162d054c04adaab6ab498c9139"})
	require.NoError(t, err)
	assert.Equal(t, "test.v1.StartVm", name)

	v, err := r.Decode(name, body)
	require.NoError(t, err)
	assert.Equal(t, &startVM{VMUUID: "932763162d054c04adaab6ab498c9139"}, v)

	got, err := message.DecodeAs[startVM](r, name, body)
	require.NoError(t, err)
	assert.Equal(t, "932763162d054c04adaab6ab498c9139", got.VMUUID)

	_, err = message.DecodeAs[stopVM](r, name, body)
	assert.ErrorIs(t, err, message.ErrUnknownMessage, "decoding as the wrong registered type is refused")

	_, _, err = r.Encode(struct{ X int }{1})
	assert.ErrorIs(t, err, message.ErrUnknownMessage)
	_, _, err = r.Encode((*startVM)(nil))
	assert.ErrorIs(t, err, message.ErrBadRequest)

	n, err := message.NameFor[stopVM](r)
	require.NoError(t, err)
	assert.Equal(t, "test.v1.StopVm", n)
	assert.True(t, r.Known("test.v1.StopVm"))
	assert.False(t, r.Known("test.v1.Nope"))
}

// TestDecodeMalformed is the table of malformed input: every case must fail
// with the stated code and never instantiate an unregistered type.
func TestDecodeMalformed(t *testing.T) {
	r := testRegistry(t)
	okEnv := `{"id":"a","kind":"request","type":"test.v1.StartVm","service_id":"vm.x","correlation_id":"c","reply_to":"r"}`
	envTests := []struct {
		name  string
		data  string
		limit int
		code  message.Code
	}{
		{"empty", ``, 0, message.ErrBadRequest.Code},
		{"not json", `hello`, 0, message.ErrBadRequest.Code},
		{"trailing garbage", okEnv + `x`, 0, message.ErrBadRequest.Code},
		{"two values", okEnv + okEnv, 0, message.ErrBadRequest.Code},
		{"invalid utf-8", strings.Replace(okEnv, `"a"`, "\"\xff\"", 1), 0, message.ErrBadRequest.Code},
		{"oversize", okEnv, 10, message.ErrTooLarge.Code},
		{"unknown kind", strings.Replace(okEnv, "request", "rpc", 1), 0, message.ErrBadRequest.Code},
		{"no id", strings.Replace(okEnv, `"id":"a"`, `"id":""`, 1), 0, message.ErrBadRequest.Code},
		{"malformed type name", strings.Replace(okEnv, "test.v1.StartVm", "main.startVM", 1), 0, message.ErrBadRequest.Code},
		{"request without reply-to", strings.Replace(okEnv, `,"reply_to":"r"`, ``, 1), 0, message.ErrBadRequest.Code},
		{"send without target", `{"id":"a","kind":"send","type":"test.v1.StartVm"}`, 0, message.ErrBadRequest.Code},
		{"invalid resource uuid", strings.Replace(okEnv, `}`, `,"resource_uuid":"xyz"}`, 1), 0, message.ErrInvalidUUID.Code},
		{"negative timeout", strings.Replace(okEnv, `}`, `,"timeout_ns":-5}`, 1), 0, message.ErrBadRequest.Code},
		{"body not json", strings.Replace(okEnv, `}`, `,"body":nope}`, 1), 0, message.ErrBadRequest.Code},
	}
	for _, tt := range envTests {
		t.Run("envelope/"+tt.name, func(t *testing.T) {
			_, err := wire.DecodeEnvelope([]byte(tt.data), tt.limit)
			require.Error(t, err)
			assert.Equal(t, tt.code, message.CodeOf(err), "error: %v", err)
		})
	}
	_, err := wire.DecodeEnvelope([]byte(okEnv), 0)
	require.NoError(t, err, "the base case must be valid")

	payloadTests := []struct {
		name, typ, body string
		code            message.Code
	}{
		{"unknown type name", "test.v1.Nope", `{}`, message.ErrUnknownMessage.Code},
		{"real Go type not registered", "os.File", `{}`, message.ErrUnknownMessage.Code},
		{"real Go type, versioned shape", "os.v1.File", `{}`, message.ErrUnknownMessage.Code},
		{"go type syntax", "*exec.Cmd", `{}`, message.ErrUnknownMessage.Code},
		{"trailing garbage", "test.v1.StartVm", `{"vm_uuid":"a"} x`, message.ErrBadRequest.Code},
		{"two values", "test.v1.StartVm", `{}{}`, message.ErrBadRequest.Code},
		{"wrong field type", "test.v1.StartVm", `{"vm_uuid":5}`, message.ErrBadRequest.Code},
		{"invalid utf-8", "test.v1.StartVm", "{\"vm_uuid\":\"\xff\"}", message.ErrBadRequest.Code},
		{"not an object", "test.v1.StartVm", `[1,2]`, message.ErrBadRequest.Code},
		{"truncated", "test.v1.StartVm", `{"vm_uuid":"a"`, message.ErrBadRequest.Code},
	}
	for _, tt := range payloadTests {
		t.Run("payload/"+tt.name, func(t *testing.T) {
			v, err := r.Decode(tt.typ, []byte(tt.body))
			require.Error(t, err)
			assert.Nil(t, v)
			assert.Equal(t, tt.code, message.CodeOf(err), "error: %v", err)
		})
	}
}

func TestValidTypeName(t *testing.T) {
	good := []string{"refnode.v1.StartVm", "a.v0.B", "acme.billing.v12.Charge_2", "my-app.v1.X", "A.v1.b"}
	bad := []string{"", "v1.X", "a.v1", "a.v.X", "a.vx.X", "a.V1.X", "1a.v1.X", "a..v1.X", "a.v1.X-y", "a.v1.1X", "a.v1.X.", ".a.v1.X", "a b.v1.X", "a.v1.X\n", "a.-b.v1.X"}
	for _, n := range good {
		assert.True(t, message.ValidTypeName(n), n)
	}
	for _, n := range bad {
		assert.False(t, message.ValidTypeName(n), n)
	}
}
