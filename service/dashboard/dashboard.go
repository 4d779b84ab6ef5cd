// Package dashboard serves a node's live dashboard: the members of the
// cluster with their state, epoch, heartbeat age, registration time and
// share of the key space; whether every node's ring copy agrees; the
// messages each node handles per second and, from the program, the
// resources each owns and its own figures; the recent membership
// changes, lease expiries and the program's counted events (takeovers,
// fence refusals); and an owner lookup that asks every node. One HTML
// page with its CSS and script embedded in the binary (no CDN), updated
// live by server-sent events, and the same data as JSON for scripts:
//
//	GET /                  the page (JSON when the request accepts application/json)
//	GET /dashboard.json    the snapshot as JSON (see [Snapshot])
//	GET /dashboard/events  the snapshot as server-sent events ("snapshot"), one per Interval
//	GET /dashboard/owner?key=K  who owns K, by every node's ring (see [OwnerAnswer])
//
// A node kit node (package nodekit) serves it on its admin listener;
// mount it on any mux with [Dashboard.Register].
//
// The page asks every member for its ring over the bus (one small
// request per member) only while someone looks: each snapshot is built
// at most once per Interval, whoever asks.
package dashboard

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/svcx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

//go:embed page.html
var page []byte

// Config configures a [Dashboard]; Node is required, the rest optional.
type Config struct {
	// Node is the node whose view the dashboard shows.
	Node *service.Node
	// Interval is the period of the live updates and of the checks for
	// membership changes. Default: the node's heartbeat interval, at
	// least 250 ms.
	Interval time.Duration
	// Resources counts the program's resources by kind ("vms"), then by
	// the node that owns them (node.Owner says which); shown per node. It
	// is called at most once per 2 s, with a deadline.
	Resources func(ctx context.Context, node *service.Node) (map[string]map[string]int, error)
	// Gauges are the program's figures that go up and down ("jobs in
	// flight"); shown as they are. Called with Resources: at most once
	// per 2 s, with a deadline.
	Gauges func(ctx context.Context) (map[string]int64, error)
	// Counters are the program's counts that only rise ("host
	// takeovers", "fence refusals"): shown, and each rise is listed
	// among the recent events. Called once per Interval; it must not
	// block.
	Counters func() map[string]uint64
	// Logger logs what failed. Default: slog.Default().
	Logger *slog.Logger
}

// Dashboard serves a node's dashboard. Make one with [New]; it watches
// the node until the node stops or [Dashboard.Close].
type Dashboard struct {
	cfg  Config
	node *service.Node
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu       sync.Mutex
	events   []Event
	counters map[string]uint64
	last     *Snapshot // the last snapshot built
	building *building // the snapshot being taken, if one is
	rates    map[string]rateSample
	res      map[string]map[string]int
	gauges   map[string]int64
	resAt    time.Time
	resErr   []string
}

// rateSample is a node's handled count when last sampled.
type rateSample struct {
	handled uint64
	at      time.Time
}

// builds counts the snapshots taken, for tests.
var builds atomic.Uint64

// maxEvents is how many recent events a dashboard keeps.
const maxEvents = 50

// ErrNoNode is returned by [New] without Config.Node.
var ErrNoNode = errors.New("dashboard: Config.Node is required")

// New returns the dashboard of cfg.Node and starts watching the node's
// membership, lease and counters for the recent events; it stops when
// the node stops or at Close.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Node == nil {
		return nil, ErrNoNode
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("dashboard: Interval %s is negative; give a positive period or 0 for the heartbeat interval", cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = max(cfg.Node.Heartbeat().Interval, 250*time.Millisecond)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dashboard{cfg: cfg, node: cfg.Node, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{}), rates: map[string]rateSample{}}
	go d.watch()
	return d, nil
}

// Close stops the watch and ends the live updates under way. It is
// idempotent and returns once the watch stopped. A live update's
// connection never goes idle, so http.Server.Shutdown waits for it: give
// Close to the server's RegisterOnShutdown.
func (d *Dashboard) Close() error {
	d.once.Do(func() { close(d.stop) })
	<-d.done
	return nil
}

// Register adds the dashboard's routes to mux: GET /, GET
// /dashboard.json, GET /dashboard/events and GET /dashboard/owner. On a
// mux, more specific patterns (GET /healthz) keep their handlers.
func (d *Dashboard) Register(mux interface {
	Handle(pattern string, h http.Handler)
}) {
	mux.Handle("GET /{$}", http.HandlerFunc(d.servePage))
	mux.Handle("GET /dashboard.json", http.HandlerFunc(d.serveJSON))
	mux.Handle("GET /dashboard/events", http.HandlerFunc(d.serveEvents))
	mux.Handle("GET /dashboard/owner", http.HandlerFunc(d.serveOwner))
}

// Handler returns a handler of the dashboard's routes alone (404 for
// any other path).
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	d.Register(mux)
	return mux
}

// Snapshot is the dashboard's data: GET /dashboard.json and each
// server-sent event.
type Snapshot struct {
	// Node is the node that answered (this dashboard's).
	Node string `json:"node"`
	// Time is when the snapshot was taken.
	Time time.Time `json:"time"`
	// State is this node's state.
	State string `json:"state"`
	// HeartbeatMS is the heartbeat interval.
	HeartbeatMS int64 `json:"heartbeat_interval_ms"`
	// LeaseMS is the lease: a node whose beat is older serves no more.
	LeaseMS int64 `json:"lease_ms"`
	// EvictAfterMS is the eviction threshold.
	EvictAfterMS int64 `json:"evict_after_ms"`
	// Fingerprint is this node's ring's.
	Fingerprint string `json:"fingerprint"`
	// Agreed reports that every member answered with this node's
	// fingerprint and that this ring holds exactly the heartbeat store's
	// live nodes.
	Agreed bool `json:"agreed"`
	// Disagreement says what differs when Agreed is false.
	Disagreement string `json:"disagreement,omitempty"`
	// Members are the nodes in this node's ring or in the heartbeat
	// store, sorted.
	Members []Member `json:"members"`
	// Gauges are the program's figures (Config.Gauges).
	Gauges map[string]int64 `json:"gauges,omitempty"`
	// Counters are the program's counts (Config.Counters).
	Counters map[string]uint64 `json:"counters,omitempty"`
	// Events are the recent events, newest first.
	Events []Event `json:"events"`
	// Errors lists what the snapshot could not read.
	Errors []string `json:"errors,omitempty"`
}

// Member is one node as the dashboard's node sees it.
type Member struct {
	// Node is its UUID.
	Node string `json:"node"`
	// Self marks the dashboard's own node.
	Self bool `json:"self,omitempty"`
	// Health is "healthy" (in the ring, beating, answering with this
	// ring's fingerprint), "unhealthy" (its beat is older than the
	// lease), "disagrees" (its ring differs), "unreachable" (it did not
	// answer over the bus) or "not in ring" (in the heartbeat store
	// only).
	Health string `json:"health"`
	// State is its own service state, as it answered.
	State string `json:"state,omitempty"`
	// Epoch is its life in the heartbeat store.
	Epoch int64 `json:"epoch,omitempty"`
	// RegisteredAt is the store's time of that registration.
	RegisteredAt time.Time `json:"registered_at,omitzero"`
	// HeartbeatAgeMS is the age of its last beat when this node last
	// read the store; -1 without a record.
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
	// Share is its share of the key space by this node's ring (0 to 1).
	Share float64 `json:"share"`
	// Fingerprint is its ring copy's, as it answered.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Handled counts the messages its handlers ran in its current life.
	Handled uint64 `json:"handled"`
	// PerSecond is the rate of Handled since the previous snapshot.
	PerSecond float64 `json:"per_second"`
	// Resources counts the program's resources it owns, by kind.
	Resources map[string]int `json:"resources,omitempty"`
	// Error is why it did not answer.
	Error string `json:"error,omitempty"`
}

// Event is a recent change the dashboard saw.
type Event struct {
	// Time is when the dashboard saw it (within an Interval of when it
	// happened).
	Time time.Time `json:"time"`
	// Kind is "joined", "left" (it said goodbye), "evicted" (it left
	// without a goodbye this node heard: this node or a peer evicted it),
	// "lease expired", "lease renewed", "state" (this node's
	// state changed) or "counter" (a Config.Counters count rose).
	Kind string `json:"kind"`
	// Node is the node concerned, if any.
	Node string `json:"node,omitempty"`
	// Detail says more: the new state, the counter and its rise.
	Detail string `json:"detail,omitempty"`
}

// watch records the recent events once per Interval until the node
// stops or Close.
func (d *Dashboard) watch() {
	defer close(d.done)
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	members := d.node.Members()
	lease, state := d.node.LeaseExpired(), d.node.State()
	c0 := d.readCounters()
	d.mu.Lock()
	d.counters = c0
	d.mu.Unlock()
	for {
		select {
		case <-d.stop:
			return
		case <-d.node.Done():
			d.record(Event{Kind: "state", Node: d.node.UUID(), Detail: d.node.State().String()})
			return
		case <-t.C:
		}
		now := d.node.Members()
		for _, m := range now {
			if !slices.Contains(members, m) {
				d.record(Event{Kind: "joined", Node: m})
			}
		}
		for _, m := range members {
			if !slices.Contains(now, m) {
				kind := "evicted"
				if svcx.SaidGoodbye(d.node, m) {
					kind = "left"
				}
				d.record(Event{Kind: kind, Node: m})
			}
		}
		members = now
		if l := d.node.LeaseExpired(); l != lease {
			lease = l
			kind := "lease renewed"
			if l {
				kind = "lease expired"
			}
			d.record(Event{Kind: kind, Node: d.node.UUID()})
		}
		if s := d.node.State(); s != state {
			state = s
			d.record(Event{Kind: "state", Node: d.node.UUID(), Detail: s.String()})
		}
		c := d.readCounters()
		d.mu.Lock()
		prev := d.counters
		d.counters = c
		d.mu.Unlock()
		for _, k := range slices.Sorted(maps.Keys(c)) {
			if c[k] > prev[k] {
				d.record(Event{Kind: "counter", Detail: fmt.Sprintf("%s +%d (%d)", k, c[k]-prev[k], c[k])})
			}
		}
	}
}

// readCounters calls Config.Counters, if set.
func (d *Dashboard) readCounters() map[string]uint64 {
	if d.cfg.Counters == nil {
		return nil
	}
	return maps.Clone(d.cfg.Counters())
}

// record adds e, stamped now, to the recent events.
func (d *Dashboard) record(e Event) {
	e.Time = time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, e)
	if len(d.events) > maxEvents {
		d.events = slices.Delete(d.events, 0, len(d.events)-maxEvents)
	}
}

// Snapshot returns the dashboard's data now: the last snapshot if it is
// younger than half an Interval, else a new one, asking every member
// for its ring within at most an Interval (2 s at most). Viewers asking
// while a snapshot is being taken share it: a crowd of viewers costs the
// cluster one round of ring queries per half Interval. ctx's values
// (a trace) go with the queries; its end does not cut them short for
// the other viewers.
func (d *Dashboard) Snapshot(ctx context.Context) *Snapshot {
	d.mu.Lock()
	if last := d.last; last != nil && time.Since(last.Time) < d.cfg.Interval/2 {
		d.mu.Unlock()
		return last
	}
	if b := d.building; b != nil {
		d.mu.Unlock()
		<-b.done // at most an Interval, 2 s
		return b.snap
	}
	b := &building{done: make(chan struct{})}
	d.building = b
	d.mu.Unlock()
	b.snap = d.build(context.WithoutCancel(ctx))
	d.mu.Lock()
	d.last, d.building = b.snap, nil
	d.mu.Unlock()
	close(b.done)
	return b.snap
}

// building is a snapshot being taken: snap is set when done closes.
type building struct {
	done chan struct{}
	snap *Snapshot
}

// build takes a snapshot.
func (d *Dashboard) build(ctx context.Context) *Snapshot {
	builds.Add(1)
	n := d.node
	hb := n.Heartbeat()
	ctx, cancel := context.WithTimeout(ctx, min(d.cfg.Interval, 2*time.Second))
	defer cancel()
	s := &Snapshot{Node: n.UUID(), Time: time.Now(), State: n.State().String(), HeartbeatMS: hb.Interval.Milliseconds(),
		LeaseMS: hb.Lease.Milliseconds(), EvictAfterMS: hb.EvictAfter.Milliseconds(), Fingerprint: n.Fingerprint().String(), Members: []Member{}}
	views := n.Rings(ctx, "")
	records := n.Heartbeats()
	shares := n.Shares()
	res := d.resources(ctx)
	byNode := map[string]*Member{}
	member := func(id string) *Member {
		if m, ok := byNode[id]; ok {
			return m
		}
		m := &Member{Node: id, Self: id == n.UUID(), HeartbeatAgeMS: -1, Share: shares[id]}
		byNode[id] = m
		return m
	}
	var why []string
	for _, v := range views {
		m := member(v.Node)
		m.Health = "healthy"
		if v.Err != nil {
			m.Health, m.Error = "unreachable", v.Err.Error()
			why = append(why, fmt.Sprintf("node %s did not answer", short(v.Node)))
			continue
		}
		m.State, m.Fingerprint, m.Handled = v.State, v.Fingerprint, v.Handled
		if v.Fingerprint != s.Fingerprint {
			m.Health = "disagrees"
			why = append(why, fmt.Sprintf("node %s's ring differs", short(v.Node)))
		}
	}
	// Records without a ring member: joined the store, not yet this
	// ring. (A member without a record in this node's last read of the
	// store joined since, or was evicted and leaves this ring within an
	// interval: its age shows -1.)
	for _, r := range records {
		m := member(r.Node)
		m.Epoch, m.RegisteredAt, m.HeartbeatAgeMS = r.Epoch, r.RegisteredAt().UTC(), r.Age.Milliseconds()
		switch {
		case m.Health == "":
			m.Health = "not in ring"
			why = append(why, fmt.Sprintf("node %s is in the heartbeat store, not in this ring", short(r.Node)))
		case m.Health == "healthy" && r.Age > hb.Lease:
			m.Health = "unhealthy"
		}
	}
	d.mu.Lock()
	for id, m := range byNode {
		if prev, ok := d.rates[id]; ok && m.Handled >= prev.handled && s.Time.After(prev.at) {
			m.PerSecond = float64(m.Handled-prev.handled) / s.Time.Sub(prev.at).Seconds()
		}
		if m.Error == "" {
			d.rates[id] = rateSample{handled: m.Handled, at: s.Time}
		}
		for kind, owners := range res {
			if c, ok := owners[id]; ok {
				if m.Resources == nil {
					m.Resources = map[string]int{}
				}
				m.Resources[kind] = c
			}
		}
	}
	for id := range d.rates {
		if _, ok := byNode[id]; !ok {
			delete(d.rates, id)
		}
	}
	s.Errors = append(s.Errors, d.resErr...)
	s.Gauges = maps.Clone(d.gauges)
	s.Counters = maps.Clone(d.counters)
	s.Events = slices.Clone(d.events)
	d.mu.Unlock()
	slices.Reverse(s.Events)
	if s.Events == nil {
		s.Events = []Event{}
	}
	for _, id := range slices.Sorted(maps.Keys(byNode)) {
		s.Members = append(s.Members, *byNode[id])
	}
	slices.Sort(why)
	s.Agreed = len(why) == 0 && len(views) > 0
	if !s.Agreed {
		s.Disagreement = strings.Join(why, "; ")
		if len(views) == 0 {
			s.Disagreement = "this node is " + s.State
		}
	}
	return s
}

// resources returns Config.Resources' counts, and reads Config.Gauges,
// at most every 2 s.
func (d *Dashboard) resources(ctx context.Context) map[string]map[string]int {
	d.mu.Lock()
	if time.Since(d.resAt) < 2*time.Second {
		defer d.mu.Unlock()
		return d.res
	}
	d.resAt = time.Now()
	d.mu.Unlock()
	var (
		res    map[string]map[string]int
		gauges map[string]int64
		errs   []string
		err    error
	)
	if d.cfg.Resources != nil {
		if res, err = d.cfg.Resources(ctx, d.node); err != nil {
			errs = append(errs, "resources: "+err.Error())
			d.log.Debug("dashboard: count the resources", "err", err)
		}
	}
	if d.cfg.Gauges != nil {
		if gauges, err = d.cfg.Gauges(ctx); err != nil {
			errs = append(errs, "gauges: "+err.Error())
			d.log.Debug("dashboard: read the gauges", "err", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resErr = errs
	if res != nil || d.cfg.Resources == nil {
		d.res = res
	}
	if gauges != nil || d.cfg.Gauges == nil {
		d.gauges = gauges
	}
	return d.res
}

// short is a node's first 8 characters, as the page shows it.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func (d *Dashboard) servePage(w http.ResponseWriter, r *http.Request) {
	if wantsJSON(r) {
		d.serveJSON(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(page)
}

// wantsJSON reports whether r prefers JSON to HTML.
func wantsJSON(r *http.Request) bool {
	a := r.Header.Get("Accept")
	j, h := strings.Index(a, "application/json"), strings.Index(a, "text/html")
	return j >= 0 && (h < 0 || j < h)
}

func (d *Dashboard) serveJSON(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.Snapshot(r.Context()))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// serveEvents streams a snapshot per Interval as server-sent events
// until the client goes, the node stops or the dashboard closes.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		data, err := json.Marshal(d.Snapshot(r.Context()))
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.stop:
			return
		case <-t.C:
		}
	}
}

// OwnerAnswer is GET /dashboard/owner's answer.
type OwnerAnswer struct {
	// Key is the key asked about, in canonical form.
	Key string `json:"key"`
	// Owner is its owner by this node's ring.
	Owner string `json:"owner"`
	// Agreed reports that every member answered with Owner.
	Agreed bool `json:"agreed"`
	// Answers are each member's answer, sorted by node.
	Answers []OwnerAnswerOf `json:"answers"`
}

// OwnerAnswerOf is one member's answer to an owner lookup.
type OwnerAnswerOf struct {
	// Node is the node asked.
	Node string `json:"node"`
	// Owner is the owner by its ring; "" if it did not answer.
	Owner string `json:"owner,omitempty"`
	// Error is why it did not answer.
	Error string `json:"error,omitempty"`
}

// maxKey bounds a looked-up key, as the wire bounds a resource UUID.
const maxKey = 255

func (d *Dashboard) serveOwner(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" || len(key) > maxKey {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("give the key to look up as ?key=, 1 to %d bytes", maxKey)})
		return
	}
	ans, err := d.Owner(r.Context(), key)
	switch {
	case errors.Is(err, ErrBadKey):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

// ErrBadKey is returned by [Dashboard.Owner] for a key that is not a
// resource UUID: the ring hashes a resource's canonical UUID.
var ErrBadKey = errors.New("dashboard: the key is not a resource UUID; give one such as 6ba7b810-9dad-11d1-80b4-00c04fd430c8")

// Owner asks every member which node owns key, a resource UUID, by its
// ring, within ctx and at most 2 s. It returns an error matching
// [ErrBadKey] if key is not a UUID.
func (d *Dashboard) Owner(ctx context.Context, key string) (*OwnerAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	id, err := message.NormalizeUUID(key)
	if err != nil {
		return nil, fmt.Errorf("%w (%q: %v)", ErrBadKey, key, err)
	}
	key = id
	owner, err := d.node.Owner(key)
	if err != nil {
		return nil, fmt.Errorf("dashboard: this node cannot locate %q: %w", key, err)
	}
	ans := &OwnerAnswer{Key: key, Owner: owner, Agreed: true, Answers: []OwnerAnswerOf{}}
	for _, v := range d.node.Rings(ctx, key) {
		a := OwnerAnswerOf{Node: v.Node, Owner: v.Owner}
		if v.Err != nil {
			a.Error = v.Err.Error()
		}
		if a.Owner != owner {
			ans.Agreed = false
		}
		ans.Answers = append(ans.Answers, a)
	}
	return ans, nil
}
