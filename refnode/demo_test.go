package main

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opLine matches one printed operation.
var opLine = regexp.MustCompile(`^  (\w+)\s+(host|image|vm)\s+([0-9a-f]{8})…  → (handled by|sent to) node ([A-Z]) \(([^)]*)\)`)

// TestDemoTellsTheTruth runs the demo's scenario in-process and checks
// that what it reports, and prints, is true: each message about a
// resource was handled by the owner that an independent ring over the
// membership of that moment names; creation ran where it was sent; after
// the kill every host of the dead node was reconnected by its new owner
// and the dead node's VMs were handled by theirs.
func TestDemoTellsTheTruth(t *testing.T) {
	var out bytes.Buffer
	rep, err := runDemo(t.Context(), &out, demoOptions{latency: 2 * time.Millisecond})
	require.NoError(t, err)
	text := out.String()
	t.Logf("demo output:\n%s", text)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 60, "the default output stays short")
	assert.Less(t, rep.elapsed, 10*time.Second)

	label := map[string]string{}
	require.Len(t, rep.nodes, 3)
	for _, n := range rep.nodes {
		label[n.uuid] = n.label
		for _, svc := range []string{api.HostService, api.ImageService, api.VMService} {
			q := "cloudbus.message." + svc + "." + n.uuid
			assert.Contains(t, n.queues, q, "node %s registered its %s queue", n.label, svc)
			assert.Contains(t, text, "  "+n.label+"  "+q+"\n", "the queue is printed in full")
		}
	}
	assert.Equal(t, "cloudbus.message.api.portal", rep.portal)
	assert.Contains(t, text, "cloudbus.message.api.portal")

	// Every operation: true against the rings, and printed as it happened.
	var printed [][]string
	for _, l := range lines {
		if m := opLine.FindStringSubmatch(l); m != nil {
			printed = append(printed, m)
		}
	}
	require.Len(t, printed, len(rep.ops), "one printed line per operation")
	routes := map[string]int{}
	failed := 0
	for i, op := range rep.ops {
		routes[op.route]++
		switch op.route {
		case routeOwner, routePortal:
			r, err := ringOf(op.members)
			require.NoError(t, err)
			want, err := r.Locate(op.resource)
			require.NoError(t, err)
			assert.Equal(t, want, op.owner, "op %d: the recorded owner is the ring's", i)
			if op.err == nil {
				assert.Equal(t, want, op.handler, "op %d (%s %s): handled by the ring owner at that moment", i, op.msg, op.resource)
			}
		case routeLocal:
			assert.Equal(t, op.sender, op.handler, "op %d: a creation runs on the sending node", i)
		case routePortalLocal:
			assert.Equal(t, op.portal, op.handler, "op %d: a creation through api.portal runs on the portal's node", i)
		default:
			t.Errorf("op %d: unknown route %q", i, op.route)
		}
		switch {
		case op.err != nil: // the reply, which names the portal, is an error
		case op.route == routePortal || op.route == routePortalLocal:
			assert.Contains(t, label, op.portal, "op %d came through a node's api.portal", i)
		default:
			assert.Empty(t, op.portal, "op %d did not come through api.portal", i)
		}
		m := printed[i]
		assert.Equal(t, op.msg, m[1], "op %d printed", i)
		assert.Equal(t, op.kind, m[2])
		assert.Equal(t, op.resource[:8], m[3])
		assert.Equal(t, op.route, m[6])
		if op.err != nil {
			failed++
			assert.ErrorIs(t, op.err, message.ErrInternal, "the injected hypervisor failure crosses the bus as internal")
			assert.Equal(t, "sent to", m[4])
			assert.Equal(t, label[op.owner], m[5])
		} else {
			assert.Equal(t, "handled by", m[4])
			assert.Equal(t, label[op.handler], m[5], "op %d: the printed node is the one that handled it", i)
		}
	}
	assert.Equal(t, 1, failed, "exactly the injected failure")
	for _, r := range []string{routeOwner, routeLocal, routePortal, routePortalLocal} {
		assert.Positive(t, routes[r], "the demo shows route %q", r)
	}

	// The takeover.
	k := rep.kill
	assert.Contains(t, k.before, k.victim)
	assert.NotContains(t, k.after, k.victim)
	assert.Len(t, k.after, 2)
	before, err := ringOf(k.before)
	require.NoError(t, err)
	after, err := ringOf(k.after)
	require.NoError(t, err)
	var victimHosts []string
	for _, op := range rep.ops {
		if op.msg == "AddHost" {
			if o, _ := before.Locate(op.resource); o == k.victim {
				victimHosts = append(victimHosts, op.resource)
			}
		}
	}
	require.NotEmpty(t, victimHosts, "the dead node owned hosts")
	var reported []string
	for _, h := range k.hosts {
		reported = append(reported, h.host)
		want, _ := after.Locate(h.host)
		assert.NotEqual(t, k.victim, want)
		assert.Equal(t, want, h.newOwner, "host %s: new owner", h.host)
		assert.Equal(t, want, h.managedBy, "host %s: reconnected by its new owner", h.host)
		assert.Equal(t, cloud.HostConnected, h.status)
		assert.GreaterOrEqual(t, h.takeovers, 1, "host %s: the takeover is counted", h.host)
		assert.Contains(t, text, "host  "+h.host[:8]+"…  was "+label[k.victim]+"'s → reconnected by node "+label[want]+",")
	}
	slices.Sort(victimHosts)
	slices.Sort(reported)
	assert.Equal(t, victimHosts, reported, "every host of the dead node is reported")
	require.NotEmpty(t, k.vms, "the dead node owned VMs")
	for _, vm := range k.vms {
		want, _ := after.Locate(vm)
		n := 0
		for _, op := range rep.ops {
			if op.resource == vm && op.prev == k.victim {
				n++
				assert.Equal(t, want, op.handler, "vm %s after the kill: handled by its new owner", vm)
			}
		}
		assert.Positive(t, n, "vm %s of the dead node was operated on after the kill", vm)
	}
	assert.Contains(t, text, label[k.victim]+" was evicted ")
	assert.Less(t, k.evictedAfter, 5*time.Second)
}
