package nodekit

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/service"
)

// Admin is a node's admin HTTP handler: GET /healthz (200 "serving"
// while the node serves, 503 with its state otherwise), GET /livez (200
// while the node's loops are not stuck: see [Admin.Liveness]), GET
// /readyz (200 while the node serves with its store, broker and ring in
// order: see [Admin.Readiness]), GET /status (the node's state as JSON:
// see [Status]), on a node opened by [Open] the live dashboard at GET /
// (package dashboard, with GET /dashboard.json, /dashboard/events and
// /dashboard/owner), and with -pprof (Settings.Pprof) the profiles under
// /debug/pprof/. A program adds its own
// routes with [Admin.Handle] and its own top-level /status sections with
// [Admin.Section], before [Node.Run]. It is safe for concurrent use once
// serving.
type Admin struct {
	mux    *http.ServeMux
	node   *service.Node
	tr     driver.Transport
	prefix string
	start  time.Time
	counts *counters
	db     *Database  // nil: no database section
	beats  *beatStats // with db

	mu            sync.Mutex
	sections      map[string]func() any
	ringDiff      string    // the ring and the store's live nodes when they last differed; "": they agree
	ringDiffSince time.Time // when GET /readyz first saw ringDiff
}

// Status is the JSON of GET /status; a program's sections
// ([Admin.Section]) are added beside these fields.
type Status struct {
	// Node is the node's UUID.
	Node string `json:"node"`
	// Epoch is its registration epoch in the heartbeat store.
	Epoch int64 `json:"epoch"`
	// State is service.State: starting, serving, leaving, …
	State string `json:"state"`
	// LeaseExpired reports that the node serves but could not write its
	// heartbeat for longer than the lease: it refuses messages about
	// resources (not_owner) until a beat goes through, or its peers
	// evict it (service.Node.LeaseExpired).
	LeaseExpired bool `json:"lease_expired"`
	// Fenced is LeaseExpired under its old name, kept for the scripts
	// that read it.
	//
	// Deprecated: read lease_expired; fenced will be removed in the next
	// release.
	Fenced bool `json:"fenced"`
	// Transport is the broker connection: connected, reconnecting, closed.
	Transport string `json:"transport"`
	// ConnectionsLost counts the broker connections lost since the node
	// started.
	ConnectionsLost uint64 `json:"connections_lost"`
	// Broker is the masked URL of the broker node the node is connected
	// to now (one of -bus's list), "" while it reconnects.
	Broker string `json:"broker,omitempty"`
	// PublishesRefused counts the publishes the broker refused (nack)
	// and the transport sent again, as while a quorum queue elects a
	// leader after a broker node was lost.
	PublishesRefused uint64 `json:"publishes_refused"`
	// Bus is the bus's counters (bus.Stats).
	Bus BusStatus `json:"bus"`
	// Prefix is the queue prefix.
	Prefix string `json:"prefix"`
	// Uptime is the time since the node was opened.
	Uptime string `json:"uptime"`
	// Ring is the node's ring copy.
	Ring RingStatus `json:"ring"`
	// Counters count the messages the node handled.
	Counters CounterStatus `json:"counters"`
	// Database is the node's connection pools and its beats' durations.
	Database *DatabaseStatus `json:"database,omitempty"`
}

// RingStatus is a node's ring copy.
type RingStatus struct {
	// Members are the node UUIDs in the ring, sorted.
	Members []string `json:"members"`
	// Fingerprint is ring.Fingerprint: equal on nodes that agree on every owner.
	Fingerprint string `json:"fingerprint"`
}

// CounterStatus is what the node handled since it started.
type CounterStatus struct {
	// PortalForwarded counts the API messages this node's api.portal
	// took from the shared queue and forwarded.
	PortalForwarded uint64 `json:"portal_forwarded"`
	// PortalFailed counts those whose reply was an error.
	PortalFailed uint64 `json:"portal_failed"`
	// Handled counts the messages each service of this node ran, by
	// service name.
	Handled map[string]uint64 `json:"handled"`
	// HandleErrors counts those that ended with an error.
	HandleErrors map[string]uint64 `json:"handle_errors"`
}

// BusStatus is bus.Stats: messages refused, late, released and lost.
type BusStatus struct {
	Rejected     uint64 `json:"rejected"`      // refused as undecodable, oversize or unknown
	Late         uint64 `json:"late"`          // arrived after their deadline
	Released     uint64 `json:"released"`      // given back to the broker
	Lost         uint64 `json:"lost"`          // could not be given back
	LateReplies  uint64 `json:"late_replies"`  // replies that came after their call ended
	Failed       uint64 `json:"failed"`        // one-way messages ended by an error that says they are wrong
	Retried      uint64 `json:"retried"`       // one-way messages given back for another attempt
	DeadLettered uint64 `json:"dead_lettered"` // one-way messages moved to the dead-letter queue
}

// NewAdmin returns the admin handler of node n, not opened by [Open] (a
// test's, say), whose broker connection is tr and queue prefix prefix:
// without a database section, and counting the messages it observes
// ([Admin.Observe]).
func NewAdmin(n *service.Node, tr driver.Transport, prefix string) *Admin {
	a := newAdmin(tr, prefix, time.Now(), nil, nil)
	a.node = n
	return a
}

// newAdmin returns an Admin whose node is set later, before it serves.
func newAdmin(tr driver.Transport, prefix string, start time.Time, db *Database, beats *beatStats) *Admin {
	a := &Admin{mux: http.NewServeMux(), tr: tr, prefix: prefix, start: start, counts: newCounters(), db: db, beats: beats, sections: make(map[string]func() any)}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		st := a.node.State()
		if st != service.StateServing {
			http.Error(w, st.String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, st)
	})
	a.mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { serveHealth(w, a.Liveness()) })
	a.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { serveHealth(w, a.Readiness()) })
	a.mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.statusJSON())
	})
	return a
}

// Observe counts a message the node handled, for the counters of GET
// /status: a node opened by [Open] has its Admin observe its bus; give
// an Admin made by [NewAdmin] to the node's bus.Observer.
func (a *Admin) Observe(o bus.Observation) { a.counts.Observe(o) }

// ServeHTTP serves the admin routes.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Handle adds a route, as http.ServeMux.Handle does.
func (a *Admin) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// HandleFunc adds a route, as http.ServeMux.HandleFunc does.
func (a *Admin) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	a.mux.HandleFunc(pattern, h)
}

// Section adds a top-level field name to GET /status, whose value fn
// returns at each request (encoded as JSON). A name of [Status] is
// replaced.
func (a *Admin) Section(name string, fn func() any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sections[name] = fn
}

// Status returns the node's status as GET /status shows it, without the
// program's sections.
func (a *Admin) Status() Status {
	n, c := a.node, a.counts
	c.mu.Lock()
	handled, failed := maps.Clone(c.handled), maps.Clone(c.failed)
	c.mu.Unlock()
	var bs bus.Stats
	if b := n.Bus(); b != nil {
		bs = b.Stats()
	}
	var lost, refused uint64
	var broker string
	if l, ok := a.tr.(interface{ ConnectionsLost() uint64 }); ok {
		lost = l.ConnectionsLost()
	}
	if r, ok := a.tr.(interface{ PublishesRefused() uint64 }); ok {
		refused = r.PublishesRefused()
	}
	if b, ok := a.tr.(interface{ Broker() string }); ok {
		broker = b.Broker()
	}
	st := Status{
		Node:             n.UUID(),
		Epoch:            n.Epoch(),
		State:            n.State().String(),
		LeaseExpired:     n.LeaseExpired(),
		Fenced:           n.LeaseExpired(),
		Transport:        a.tr.State().String(),
		ConnectionsLost:  lost,
		Broker:           broker,
		PublishesRefused: refused,
		Bus: BusStatus{Rejected: bs.Rejected, Late: bs.Late, Released: bs.Released, Lost: bs.Lost, LateReplies: bs.LateReplies,
			Failed: bs.Failed, Retried: bs.Retried, DeadLettered: bs.DeadLettered},
		Prefix: a.prefix,
		Uptime: time.Since(a.start).Round(time.Millisecond).String(),
		Ring:   RingStatus{Members: n.Members(), Fingerprint: n.Fingerprint().String()},
		Counters: CounterStatus{
			PortalForwarded: c.portal.Load(), PortalFailed: c.portalFailed.Load(),
			Handled: handled, HandleErrors: failed,
		},
	}
	if a.db != nil {
		ds := a.dbStatus()
		st.Database = &ds
	}
	return st
}

// dbStatus is the database section; a.db is set.
func (a *Admin) dbStatus() DatabaseStatus {
	return DatabaseStatus{Heartbeat: poolOf(a.db.HeartbeatDB()), Records: poolOf(a.db.DB()), Beats: a.beats.status(time.Now()), IdleTimeout: a.db.Shown}
}

// statusJSON is Status with the program's sections added.
func (a *Admin) statusJSON() map[string]any {
	b, _ := json.Marshal(a.Status())
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	a.mu.Lock()
	sections := maps.Clone(a.sections)
	a.mu.Unlock()
	for name, fn := range sections {
		m[name] = fn()
	}
	return m
}

// counters count, through the node's bus.Observer, the messages this
// node handled: API messages its api.portal forwarded, and messages each
// of its services ran. Observe is called on the receive path from many
// goroutines; it only adds under a short lock.
type counters struct {
	portal, portalFailed atomic.Uint64

	mu      sync.Mutex
	handled map[string]uint64 // by service name
	failed  map[string]uint64 // handled with an error
}

var _ bus.Observer = (*counters)(nil)

func newCounters() *counters {
	return &counters{handled: make(map[string]uint64), failed: make(map[string]uint64)}
}

// Observe counts a handled message (bus.OpHandle); it ignores the rest.
func (c *counters) Observe(o bus.Observation) {
	if o.Op != bus.OpHandle {
		return
	}
	if o.ServiceID == bus.APIPortal {
		c.portal.Add(1)
		if o.Err != nil {
			c.portalFailed.Add(1)
		}
		return
	}
	svc, _, ok := bus.SplitServiceID(o.ServiceID)
	if !ok {
		svc = o.ServiceID
	}
	c.mu.Lock()
	c.handled[svc]++
	if o.Err != nil {
		c.failed[svc]++
	}
	c.mu.Unlock()
}
