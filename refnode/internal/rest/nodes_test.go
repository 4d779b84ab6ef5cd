package rest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

// TestNodesAndOwner: GET /v1/nodes lists the three nodes serving, their
// shares adding up to 1 and the VMs each owns; GET /v1/owner/{uuid}
// names the VM's owner, which every node agrees on.
func TestNodesAndOwner(t *testing.T) {
	f := start(t, 3, "")
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/hosts", `{}`).status)
	img := f.do(t, "POST", "/v1/images", `{}`).str("uuid")
	var vms []string
	for range 6 {
		vms = append(vms, f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img)).str("uuid"))
	}
	var view struct {
		Node    string `json:"node"`
		Members []struct {
			UUID         string            `json:"uuid"`
			State        string            `json:"state"`
			RegisteredAt time.Time         `json:"registered_at"`
			Share        float64           `json:"share"`
			Owned        struct{ VMs int } `json:"owned"`
		} `json:"members"`
	}
	// A beat later than the test cluster's short lease (a loaded
	// machine, the race detector) shows a node UNHEALTHY for a moment:
	// read until every node is seen serving, within 5 s.
	for deadline := time.Now().Add(5 * time.Second); ; {
		got := f.do(t, "GET", "/v1/nodes", "")
		require.Equal(t, http.StatusOK, got.status, got.raw)
		require.NoError(t, json.Unmarshal([]byte(got.raw), &view))
		serving := 0
		for _, m := range view.Members {
			if m.State == "serving" {
				serving++
			}
		}
		if serving == len(view.Members) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, f.c.Node(0).UUID(), view.Node)
	require.Len(t, view.Members, 3)
	want := map[string]int{}
	for _, vm := range vms {
		want[f.c.Owner(vm)]++
	}
	sum := 0.0
	for _, m := range view.Members {
		assert.Equal(t, "serving", m.State, m.UUID)
		assert.Equal(t, want[m.UUID], m.Owned.VMs, "VMs owned by %s", m.UUID)
		assert.WithinDuration(t, time.Now(), m.RegisteredAt, time.Minute, "registered when the test started")
		sum += m.Share
	}
	assert.InDelta(t, 1, sum, 1e-9, "the shares cover the key space")

	for _, vm := range vms {
		o := f.do(t, "GET", "/v1/owner/"+vm, "")
		require.Equal(t, http.StatusOK, o.status, o.raw)
		assert.Equal(t, f.c.Owner(vm), o.str("owner"))
		assert.Equal(t, true, o.body["agree"], o.raw)
		assert.Len(t, o.body["views"], 3)
	}
}

// fakeNode is a node's view made up by the test.
type fakeNode struct {
	id      string
	members []string
	owner   string
	view    service.StoreView
	rings   func(ctx context.Context, resource string) []service.RingView // the peers' answers
}

func (n *fakeNode) UUID() string                  { return n.id }
func (n *fakeNode) Epoch() int64                  { return 7 }
func (n *fakeNode) Members() []string             { return n.members }
func (n *fakeNode) Fingerprint() ring.Fingerprint { return ring.FingerprintOf(n.members) }
func (n *fakeNode) Owner(string) (string, error)  { return n.owner, nil }
func (n *fakeNode) StoreView() service.StoreView  { return n.view }
func (n *fakeNode) Heartbeat() heartbeat.Config {
	return heartbeat.Config{Interval: 100 * time.Millisecond, EvictAfter: time.Second}
}
func (n *fakeNode) Rings(ctx context.Context, resource string) []service.RingView {
	if n.rings == nil {
		return nil
	}
	return n.rings(ctx, resource)
}
func (n *fakeNode) Shares() map[string]float64 {
	out := map[string]float64{}
	for _, m := range n.members {
		out[m] = 1 / float64(len(n.members))
	}
	return out
}

// TestNodesStates: a peer whose beat is older than its lease is
// UNHEALTHY, one live in the store but not in the ring is joining or
// leaving, a ring member the store lacks is missing; a node whose ring
// names another owner than its peers' makes the owner view disagree.
func TestNodesStates(t *testing.T) {
	f := start(t, 2, "")
	self, fresh, stale, joining, gone := message.NewUUID(), message.NewUUID(), message.NewUUID(), message.NewUUID(), message.NewUUID()
	n := &fakeNode{id: self, members: []string{self, fresh, stale, gone}, owner: self, view: service.StoreView{
		LastBeat: time.Now(),
		Records: []heartbeat.Record{
			{Node: fresh, Epoch: 1, Age: 50 * time.Millisecond},
			{Node: stale, Epoch: 2, Age: 900 * time.Millisecond, BusDown: time.Second}, // past the lease (800 ms)
			{Node: joining, Epoch: 3},
		}}}
	a, err := rest.New(rest.Config{Caller: f.c.Client(t), Store: memdb.New(), Node: n, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/nodes", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var view struct {
		Members []struct {
			UUID      string `json:"uuid"`
			State     string `json:"state"`
			BusDownMS int64  `json:"bus_down_ms"`
		} `json:"members"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &view))
	states := map[string]string{}
	for _, m := range view.Members {
		states[m.UUID] = m.State
	}
	assert.Equal(t, map[string]string{self: "serving", fresh: "serving", stale: "UNHEALTHY", joining: "joining_or_leaving", gone: "missing"}, states)

	// The real nodes own the resource as their ring says; this made-up
	// view names itself, so the views disagree.
	cl := f.c.Client(t)
	n.members = f.c.LiveUUIDs()
	n.rings = f.c.Node(0).Rings
	a, err = rest.New(rest.Config{Caller: cl, Store: memdb.New(), Node: n, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	vm := message.NewUUID()
	rec = httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/owner/"+vm, nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var owner struct {
		Owner string                                `json:"owner"`
		Agree bool                                  `json:"agree"`
		Views []struct{ Node, Owner, Error string } `json:"views"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &owner))
	assert.Equal(t, self, owner.Owner, "the serving node's view")
	assert.False(t, owner.Agree)
	require.Len(t, owner.Views, 2)
	for _, v := range owner.Views {
		assert.Equal(t, f.c.Owner(vm), v.Owner, "node %s answers from its own ring", v.Node)
		assert.Empty(t, v.Error)
	}
}
