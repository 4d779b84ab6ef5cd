package rest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

// Node is the management node whose view GET /v1/nodes and
// GET /v1/owner/{uuid} report: a *service.Node.
type Node interface {
	// UUID is the node's UUID.
	UUID() string
	// Epoch is its life's epoch.
	Epoch() int64
	// Members are its ring's members, sorted.
	Members() []string
	// Fingerprint is its ring's fingerprint.
	Fingerprint() ring.Fingerprint
	// Owner is the owner of a resource on its ring.
	Owner(resourceUUID string) (string, error)
	// Shares are the members' shares of the key space on its ring.
	Shares() map[string]float64
	// StoreView is what it last read of the heartbeat store.
	StoreView() service.StoreView
	// Heartbeat is its heartbeat timing.
	Heartbeat() heartbeat.Config
	// Rings asks every member of its ring for its ring copy and the
	// owner of resource on it.
	Rings(ctx context.Context, resource string) []service.RingView
}

var _ Node = (*service.Node)(nil)

// member is one node of GET /v1/nodes.
type member struct {
	UUID  string `json:"uuid"`
	Epoch int64  `json:"epoch,omitempty"`
	// State is "serving"; "UNHEALTHY" when its last beat is older than
	// its lease (heartbeat.Config.Lease: it has fenced itself); "joining_or_leaving" when the store has it
	// live but the ring does not; "missing" for a ring member the store
	// has no record of.
	State          string `json:"state"`
	HeartbeatAgeMS int64  `json:"heartbeat_age_ms"`
	// RegisteredAt is when this life of the node registered, by the
	// database's clock (heartbeat.Record.RegisteredAt); absent for a ring
	// member the store has no record of.
	RegisteredAt time.Time `json:"registered_at,omitzero"`
	BusDownMS    int64     `json:"bus_down_ms,omitempty"`
	Share        float64   `json:"share"`
	Owned        owned     `json:"owned"`
}

// owned counts the resources a member owns.
type owned struct {
	Hosts  int `json:"hosts"`
	Images int `json:"images"`
	VMs    int `json:"vms"`
}

// nodesView is the body of GET /v1/nodes.
type nodesView struct {
	Node             string   `json:"node"`
	Fingerprint      string   `json:"fingerprint"`
	HeartbeatMS      int64    `json:"heartbeat_interval_ms"`
	EvictAfterMS     int64    `json:"evict_after_ms"`
	Members          []member `json:"members"`
	OwnedFromDB      bool     `json:"owned_from_database"`
	OwnedUnavailable string   `json:"owned_unavailable,omitempty"`
}

// noNode answers the routes that need a node's view on an API without
// one.
func noNode(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, apiError{Code: string(message.ErrNotFound.Code), Retry: "never",
		Message: "this API serves no node's view of the cluster (Config.Node is not set)"})
}

// nodes serves GET /v1/nodes: the members as the serving node sees them.
func (a *API) nodes(w http.ResponseWriter, r *http.Request) {
	n := a.cfg.Node
	if n == nil {
		noNode(w)
		return
	}
	hb := n.Heartbeat().WithDefaults()
	view := n.StoreView()
	ringMembers := n.Members()
	shares := n.Shares()
	out := nodesView{Node: n.UUID(), Fingerprint: n.Fingerprint().String(), HeartbeatMS: hb.Interval.Milliseconds(), EvictAfterMS: hb.EvictAfter.Milliseconds(), OwnedFromDB: true}
	byID := map[string]*member{}
	add := func(id string) *member {
		if m, ok := byID[id]; ok {
			return m
		}
		m := &member{UUID: id, State: "missing", Share: shares[id]}
		byID[id] = m
		return m
	}
	self := add(n.UUID())
	self.Epoch, self.State = n.Epoch(), "serving"
	if self.Epoch != 0 {
		self.RegisteredAt = heartbeat.Record{Epoch: self.Epoch}.RegisteredAt().UTC()
	}
	if !view.LastBeat.IsZero() {
		self.HeartbeatAgeMS = time.Since(view.LastBeat).Milliseconds()
	}
	for _, rec := range view.Records {
		m := add(rec.Node)
		m.Epoch, m.HeartbeatAgeMS, m.BusDownMS = rec.Epoch, rec.Age.Milliseconds(), rec.BusDown.Milliseconds()
		m.RegisteredAt = rec.RegisteredAt().UTC()
		m.State = "serving"
		if rec.Age > hb.Lease { // as the dashboard: past its lease, it has fenced itself
			m.State = "UNHEALTHY"
		}
	}
	for _, id := range ringMembers {
		add(id)
	}
	for id, m := range byID {
		if m.State != "missing" && !slices.Contains(ringMembers, id) {
			m.State = "joining_or_leaving"
		}
	}
	if err := a.countOwned(r.Context(), n, byID); err != nil {
		out.OwnedFromDB, out.OwnedUnavailable = false, err.Error()
	}
	for _, m := range byID {
		out.Members = append(out.Members, *m)
	}
	slices.SortFunc(out.Members, func(x, y member) int {
		switch {
		case x.UUID < y.UUID:
			return -1
		case x.UUID > y.UUID:
			return 1
		}
		return 0
	})
	writeJSON(w, http.StatusOK, out)
}

// countOwned counts each member's resources, read from the database and
// located on n's ring.
func (a *API) countOwned(ctx context.Context, n Node, byID map[string]*member) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	hosts, err := a.cfg.Store.Hosts(ctx)
	if err != nil {
		return err
	}
	images, err := a.cfg.Store.Images(ctx)
	if err != nil {
		return err
	}
	vms, err := a.cfg.Store.VMs(ctx)
	if err != nil {
		return err
	}
	count := func(id string, f func(*owned)) {
		if o, err := n.Owner(id); err == nil {
			if m, ok := byID[o]; ok {
				f(&m.Owned)
			}
		}
	}
	for _, h := range hosts {
		count(h.UUID, func(o *owned) { o.Hosts++ })
	}
	for _, i := range images {
		count(i.UUID, func(o *owned) { o.Images++ })
	}
	for _, v := range vms {
		if v.State != "destroyed" {
			count(v.UUID, func(o *owned) { o.VMs++ })
		}
	}
	return nil
}

// ownerView is one node's answer in GET /v1/owner/{uuid}.
type ownerView struct {
	Node        string `json:"node"`
	Owner       string `json:"owner,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Members     int    `json:"members,omitempty"`
	Error       string `json:"error,omitempty"`
}

// ownerAnswer is the body of GET /v1/owner/{uuid}.
type ownerAnswer struct {
	UUID string `json:"uuid"`
	// Owner is the owner on the serving node's ring.
	Owner string `json:"owner"`
	// Node is the serving node.
	Node string `json:"node"`
	// Agree reports whether every member of the serving node's ring
	// answered, each with the same owner.
	Agree bool        `json:"agree"`
	Views []ownerView `json:"views"`
}

// ownerAskTimeout bounds the question to each node.
const ownerAskTimeout = 2 * time.Second

// owner serves GET /v1/owner/{uuid}: who owns the resource, on the
// serving node's ring and on each member's, asked over the bus
// (service.Node.Rings).
func (a *API) owner(w http.ResponseWriter, r *http.Request) {
	n := a.cfg.Node
	if n == nil {
		noNode(w)
		return
	}
	id, ok := pathUUID(w, r)
	if !ok {
		return
	}
	owner, err := n.Owner(id)
	if err != nil {
		a.fail(w, r, message.ErrUnavailable.WithDetails(fmt.Sprintf("node %s has no ring yet: %v", n.UUID(), err)), false)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ownerAskTimeout)
	defer cancel()
	out := ownerAnswer{UUID: id, Owner: owner, Node: n.UUID(), Agree: true}
	for _, v := range n.Rings(ctx, id) {
		ov := ownerView{Node: v.Node, Owner: v.Owner, Fingerprint: v.Fingerprint, Members: len(v.Members)}
		if v.Err != nil {
			ov = ownerView{Node: v.Node, Error: string(message.CodeOf(v.Err)) + ": " + v.Err.Error()}
		}
		if ov.Error != "" || ov.Owner != owner {
			out.Agree = false
		}
		out.Views = append(out.Views, ov)
	}
	writeJSON(w, http.StatusOK, out)
}
