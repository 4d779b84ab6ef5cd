package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// HostService is the "host" service: it adds, reads and reconnects hosts
// on their ring owner, allocates hosts for new VMs on the local node, and
// tracks the hosts its node owns (see the package documentation). It
// implements service.Starter, service.Stopper, service.RingListener,
// service.EvictionListener and service.APIService. Safe for concurrent
// use once started.
type HostService struct {
	cfg  Config
	log  *slog.Logger
	node *service.Node
	*bus.Mux

	mu      sync.Mutex
	tracked map[string]cloud.HostStatus // hosts this node tracks -> last status

	resync     chan struct{} // cap 1: a ring change asks the tracker to resync
	needResync atomic.Bool   // the last resync failed; retry at the next round
	stop       chan struct{}
	tracker    worker

	pings, pingFailures, reconnects, takeovers atomic.Uint64
}

// HostStats counts what a node's host tracker did.
type HostStats struct {
	// Tracked is the number of hosts the node tracks now.
	Tracked int
	// Pings is the number of pings sent; PingFailures of those failed.
	Pings uint64
	// PingFailures is the number of pings that failed.
	PingFailures uint64
	// Reconnects counts the tracker's successful connects: takeovers and
	// hosts that answered again after being disconnected.
	Reconnects uint64
	// Takeovers counts hosts taken over from the node that managed them
	// and reconnected.
	Takeovers uint64
}

func newHostService(cfg Config) *HostService {
	s := &HostService{
		cfg:     cfg,
		log:     cfg.Logger.With("service", api.HostService),
		Mux:     bus.NewMux(),
		tracked: make(map[string]cloud.HostStatus),
		resync:  make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	bus.Handle(s.Mux, s.add)
	bus.Handle(s.Mux, s.get)
	bus.Handle(s.Mux, s.reconnectMsg)
	bus.Handle(s.Mux, s.allocate)
	bus.Handle(s.Mux, s.prepare)
	return s
}

// Name returns "host".
func (s *HostService) Name() string { return api.HostService }

// APIMessages returns AddHost, GetHost and ReconnectHost; AllocateHost
// is internal.
func (s *HostService) APIMessages() []any {
	return []any{api.AddHost{}, api.GetHost{}, api.ReconnectHost{}}
}

// Start binds the service to its node and starts the host tracker. The
// node's ring is still empty here: the tracker takes its hosts over at
// the first RingChanged, which follows the join.
func (s *HostService) Start(ctx context.Context, n *service.Node) error {
	if s.node != nil {
		return fmt.Errorf("services: host service already started on node %s; create a Set per node", s.node.UUID())
	}
	s.node = n
	s.log = s.log.With("node", n.UUID())
	s.tracker.start(s.run)
	return nil
}

// Stop stops the tracker, canceling its hypervisor calls, and waits for
// it (or for ctx). It is idempotent and safe without Start.
func (s *HostService) Stop(ctx context.Context) error {
	return s.tracker.stop(ctx, "host tracker", func() { close(s.stop) })
}

// RingChanged asks the tracker to take over the hosts this node now owns
// and drop those it no longer owns. It does not block.
func (s *HostService) RingChanged(ctx context.Context, ch service.RingChange) {
	select {
	case s.resync <- struct{}{}:
	default: // a resync is pending already; it will see this change too
	}
}

// Evicted drops every tracked host: peers own them now.
func (s *HostService) Evicted(ctx context.Context) {
	s.mu.Lock()
	n := len(s.tracked)
	clear(s.tracked)
	s.mu.Unlock()
	s.log.Warn("node evicted: stopped tracking its hosts", "hosts", n)
}

// Stats returns the tracker's counters.
func (s *HostService) Stats() HostStats {
	s.mu.Lock()
	n := len(s.tracked)
	s.mu.Unlock()
	return HostStats{
		Tracked:      n,
		Pings:        s.pings.Load(),
		PingFailures: s.pingFailures.Load(),
		Reconnects:   s.reconnects.Load(),
		Takeovers:    s.takeovers.Load(),
	}
}

// Tracked returns the UUIDs of the hosts this node tracks, sorted. The
// caller owns the slice.
func (s *HostService) Tracked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.tracked))
	for id := range s.tracked {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Handle handles one message; see [bus.Handler].
func (s *HostService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	if err := started(s.node, api.HostService); err != nil {
		return nil, err
	}
	resp, err := s.Mux.Handle(ctx, r)
	return resp, answer(s.log, r, err)
}

// add handles AddHost on the host's owner: connect, record, track. The
// record is written in one transaction fenced by this node's claim on the
// host and recorded under the message's key, so a redelivery gets the
// first reply.
func (s *HostService) add(ctx context.Context, r *bus.Request, m api.AddHost) (api.HostReply, error) {
	if err := m.Validate(); err != nil {
		return api.HostReply{}, err
	}
	id := r.Resource() // m.UUID, canonical: the bus checked
	reply, err := cloud.Run(ctx, s.cfg.Store, fence.For(ctx, r), func(ctx context.Context, tx cloud.Store) (api.HostReply, error) {
		switch _, err := tx.Host(ctx, id); {
		case err == nil:
			return api.HostReply{}, cloud.Exists("host", id)
		case !errors.Is(err, message.ErrNotFound):
			return api.HostReply{}, err
		}
		h := cloud.Host{UUID: id, Name: m.Name, Address: m.Address}
		if err := tx.Verify(ctx); err != nil { // still the owner, just before acting
			return api.HostReply{}, err
		}
		if err := s.cfg.Hypervisor.Connect(ctx, h); err != nil {
			return api.HostReply{}, fmt.Errorf("host: add host %s: connect to %q: %w; the host was not added: fix it and add it again", id, m.Address, err)
		}
		h.Status, h.ManagedBy, h.ConnectedAt = cloud.HostConnected, s.node.UUID(), time.Now()
		if err := tx.AddHost(ctx, h); err != nil {
			return api.HostReply{}, fmt.Errorf("host: add host %s: %w", id, err)
		}
		return api.HostReply{Host: h, Handling: handling(r)}, nil
	})
	if err != nil {
		return api.HostReply{}, stale(s.log, err)
	}
	if reply.Host.ManagedBy == s.node.UUID() {
		s.setTracked(id, reply.Host.Status)
	}
	s.log.Info("host added and connected", "host", id, "address", m.Address)
	return reply, nil
}

func (s *HostService) get(ctx context.Context, r *bus.Request, _ api.GetHost) (api.HostReply, error) {
	h, err := s.cfg.Store.Host(ctx, r.Resource())
	if err != nil {
		return api.HostReply{}, err
	}
	return api.HostReply{Host: h, Handling: handling(r)}, nil
}

// reconnectMsg handles ReconnectHost on the host's owner.
func (s *HostService) reconnectMsg(ctx context.Context, r *bus.Request, _ api.ReconnectHost) (api.HostReply, error) {
	h, err := s.cfg.Store.Host(ctx, r.Resource())
	if err != nil {
		return api.HostReply{}, err
	}
	h, err = s.reconnect(ctx, h, "requested")
	if err != nil {
		return api.HostReply{}, err
	}
	return api.HostReply{Host: h, Handling: handling(r)}, nil
}

// allocate handles AllocateHost, a message about no resource, on the
// local node: the connected host with the fewest live VMs (ties broken by
// UUID). It reserves nothing: two nodes allocating at once may pick the
// same host, which only makes the placement less even.
func (s *HostService) allocate(ctx context.Context, r *bus.Request, _ api.AllocateHost) (api.HostAllocated, error) {
	hosts, err := s.cfg.Store.Hosts(ctx)
	if err != nil {
		return api.HostAllocated{}, fmt.Errorf("host: allocate: %w", err)
	}
	vms, err := s.cfg.Store.VMs(ctx)
	if err != nil {
		return api.HostAllocated{}, fmt.Errorf("host: allocate: %w", err)
	}
	load := make(map[string]int)
	for _, vm := range vms {
		if vm.State != cloud.VMDestroyed {
			load[vm.HostUUID]++
		}
	}
	best := ""
	for _, h := range hosts { // sorted by UUID
		if h.Status == cloud.HostConnected && (best == "" || load[h.UUID] < load[best]) {
			best = h.UUID
		}
	}
	if best == "" {
		return api.HostAllocated{}, message.ErrNotFound.WithDetails(fmt.Sprintf("no connected host among %d to place a VM on: add one with AddHost", len(hosts)))
	}
	return api.HostAllocated{HostUUID: best, Handling: handling(r)}, nil
}

func (s *HostService) setTracked(id string, st cloud.HostStatus) {
	s.mu.Lock()
	s.tracked[id] = st
	s.mu.Unlock()
}

func (s *HostService) untrack(id, why string) {
	s.mu.Lock()
	_, was := s.tracked[id]
	delete(s.tracked, id)
	s.mu.Unlock()
	if was {
		s.log.Info("stopped tracking host", "host", id, "why", why)
	}
}
