package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// healthPoll is how often TestHealthUnderFaults probes the endpoints.
const healthPoll = 50 * time.Millisecond

// probe is one round of GET /healthz, /livez and /readyz on a node.
type probe struct {
	at, done               time.Time // when the round began and ended
	healthz, livez, readyz int       // status codes; 0: no answer
	ready                  nodekit.Health
}

// probeNode fetches the three endpoints of c once.
func probeNode(c *child) probe {
	p := probe{at: time.Now()}
	get := func(path string) (int, []byte) {
		resp, err := httpClient.Get(c.admin + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	p.healthz, _ = get("/healthz")
	p.livez, _ = get("/livez")
	var body []byte
	p.readyz, body = get("/readyz")
	_ = json.Unmarshal(body, &p.ready)
	p.done = time.Now()
	return p
}

// failing returns the names of the failed checks of h.
func failing(h nodekit.Health) string {
	var names []string
	for _, c := range h.Checks {
		if !c.OK {
			names = append(names, c.Name+" ("+c.Detail+")")
		}
	}
	return strings.Join(names, ", ")
}

// probeUntil probes c every healthPoll until cond holds of a probe, and
// returns every probe made; it fails the test at ctx's end.
func probeUntil(t *testing.T, ctx context.Context, c *child, what string, cond func(p probe) bool) []probe {
	t.Helper()
	var seen []probe
	for {
		p := probeNode(c)
		seen = append(seen, p)
		if cond(p) {
			return seen
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %s: %s: not within the test's time; last probe: healthz %d, livez %d, readyz %d %s",
				c.label, what, p.healthz, p.livez, p.readyz, failing(p.ready))
		case <-time.After(healthPoll):
		}
	}
}

// holdProbes probes c every healthPoll for d and returns the probes.
func holdProbes(c *child, d time.Duration) []probe {
	var seen []probe
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(healthPoll) {
		seen = append(seen, probeNode(c))
	}
	return seen
}

// assertAll asserts that every probe's field is want.
func assertAll(t *testing.T, probes []probe, field string, want int, why string) {
	t.Helper()
	for _, p := range probes {
		got := map[string]int{"healthz": p.healthz, "livez": p.livez, "readyz": p.readyz}[field]
		if got != want {
			t.Errorf("%s: GET /%s answered %d at %s, want %d", why, field, got, p.at.Format("15:04:05.000"), want)
			return
		}
	}
}

// TestHealthUnderFaults runs three `refnode serve` processes on RabbitMQ
// and PostgreSQL with the default heartbeat timing (beat 500 ms, lease
// 2 s, evict 3 s) and -pprof, and probes node A's GET /healthz, /livez and
// /readyz every 50 ms through three faults. Its database link cut
// (reset), then blackholed: /readyz answers 503 (store) within the
// lease, /livez stays 200 (the heartbeat loop runs, its beats fail) and
// /healthz 200 (the node still serves); healed, /readyz is 200 again.
// Its broker link cut: /readyz 503 (transport), /livez 200; healed,
// /readyz 200 again. It prints the times. Each fault is healed half a
// second after /readyz dropped, before the peers could evict node A.
func TestHealthUnderFaults(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the health test runs processes for about 20 seconds", FullSpeed: true, Timeout: 90 * time.Second})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "health", Flags: []string{"-pprof", "-test-pprof"}})
	fc.Start(t, ctx)
	a := fc.Node(0).Proc()
	t.Logf("3 nodes serving and agreeing %s after the test began: %s", since(testStart), fc.describe())
	hb := heartbeat.DefaultConfig()

	p := probeUntil(t, ctx, a, "ready", func(p probe) bool { return p.readyz == http.StatusOK })
	last := p[len(p)-1]
	assert.Equal(t, http.StatusOK, last.livez)
	assert.Equal(t, "ready", last.ready.Status)
	assert.Len(t, last.ready.Checks, 5, "%+v", last.ready)

	// The profiles: the kit's under /debug/pprof/, refnode's text
	// goroutine profile beside them.
	for path, want := range map[string]string{"/debug/pprof/heap?debug=1": "heap profile:", "/debug/pprof/goroutine": "goroutine profile: total"} {
		resp, err := httpClient.Get(a.admin + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.True(t, strings.HasPrefix(string(body), want), "GET %s: %.60q", path, body)
	}

	var report []string
	for _, f := range []struct {
		name  string
		link  *proxy.Proxy
		stall bool   // blackhole the link (Stall) rather than reset it (Cut)
		check string // the readiness check the fault fails
	}{
		{"database link cut", fc.Node(0).DB, false, "store"},
		{"database link blackholed", fc.Node(0).DB, true, "store"},
		{"broker link cut", fc.Node(0).Bus, false, "transport"},
	} {
		link := f.link
		cut := time.Now()
		if f.stall {
			link.Stall()
		} else {
			link.Cut()
		}
		during := probeUntil(t, ctx, a, "/readyz 503 after the "+f.name, func(p probe) bool { return p.readyz == http.StatusServiceUnavailable })
		dropped := during[len(during)-1]
		drop := dropped.done.Sub(cut) // an upper bound: the probe that saw it ended then
		var failed []string
		for _, c := range dropped.ready.Checks {
			if !c.OK {
				failed = append(failed, c.Name)
			}
		}
		assert.Contains(t, failed, f.check, "%s: %s", f.name, failing(dropped.ready))
		assert.Equal(t, "not ready", dropped.ready.Status)
		during = append(during, holdProbes(a, 500*time.Millisecond)...)
		link.Heal()
		healed := time.Now()
		after := probeUntil(t, ctx, a, "/readyz 200 after the "+f.name+" healed", func(p probe) bool { return p.readyz == http.StatusOK && p.livez == http.StatusOK })
		recovered := after[len(after)-1].done.Sub(healed)

		assertAll(t, during, "livez", http.StatusOK, "node A while its "+f.name)
		assertAll(t, after, "livez", http.StatusOK, "node A after its "+f.name+" healed")
		assertAll(t, during, "healthz", http.StatusOK, "node A still serves while its "+f.name+" (/healthz: serving)")
		if f.check == "store" {
			assert.Less(t, drop, hb.Lease+healthPoll, "/readyz drops within the lease (%s) and a poll", hb.Lease)
		}
		line := fmt.Sprintf("%s: /readyz 503 after %s (%s), /livez and /healthz 200 throughout (%d probes); healed: /readyz 200 after %s",
			f.name, drop.Round(time.Millisecond), failing(dropped.ready), len(during), recovered.Round(time.Millisecond))
		t.Log(line)
		report = append(report, line)
	}
	require.NoError(t, poll(ctx, fc.Agreed), "the rings agree after the faults")
	for _, n := range fc.Nodes() {
		p := probeNode(n.Proc())
		assert.Equal(t, http.StatusOK, p.readyz, "node %s ready at the end: %s", n.Label(), failing(p.ready))
	}
	t.Logf("TestHealthUnderFaults (default timing: beat %s, lease %s, evict %s; probes every %s), %s in all:\n  %s",
		hb.Interval, hb.Lease, hb.EvictAfter, healthPoll, since(testStart), strings.Join(report, "\n  "))
}
