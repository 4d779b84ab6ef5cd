package rest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
)

// TestDeadLetters lists the dead-letter queue and replays a StartVm
// dead-lettered on a node that does not own the VM: it runs on the
// owner, the VM starts, and the queue is empty again.
func TestDeadLetters(t *testing.T) {
	f := start(t, 3, "")
	empty := f.do(t, "GET", "/v1/dead-letters", "")
	require.Equal(t, http.StatusOK, empty.status, empty.raw)
	assert.Equal(t, []any{}, empty.body["items"])
	assert.Equal(t, "dead-letter-queue", empty.header.Get(rest.HeaderSource))

	img := f.do(t, "POST", "/v1/images", `{"name":"debian","size_mb":512}`)
	require.Equal(t, http.StatusCreated, img.status, img.raw)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/hosts", `{"name":"h1","address":"10.0.0.1"}`).status)
	created := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"name":"vm","image_uuid":%q}`, img.str("uuid")))
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	vm := created.str("uuid")

	// A StartVm as the bus dead-letters it: sent one-way to the VM
	// service of a node that is not the VM's owner.
	var other string
	for _, n := range f.c.Live() {
		if n.UUID() != f.c.Owner(vm) {
			other = n.UUID()
		}
	}
	id := message.NewUUID()
	body, err := json.Marshal(api.StartVm{UUID: vm})
	require.NoError(t, err)
	data, err := wire.EncodeEnvelope(&wire.Envelope{ID: id, Kind: wire.KindSend, Type: "refnode.v1.StartVm", ServiceID: bus.ServiceID(api.VMService, other),
		ResourceUUID: vm, Source: "rest-test", Timeout: time.Minute, Body: body}, message.DefaultMaxSize)
	require.NoError(t, err)
	tr := f.c.Network().Transport("rest-test-" + message.NewUUID())
	t.Cleanup(func() { _ = tr.Close() })
	require.NoError(t, tr.Publish(t.Context(), f.c.Node(0).Bus().DeadLetterQueue(), data))

	listed := f.do(t, "GET", "/v1/dead-letters?limit=5", "")
	require.Equal(t, http.StatusOK, listed.status, listed.raw)
	items := listed.body["items"].([]any)
	require.Len(t, items, 1)
	dl := items[0].(map[string]any)
	assert.Equal(t, id, dl["id"])
	assert.Equal(t, "refnode.v1.StartVm", dl["type"])
	assert.Equal(t, vm, dl["resource"])
	assert.Equal(t, map[string]any{"uuid": vm}, dl["body"])
	again := f.do(t, "GET", "/v1/dead-letters", "")
	assert.Len(t, again.body["items"], 1, "listing removes nothing")

	unknown := message.NewUUID()
	f.badRequests = true
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"GET", "/v1/dead-letters?limit=0", "", http.StatusBadRequest, "limit"},
		{"GET", "/v1/dead-letters?limit=x", "", http.StatusBadRequest, "limit"},
		{"POST", "/v1/dead-letters/replay", `{}`, http.StatusBadRequest, "ids"},
		{"POST", "/v1/dead-letters/replay", `{"ids":["nope"]}`, http.StatusBadRequest, "ids"},
		{"POST", "/v1/dead-letters/replay", `{"ids":[1]}`, http.StatusBadRequest, "ids"},
		{"POST", "/v1/dead-letters/replay", `{"idz":[]}`, http.StatusBadRequest, "idz"},
		{"POST", "/v1/dead-letters/replay", fmt.Sprintf(`{"ids":[%q]}`, unknown), http.StatusNotFound, ""},
	} {
		got := f.do(t, c.method, c.path, c.body)
		assert.Equal(t, c.status, got.status, "%s %s %s: %s", c.method, c.path, c.body, got.raw)
		assert.Equal(t, c.field, got.errField("field"), "%s %s %s", c.method, c.path, c.body)
	}
	f.badRequests = false
	assert.Len(t, f.do(t, "GET", "/v1/dead-letters", "").body["items"], 1, "a refused replay leaves the queue as it was")

	replayed := f.do(t, "POST", "/v1/dead-letters/replay", fmt.Sprintf(`{"ids":[%q,%q]}`, id, unknown))
	require.Equal(t, http.StatusOK, replayed.status, replayed.raw)
	assert.Equal(t, []any{id}, replayed.body["replayed"])
	assert.Equal(t, []any{unknown}, replayed.body["missing"])
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.do(t, "GET", "/v1/vms/"+vm, "")
		if got.str("state") == "running" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the replayed StartVm starts the VM: %s", got.raw)
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, []any{}, f.do(t, "GET", "/v1/dead-letters", "").body["items"], "a replayed message leaves the queue")
}
