package nodekit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// serving is the input of a healthy serving node of three, at now.
func serving(now time.Time) healthInput {
	members := []string{"a", "b", "c"}
	return healthInput{
		now: now, state: service.StateServing, transport: driver.TransportConnected,
		ring: members, store: service.StoreView{Live: members, Reads: 10, LastBeat: now.Add(-100 * time.Millisecond)},
		hb: heartbeat.DefaultConfig(), beatsSeen: true, beatEnded: now.Add(-90 * time.Millisecond),
	}
}

// check returns the check named in h.
func check(t *testing.T, h Health, name string) Check {
	t.Helper()
	for _, c := range h.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", name, h)
	return Check{}
}

// TestReadiness: each check of GET /readyz on its own, from a healthy
// node's input; every check is listed whether it passes or not.
func TestReadiness(t *testing.T) {
	now := time.Now()
	h := readiness(serving(now))
	assert.Equal(t, "ready", h.Status)
	assert.True(t, h.OK())
	var names []string
	for _, c := range h.Checks {
		names = append(names, c.Name)
		assert.True(t, c.OK, "%+v", c)
		assert.NotEmpty(t, c.Detail, c.Name)
	}
	assert.Equal(t, []string{"state", "lease", "store", "transport", "ring"}, names)

	for _, c := range []struct {
		name   string
		change func(in *healthInput)
		failed string // the one check that fails
		detail string
	}{
		{"starting", func(in *healthInput) { in.state = service.StateStarting }, "state", "starting"},
		{"leaving", func(in *healthInput) { in.state = service.StateLeaving }, "state", "leaving"},
		{"broker lost", func(in *healthInput) { in.transport = driver.TransportReconnecting }, "transport", "reconnecting"},
		{"one beat missed", func(in *healthInput) { in.store.LastBeat = now.Add(-1400 * time.Millisecond) }, "", ""},
		{"store cut", func(in *healthInput) {
			in.store.LastBeat, in.failing = now.Add(-1600*time.Millisecond), 3
		}, "store", "unreachable: last successful beat 1.6s ago (limit 1.5s), 3 failed in a row"},
		{"ring differs briefly", func(in *healthInput) {
			in.ring, in.ringDiffSince = []string{"a", "b"}, now.Add(-900*time.Millisecond)
		}, "", ""},
		{"ring differs", func(in *healthInput) {
			in.ring, in.ringDiffSince = []string{"a", "b"}, now.Add(-1100*time.Millisecond)
		}, "ring", "the ring holds a,b, the heartbeat store's live nodes are a,b,c (for 1.1s; limit 1s)"},
		{"no read yet", func(in *healthInput) { in.store.Reads = 0 }, "ring", "no read of the heartbeat store yet"},
	} {
		in := serving(now)
		c.change(&in)
		h := readiness(in)
		for _, k := range h.Checks {
			assert.Equal(t, k.Name != c.failed, k.OK, "%s: %+v", c.name, k)
		}
		if c.failed == "" {
			assert.Equal(t, "ready", h.Status, c.name)
			continue
		}
		assert.Equal(t, "not ready", h.Status, c.name)
		assert.Contains(t, check(t, h, c.failed).Detail, c.detail, c.name)
	}

	in := serving(now)
	in.store.LastBeat, in.leaseExpired = now.Add(-2100*time.Millisecond), true
	h = readiness(in)
	assert.False(t, check(t, h, "lease").OK)
	assert.Contains(t, check(t, h, "lease").Detail, "expired: last successful beat 2.1s ago, lease 2s")
	assert.False(t, check(t, h, "store").OK, "an expired lease means the store was unreachable first")

	in = serving(now)
	in.hb = heartbeat.Config{Interval: time.Second, EvictAfter: 3 * time.Second}.WithDefaults() // lease 1s
	in.store.LastBeat = now.Add(-1100 * time.Millisecond)
	assert.False(t, check(t, readiness(in), "store").OK, "the store's limit is at most the lease")

	in = healthInput{now: now, state: service.StateStarting, transport: driver.TransportConnected, hb: heartbeat.DefaultConfig()}
	h = readiness(in)
	assert.Equal(t, "not joined", check(t, h, "lease").Detail)
	assert.False(t, check(t, h, "store").OK)
}

// TestLiveness: GET /livez fails only when the heartbeat loop stopped
// making attempts while the node serves; failed beats keep it live.
func TestLiveness(t *testing.T) {
	now := time.Now()
	h := liveness(serving(now))
	assert.Equal(t, Health{Status: "live", Checks: []Check{{Name: "heartbeat_loop", OK: true, Detail: "last beat attempt ended 90ms ago"}}}, h)

	in := serving(now)
	in.store.LastBeat, in.beatEnded, in.failing = now.Add(-10*time.Second), now.Add(-200*time.Millisecond), 20
	in.leaseExpired = true
	h = liveness(in)
	assert.True(t, h.OK(), "the database is cut, the loop runs: live")
	assert.Contains(t, h.Checks[0].Detail, "20 failed in a row")

	in = serving(now)
	in.store.LastBeat, in.beatEnded = now.Add(-7*time.Second), now.Add(-7*time.Second)
	h = liveness(in)
	assert.Equal(t, "not live", h.Status)
	assert.Equal(t, "stuck: no beat attempt ended for 7s (limit 6s, twice -evict-after)", h.Checks[0].Detail)

	in = serving(now)
	in.beatEnded = time.Time{}
	assert.True(t, liveness(in).OK(), "before its first beat the join's registration counts")

	in = serving(now)
	in.state, in.beatEnded, in.store.LastBeat = service.StateStarting, now.Add(-time.Minute), now.Add(-time.Minute)
	assert.True(t, liveness(in).OK(), "a node that is joining again has no heartbeat loop to watch")

	in = serving(now)
	in.beatsSeen = false
	assert.Contains(t, liveness(in).Checks[0].Detail, "not observed")
}

// faultyStore is a heartbeat store whose beats and reads fail while cut.
type faultyStore struct {
	heartbeat.Store
	cut atomic.Bool
}

var errCut = errors.New("test: store cut")

func (s *faultyStore) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	if s.cut.Load() {
		return errCut
	}
	return s.Store.BeatBus(ctx, node, epoch, busUp)
}

func (s *faultyStore) List(ctx context.Context) ([]heartbeat.Record, error) {
	if s.cut.Load() {
		return nil, errCut
	}
	return s.Store.List(ctx)
}

// get serves GET path on a and decodes its Health.
func get(t *testing.T, a *Admin, path string) (int, Health) {
	t.Helper()
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var h Health
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &h), rec.Body.String())
	return rec.Code, h
}

// TestHealthRoutes: GET /livez and /readyz of a node on the in-memory
// bus and store, through a store cut and a broker partition.
func TestHealthRoutes(t *testing.T) {
	net, mem := membus.New(), memstore.New(memstore.Config{})
	id := message.NewUUID()
	tr := net.Transport(id)
	store := &faultyStore{Store: mem}
	beats := &beatStats{}
	hb := heartbeat.TestConfig()
	n, err := service.StartNode(t.Context(), service.Config{Node: id, Prefix: "health-test", Transport: tr, OwnTransport: true,
		Store: timedStore{Store: store, beats: beats}, Registry: message.NewRegistry(), Heartbeat: hb})
	require.NoError(t, err)
	defer n.Close()
	a := newAdmin(tr, "health-test", time.Now(), nil, beats)
	a.node = n

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	await := func(path string, code int) Health {
		t.Helper()
		var h Health
		var got int
		for got != code {
			got, h = get(t, a, path)
			select {
			case <-ctx.Done():
				t.Fatalf("GET %s: %d, want %d: %+v", path, got, code, h)
			case <-time.After(10 * time.Millisecond):
			}
		}
		return h
	}
	await("/readyz", http.StatusOK)
	code, h := get(t, a, "/livez")
	assert.Equal(t, http.StatusOK, code, "%+v", h)

	store.cut.Store(true)
	h = await("/readyz", http.StatusServiceUnavailable)
	assert.False(t, check(t, h, "store").OK, "%+v", h)
	assert.True(t, check(t, h, "transport").OK)
	code, h = get(t, a, "/livez")
	assert.Equal(t, http.StatusOK, code, "the loop runs while the store is cut: %+v", h)
	store.cut.Store(false)
	await("/readyz", http.StatusOK)

	net.Partition(id, true)
	h = await("/readyz", http.StatusServiceUnavailable)
	assert.Equal(t, Check{Name: "transport", OK: false, Detail: "reconnecting"}, check(t, h, "transport"))
	code, _ = get(t, a, "/livez")
	assert.Equal(t, http.StatusOK, code)
	net.Partition(id, false)
	await("/readyz", http.StatusOK)

	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, "serving\n", rec.Body.String(), "/healthz keeps its meaning")
}

// TestPprof: -pprof serves the index, named profiles in text and
// binary, and refuses a bad duration; without it, nothing.
func TestPprof(t *testing.T) {
	a := newAdmin(nil, "p", time.Now(), nil, nil)
	serve := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	assert.Equal(t, http.StatusNotFound, serve("/debug/pprof/").Code, "off by default")
	a.servePprof()
	a.HandleFunc("GET /debug/pprof/goroutine", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("mine")) })
	assert.Equal(t, "mine", serve("/debug/pprof/goroutine").Body.String(), "a program's more specific route wins, without a panic")

	rec := serve("/debug/pprof/")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `href="heap?debug=1"`)
	rec = serve("/debug/pprof/heap?debug=1")
	assert.Contains(t, rec.Body.String(), "heap profile:")
	rec = serve("/debug/pprof/allocs")
	assert.Equal(t, "application/octet-stream", rec.Header().Get("Content-Type"))
	assert.NotEmpty(t, rec.Body.Bytes())
	assert.Equal(t, http.StatusNotFound, serve("/debug/pprof/nope").Code)
	assert.Equal(t, http.StatusBadRequest, serve("/debug/pprof/profile?seconds=0").Code)
	assert.Equal(t, http.StatusNotFound, serve("/debug/pprof/cmdline").Code, "the command line holds passwords")
	rec = serve("/debug/pprof/profile?seconds=1")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.NotEmpty(t, rec.Body.Bytes())
}
