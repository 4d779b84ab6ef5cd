package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// TestFaultHarness checks the harness on two real processes, with a fast
// heartbeat: the nodes start through their proxies and agree; a call
// with an x-op header shows in the owner's op log; a paused node
// resumes; a node killed with SIGKILL is evicted, its slot restarted
// with a new UUID and a clock skew that the node prints; a cut database
// link heals; and the op logs of every process, the killed one's
// included, can be read.
func TestFaultHarness(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Timeout: 90 * time.Second})
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 2, Name: "harness",
		Heartbeat: 250 * time.Millisecond, EvictAfter: time.Second, Skew: []time.Duration{0, 250 * time.Millisecond}})
	fc.Start(t, ctx)
	a, b := fc.Node(0), fc.Node(1)
	assert.Equal(t, "A1", a.Label())
	assert.True(t, strings.HasPrefix(fc.Prefix(), "refnode-test-harness-"))
	out, _ := b.Proc().output()
	assert.Contains(t, out, "clock:   skewed by 250ms", "node B runs with its slot's skew")
	assert.Contains(t, out, "bus:     amqp://guest:xxxxx@127.0.0.1:"+portOf(b.Bus.Addr()), "node B reaches the broker through its proxy")

	cl := fc.Client(t, ctx)
	img, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: message.NewUUID(), Name: "harness"})
	require.NoError(t, err)
	opID := "op-harness-" + message.NewUUID()[:8]
	_, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: img.Image.UUID}, bus.WithHeader(HeaderOp, opID))
	require.NoError(t, err)

	b.Pause(t)
	time.Sleep(300 * time.Millisecond)
	b.Resume(t)
	require.NoError(t, poll(ctx, fc.Agreed), "the rings agree after a short pause")

	killed := a.ID()
	a.Kill(t)
	assert.False(t, a.Running())
	require.NoError(t, poll(ctx, fc.Agreed), "node B evicts the killed node A1: its ring holds itself alone")
	a.Skew = -250 * time.Millisecond
	a.Restart(t, ctx)
	assert.Equal(t, "A2", a.Label())
	assert.NotEqual(t, killed, a.ID(), "a restarted slot runs a new node")
	require.NoError(t, poll(ctx, fc.Agreed), "the rings hold A2 and B1")

	for _, n := range fc.Nodes() {
		n.DB.Cut()
	}
	time.Sleep(300 * time.Millisecond)
	for _, n := range fc.Nodes() {
		n.DB.Heal()
	}
	require.NoError(t, poll(ctx, fc.Agreed), "the rings agree after a short database cut")
	_, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: img.Image.UUID})
	require.NoError(t, err, "the cluster answers after the cut")

	fc.Terminate(t, 20*time.Second)
	labels := fc.Labels()
	assert.Equal(t, "A1", labels[killed])
	assert.Len(t, fc.OpLogs(), 3, "A1, A2 and B1 wrote op logs")
	ops, err := collectOps(fc.OpLogs(), labels)
	require.NoError(t, err)
	require.NotEmpty(t, ops.Owner[opID], "the owner's op log holds the call's run")
	assert.Equal(t, "handle", ops.Owner[opID][0].Op)
	assert.Len(t, ops.Portal[opID], 1, "and one portal's forward")
}

// portOf returns the port of a "host:port" address.
func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}
