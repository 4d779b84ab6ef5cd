package main

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
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
)

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

// nodeStatus is the JSON of GET /status.
type nodeStatus struct {
	// Node is the node's UUID.
	Node string `json:"node"`
	// Epoch is its registration epoch in the heartbeat store.
	Epoch int64 `json:"epoch"`
	// State is service.State: starting, serving, leaving, …
	State string `json:"state"`
	// Fenced reports that the node serves but could not write its
	// heartbeat for longer than the lease: it refuses messages about
	// resources (not_owner) until a beat goes through, or its peers
	// evict it (service.Node.LeaseExpired). The JSON name stays "fenced".
	Fenced bool `json:"fenced"`
	// Transport is the broker connection: connected, reconnecting, closed.
	Transport string `json:"transport"`
	// ConnectionsLost counts the broker connections lost since the node
	// started (amqpbus.Transport.ConnectionsLost; 0 on the in-memory bus).
	ConnectionsLost uint64 `json:"connections_lost"`
	// Bus is the bus's counters (bus.Stats).
	Bus busStatus `json:"bus"`
	// Prefix is the queue prefix.
	Prefix string `json:"prefix"`
	// Uptime is the time since the process started.
	Uptime string `json:"uptime"`
	// Ring is the node's ring copy.
	Ring ringStatus `json:"ring"`
	// Counters count the messages the node handled.
	Counters counterStatus `json:"counters"`
	// Hosts is the host tracker's work.
	Hosts trackerStatus `json:"hosts"`
	// VMs is the VM sweeper's work.
	VMs sweeperStatus `json:"vms"`
	// Database is the node's connection pools and its beats' durations;
	// absent for a node without a SQL database.
	Database *databaseStatus `json:"database,omitempty"`
}

// ringStatus is this node's ring copy.
type ringStatus struct {
	// Members are the node UUIDs in the ring, sorted.
	Members []string `json:"members"`
	// Fingerprint is ring.Fingerprint: equal on nodes that agree on every owner.
	Fingerprint string `json:"fingerprint"`
}

// counterStatus is what the node handled since it started.
type counterStatus struct {
	// PortalForwarded counts the API messages this node's api.portal
	// took from the shared queue and forwarded; PortalFailed those whose
	// reply was an error.
	PortalForwarded uint64 `json:"portal_forwarded"`
	PortalFailed    uint64 `json:"portal_failed"`
	// Handled counts the messages each service of this node ran, by
	// service name; HandleErrors those that ended with an error.
	Handled      map[string]uint64 `json:"handled"`
	HandleErrors map[string]uint64 `json:"handle_errors"`
}

// busStatus is bus.Stats: messages refused, late, released and lost.
type busStatus struct {
	Rejected     uint64 `json:"rejected"`
	Late         uint64 `json:"late"`
	Released     uint64 `json:"released"`
	Lost         uint64 `json:"lost"`
	LateReplies  uint64 `json:"late_replies"`
	Failed       uint64 `json:"failed"`        // one-way messages ended by an error that says they are wrong
	Retried      uint64 `json:"retried"`       // one-way messages given back for another attempt
	DeadLettered uint64 `json:"dead_lettered"` // one-way messages moved to the dead-letter queue
}

// trackerStatus is the host tracker's counters (services.HostStats).
type trackerStatus struct {
	Tracked      int    `json:"tracked"`
	Pings        uint64 `json:"pings"`
	PingFailures uint64 `json:"ping_failures"`
	Reconnects   uint64 `json:"reconnects"`
	Takeovers    uint64 `json:"takeovers"`
}

// sweeperStatus is the VM sweeper's counters (services.VMStats).
type sweeperStatus struct {
	Sweeps  uint64 `json:"sweeps"`
	Repairs uint64 `json:"repairs"`
	// Journaled counts the VMs whose hypervisor acted while their record
	// did not follow, waiting for a sweep; StaleJournal the journal
	// entries dropped because an acknowledged write changed the record
	// first.
	Journaled    int    `json:"journaled"`
	StaleJournal uint64 `json:"stale_journal"`
}

// newAdmin returns the admin HTTP handler: GET /healthz and GET /status.
// db reads the node's database status; nil leaves it out.
func newAdmin(n *service.Node, tr driver.Transport, set *services.Set, c *counters, prefix string, start time.Time, db *dbWatch) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		st := n.State()
		if st != service.StateServing {
			http.Error(w, st.String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, st)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		handled, failed := maps.Clone(c.handled), maps.Clone(c.failed)
		c.mu.Unlock()
		hs, vs := set.Host.Stats(), set.VM.Stats()
		var bs bus.Stats
		if b := n.Bus(); b != nil {
			bs = b.Stats()
		}
		var lost uint64
		if l, ok := tr.(interface{ ConnectionsLost() uint64 }); ok {
			lost = l.ConnectionsLost()
		}
		st := nodeStatus{
			Node:            n.UUID(),
			Epoch:           n.Epoch(),
			State:           n.State().String(),
			Fenced:          n.LeaseExpired(),
			Transport:       tr.State().String(),
			ConnectionsLost: lost,
			Bus: busStatus{Rejected: bs.Rejected, Late: bs.Late, Released: bs.Released, Lost: bs.Lost, LateReplies: bs.LateReplies,
				Failed: bs.Failed, Retried: bs.Retried, DeadLettered: bs.DeadLettered},
			Prefix: prefix,
			Uptime: time.Since(start).Round(time.Millisecond).String(),
			Ring:   ringStatus{Members: n.Members(), Fingerprint: n.Fingerprint().String()},
			Counters: counterStatus{
				PortalForwarded: c.portal.Load(), PortalFailed: c.portalFailed.Load(),
				Handled: handled, HandleErrors: failed,
			},
			Hosts: trackerStatus{Tracked: hs.Tracked, Pings: hs.Pings, PingFailures: hs.PingFailures, Reconnects: hs.Reconnects, Takeovers: hs.Takeovers},
			VMs:   sweeperStatus{Sweeps: vs.Sweeps, Repairs: vs.Repairs, Journaled: vs.Journaled, StaleJournal: vs.StaleJournal},
		}
		if db != nil {
			ds := db.status()
			st.Database = &ds
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	return mux
}
