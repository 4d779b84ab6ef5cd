package main

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// TestCtlDead drives refnode ctl dead list and replay against a live
// 3-node cluster of refnode's services (in memory) through one node's
// REST API: a StartVm dead-lettered on a node that does not own the VM
// is listed, in table and JSON, then replayed: it runs on the VM's
// owner, the VM starts, and the queue is empty.
func TestCtlDead(t *testing.T) {
	c, ctl := ctlCluster(t)
	code, out, errOut := ctl("dead")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "ID  TYPE  SERVICE  RESOURCE  REASON\n", out, "an empty queue")

	var ids map[string]string
	for _, step := range [][]string{{"host", "add", "-name", "h1"}, {"image", "add", "-name", "debian"}} {
		code, out, errOut = ctl(append([]string{"-o", "json"}, step...)...)
		require.Equal(t, 0, code, errOut)
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
		if ids == nil {
			ids = map[string]string{}
		}
		ids[step[0]] = rec["uuid"].(string)
	}
	code, out, errOut = ctl("-o", "json", "vm", "create", ids["image"])
	require.Equal(t, 0, code, errOut)
	var vm map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &vm), out)
	vmID := vm["uuid"].(string)

	// A StartVm as the bus dead-letters it, addressed to a node that does
	// not own the VM.
	var other string
	for _, n := range c.Live() {
		if n.UUID() != c.Owner(vmID) {
			other = n.UUID()
		}
	}
	id := message.NewUUID()
	body, err := json.Marshal(api.StartVm{UUID: vmID})
	require.NoError(t, err)
	data, err := wire.EncodeEnvelope(&wire.Envelope{ID: id, Kind: wire.KindSend, Type: "refnode.v1.StartVm", ServiceID: bus.ServiceID(api.VMService, other),
		ResourceUUID: vmID, Source: "ctl-test", Timeout: time.Minute, Body: body}, message.DefaultMaxSize)
	require.NoError(t, err)
	tr := c.Network().Transport("ctl-test-" + message.NewUUID())
	t.Cleanup(func() { _ = tr.Close() })
	require.NoError(t, tr.Publish(t.Context(), c.Node(0).Bus().DeadLetterQueue(), data))

	code, out, errOut = ctl("dead", "list")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^ID +TYPE +SERVICE +RESOURCE +REASON\n`+id+` +refnode\.v1\.StartVm +vmInstance\.`+other+` +`+vmID+` +-\n$`, out)
	code, out, errOut = ctl("-o", "json", "dead", "list", "-limit", "1")
	require.Equal(t, 0, code, errOut)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 1)
	assert.Equal(t, id, listed[0]["id"])
	assert.Equal(t, map[string]any{"uuid": vmID}, listed[0]["body"])

	code, _, errOut = ctl("dead", "replay")
	assert.Equal(t, 2, code, "usage: %s", errOut)
	code, _, errOut = ctl("dead", "replay", "nope")
	assert.Equal(t, 2, code, "usage: %s", errOut)
	code, _, errOut = ctl("dead", "replay", message.NewUUID())
	assert.Equal(t, 1, code, "none found: %s", errOut)
	assert.Contains(t, errOut, "not_found: ")

	unknown := message.NewUUID()
	code, out, errOut = ctl("dead", "replay", id, unknown)
	assert.Equal(t, 1, code, "one id was not there: %s", errOut)
	assert.Regexp(t, `^ID +OUTCOME\n`+id+` +replayed\n`+unknown+` +missing\n$`, out)
	assert.Contains(t, errOut, "1 of the ids are not in the dead-letter queue")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, errOut = ctl("-o", "json", "vm", "get", vmID)
		require.Equal(t, 0, code, errOut)
		if strings.Contains(out, `"state": "running"`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the replayed StartVm starts the VM: %s", out)
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errOut = ctl("-o", "json", "dead")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "[]\n", out, "a replayed message leaves the queue")
}

// ctlCluster starts a live 3-node cluster of refnode's services (in
// memory) with the REST API of its first node, and returns it with a
// runner of refnode ctl against that API.
func ctlCluster(t *testing.T) (*servicetest.Cluster, func(args ...string) (int, string, string)) {
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	hv, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	db := memdb.New()
	c := servicetest.Start(t, servicetest.Options{
		Nodes:    3,
		Registry: reg,
		Services: func(int, nodekit.Env) []service.Service {
			s, err := services.New(services.Config{Store: db, Hypervisor: hv, PingInterval: time.Hour})
			if err != nil {
				panic(err)
			}
			return s.Services()
		},
	})
	db.UseFence(c.Store(), memfence.Config{})
	cl := c.Client(t)
	a, err := rest.New(rest.Config{Caller: cl, Store: db, Logger: slog.New(slog.DiscardHandler), Node: c.Node(0), DeadLetters: c.Node(0)})
	require.NoError(t, err)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return c, func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, &env{vars: map[string]string{"REFNODE_API": srv.URL}}, append([]string{"ctl"}, args...)...)
	}
}

// TestCtlImageDelete: refnode ctl image delete is refused (exit 1,
// conflict) while a VM uses the image, deletes it once the VM is
// destroyed, and a second delete is not found (exit 1).
func TestCtlImageDelete(t *testing.T) {
	_, ctl := ctlCluster(t)
	uuidOf := func(args ...string) string {
		t.Helper()
		code, out, errOut := ctl(append([]string{"-o", "json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
		return rec["uuid"].(string)
	}
	uuidOf("host", "add")
	img := uuidOf("image", "add", "-name", "debian")
	vm := uuidOf("vm", "create", img)
	code, _, errOut := ctl("image", "delete", img)
	assert.Equal(t, 1, code, "in use: %s", errOut)
	assert.Regexp(t, `^refnode ctl image delete: conflict: .*`+vm+`.*\(HTTP 409\)\n$`, errOut)
	code, _, errOut = ctl("vm", "destroy", vm)
	require.Equal(t, 0, code, errOut)
	code, out, errOut := ctl("image", "delete", img)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^UUID +NAME +SIZE_MB +URL\n`+img+` +debian +`, out)
	code, _, errOut = ctl("image", "delete", img)
	assert.Equal(t, 1, code, "deleted already: %s", errOut)
	assert.Contains(t, errOut, "not_found: ")
	code, _, errOut = ctl("image", "delete")
	assert.Equal(t, 2, code, "usage: %s", errOut)
}
