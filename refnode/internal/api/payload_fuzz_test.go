package api_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// decodeAs decodes a body as the Go type registered under each name with
// message.DecodeAs, returning a pointer as Registry.Decode does.
var decodeAs = map[string]func(*message.Registry, string, []byte) (any, error){
	"refnode.v1.AddHost":           as[api.AddHost],
	"refnode.v1.GetHost":           as[api.GetHost],
	"refnode.v1.ReconnectHost":     as[api.ReconnectHost],
	"refnode.v1.HostReply":         as[api.HostReply],
	"refnode.v1.AllocateHost":      as[api.AllocateHost],
	"refnode.v1.HostAllocated":     as[api.HostAllocated],
	"refnode.v1.AddImage":          as[api.AddImage],
	"refnode.v1.GetImage":          as[api.GetImage],
	"refnode.v1.ImageReply":        as[api.ImageReply],
	"refnode.v1.SetImageName":      as[api.SetImageName],
	"refnode.v1.ImageNameSet":      as[api.ImageNameSet],
	"refnode.v1.DeleteImage":       as[api.DeleteImage],
	"refnode.v1.ImageDeleted":      as[api.ImageDeleted],
	"refnode.v1.CreateVm":          as[api.CreateVm],
	"refnode.v1.VmCreated":         as[api.VmCreated],
	"refnode.v1.StartVm":           as[api.StartVm],
	"refnode.v1.StopVm":            as[api.StopVm],
	"refnode.v1.RebootVm":          as[api.RebootVm],
	"refnode.v1.DestroyVm":         as[api.DestroyVm],
	"refnode.v1.GetVm":             as[api.GetVm],
	"refnode.v1.VmReply":           as[api.VmReply],
	"refnode.v1.MigrateVm":         as[api.MigrateVm],
	"refnode.v1.JobReply":          as[api.JobReply],
	"refnode.v1.PrepareMigration":  as[api.PrepareMigration],
	"refnode.v1.MigrationPrepared": as[api.MigrationPrepared],
	wire.TypeNodeJoined:            as[wire.NodeJoined],
	wire.TypeNodeLeft:              as[wire.NodeLeft],
	message.TypeEmpty:              as[message.Empty],
}

func as[T any](r *message.Registry, name string, body []byte) (any, error) {
	v, err := message.DecodeAs[T](r, name, body)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// FuzzPayload decodes outside bytes as each registered refnode message
// (the first byte picks the type) the way a receiving node does: through
// the registry, then the message's Validate and message.ResourceOf. None
// of them panics; every error is a *message.Error with a code of the
// table (bad_request or invalid_uuid after decoding); Decode and DecodeAs
// agree; and a decoded value re-encodes to a body that decodes to the same
// value, whether or not it validates.
func FuzzPayload(f *testing.F) {
	reg := message.NewRegistry()
	if err := api.Register(reg); err != nil {
		f.Fatal(err)
	}
	// A node registers the lifecycle events beside the API's types.
	message.MustRegister[wire.NodeJoined](reg, wire.TypeNodeJoined)
	message.MustRegister[wire.NodeLeft](reg, wire.TypeNodeLeft)
	names := reg.Names()
	if len(names) != len(decodeAs) {
		f.Fatalf("registered %v; the fuzz test knows %d types: add the new ones to decodeAs", names, len(decodeAs))
	}
	index := func(name string) byte { return byte(slices.Index(names, name)) }
	for _, s := range []struct{ name, body string }{
		{"refnode.v1.StartVm", `{"uuid":"932763162d054c04adaab6ab498c9139"}`},
		{"refnode.v1.StartVm", `{"uuid":"93276316-2D05-4C04-ADAA-B6AB498C9139"}`},
		{"refnode.v1.GetHost", `{"uuid":""}`},
		{"refnode.v1.GetVm", `{"uuid":"urn:uuid:93276316-2d05-4c04-adaa-b6ab498c9139"}`},
		{"refnode.v1.CreateVm", `{"name":"web","image_uuid":"932763162d054c04adaab6ab498c9139","cpus":2,"memory_mb":1024}`},
		{"refnode.v1.CreateVm", `{"cpus":-1,"memory_mb":1e3}`},
		{"refnode.v1.CreateVm", `{"cpus":99999999999999999999}`},
		{"refnode.v1.AddImage", `{"uuid":"932763162d054c04adaab6ab498c9139","url":"http://x/i.qcow2","size_mb":67108865}`},
		{"refnode.v1.AddHost", `{"uuid":"932763162d054c04adaab6ab498c9139","name":"h\ud800","address":"10.0.0.1"}`},
		{"refnode.v1.SetImageName", `{"uuid":"932763162d054c04adaab6ab498c9139","name":"b","if_name":"a"}`},
		{"refnode.v1.SetImageName", `{"uuid":"932763162d054c04adaab6ab498c9139","name":"b","if_name":null}`},
		{"refnode.v1.SetImageName", `{"uuid":"932763162d054c04adaab6ab498c9139","name":"b","if_name":""}`},
		{"refnode.v1.ImageNameSet", `{"image":{"uuid":"x","name":"b"},"set":true,"node":"n"}`},
		{"refnode.v1.DeleteImage", `{"uuid":"932763162d054c04adaab6ab498c9139"}`},
		{"refnode.v1.ImageDeleted", `{"image":{"uuid":"x","name":"b"},"node":"n"}`},
		{"refnode.v1.HostReply", `{"host":{"uuid":"x","status":"connected","connected_at":"2025-11-30T05:20:00.123456+01:00"},"node":"n"}`},
		{"refnode.v1.HostReply", `{"host":{"connected_at":"10000-01-01T00:00:00Z"}}`},
		{"refnode.v1.VmReply", `{"vm":{"uuid":"x","state":"exploded"},"node":"n","portal":"p"}`},
		{"cloudbus.v1.NodeLeft", `{"node":"3694776ab31a45709259254a018913ca","epoch":3,"reason":"evicted"}`},
		{"cloudbus.v1.Empty", `{}`},
		{"refnode.v1.StopVm", `{"uuid":1}`},
		{"refnode.v1.StopVm", `{"uuid":"a"} {}`},
		{"refnode.v1.StopVm", "\xff"},
		{"refnode.v1.StopVm", ``},
		{"refnode.v1.StopVm", `null`},
	} {
		f.Add(index(s.name), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		name := names[int(which)%len(names)]
		v, err := reg.Decode(name, body)
		w, errAs := decodeAs[name](reg, name, body)
		if (err == nil) != (errAs == nil) {
			t.Fatalf("%s: Decode says %v, DecodeAs %v", name, err, errAs)
		}
		if err != nil {
			checkCoded(t, "decode "+name, err)
			return
		}
		if !reflect.DeepEqual(v, w) {
			t.Fatalf("%s: Decode gives %#v, DecodeAs %#v", name, v, w)
		}
		if got, err := reg.NameOf(v); err != nil || got != name {
			t.Fatalf("decoded %s into %T, registered as %q (%v)", name, v, got, err)
		}
		if m, ok := v.(interface{ Validate() error }); ok {
			if err := m.Validate(); err != nil {
				checkCoded(t, "validate "+name, err)
				if message.CodeOf(err) != message.ErrBadRequest.Code {
					t.Fatalf("%s: Validate fails with code %s, want bad_request: %v", name, message.CodeOf(err), err)
				}
			}
		}
		uuid, routed, err := message.ResourceOf(v)
		if err != nil {
			checkCoded(t, "resource of "+name, err)
			if c := message.CodeOf(err); c != message.ErrBadRequest.Code && c != message.ErrInvalidUUID.Code {
				t.Fatalf("%s: ResourceOf fails with code %s: %v", name, c, err)
			}
		} else if routed && !message.IsCanonicalUUID(uuid) {
			t.Fatalf("%s: ResourceOf returned %q, not a canonical UUID", name, uuid)
		}
		name2, body2, err := reg.Encode(v)
		if err != nil {
			t.Fatalf("%s: a decoded %T does not re-encode: %v", name, v, err)
		}
		if name2 != name {
			t.Fatalf("%s re-encodes as %s", name, name2)
		}
		v2, err := reg.Decode(name2, body2)
		if err != nil {
			t.Fatalf("%s: the re-encoded body %s does not decode: %v", name, body2, err)
		}
		if !reflect.DeepEqual(inUTC(v), inUTC(v2)) {
			t.Fatalf("%s: round trip changed the value:\n%#v\n%#v\nvia %s", name, v, v2, body2)
		}
	})
}

// inUTC returns v with its times in UTC: JSON keeps a time's instant and
// offset, not its *time.Location (an offset that is Local's decodes as
// Local, and Local's offset 0 encodes as "Z", which decodes as UTC).
func inUTC(v any) any {
	if r, ok := v.(*api.HostReply); ok {
		c := *r
		c.Host.ConnectedAt = c.Host.ConnectedAt.UTC()
		return &c
	}
	return v
}

// checkCoded fails unless err is a *message.Error whose code is one of
// the table's.
func checkCoded(t *testing.T, what string, err error) {
	t.Helper()
	var me *message.Error
	if !errors.As(err, &me) {
		t.Fatalf("%s: error %v (%T) is not a *message.Error", what, err, err)
	}
	if !slices.Contains(message.Codes(), me.Code) {
		t.Fatalf("%s: error code %q is not in message.Codes(): %v", what, me.Code, err)
	}
}
