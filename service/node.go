package service

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
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
)

// ErrEvicted is why a node stops when evicted with Config.NoRejoin; it
// matches heartbeat.ErrEvicted.
var ErrEvicted = fmt.Errorf("service: %w", heartbeat.ErrEvicted)

// State is where a node is in its life.
type State int32

// The states of a node, in order.
const (
	// StateNew: created, not started.
	StateNew State = iota
	// StateStarting: declaring queues and joining.
	StateStarting
	// StateServing: in every ring, handling messages.
	StateServing
	// StateLeaving: leaving in order (goodbye): out of the rings, draining.
	StateLeaving
	// StateEvicted: peers evicted it; it no longer handles messages.
	StateEvicted
	// StateStopped: Run returned.
	StateStopped
)

// String returns the state's name, or "State(n)".
func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateStarting:
		return "starting"
	case StateServing:
		return "serving"
	case StateLeaving:
		return "leaving"
	case StateEvicted:
		return "evicted"
	case StateStopped:
		return "stopped"
	default:
		return fmt.Sprintf("State(%d)", int32(s))
	}
}

// Node is a management node: it hosts every service and routes each
// message about a resource to its owner by its ring. Start it with
// [StartNode] or [NewNode]; [Node.Close] leaves in order. Its methods are
// safe for concurrent use.
type Node struct {
	gate atomic.Pointer[func(ctx context.Context) error] // servicetest's pause (internal/svcx)

	cfg      Config
	id       string
	log      *slog.Logger
	ring     ring.Ring
	services map[string]Service
	api      map[string]string // API message type -> service name
	types    map[string]string // message type -> service name, "" if several (call.go)

	state atomic.Int32
	ready chan struct{}
	done  chan struct{} // closed when Run returns
	bus   atomic.Pointer[bus.CloudBus]

	runOnce sync.Once
	runErr  error
	cancel  context.CancelFunc // cancels Run; set by Run
	mu      sync.Mutex         // guards cancel, runCtx, exitBy, members, tombstones
	runCtx  context.Context    // Run's; its end starts the exit
	exitBy  time.Time          // when the exit must be over: LeaveTimeout after Run's context ended
	members map[string]int64   // node -> epoch of the members in the ring
	gone    map[string]int64   // node -> highest epoch seen leaving
	goodbye map[string]bool    // nodes whose tombstone came from the node itself (a leave)
	// abandonAt: nodes whose record vanished -> when to fail their calls
	abandonAt map[string]abandonment
	epoch     int64
	changed   chan struct{} // closed and replaced at every change of state or ring; guarded by mu
	sweepNow  chan struct{} // cap 1: asks the sweep loop for a sweep
	drainMu   sync.Mutex    // guards drained and drainFails
	drained   DrainStats
	// drainFails counts, by queue of a node that left, the drains in a
	// row that failed (drain).
	drainFails map[string]int
	monitor    atomic.Pointer[heartbeat.Monitor] // of the current life
	hooks      *hooks
	mstats     membershipCounters // MembershipStats
	internal   atomic.Uint64      // messages of cloudbus-membership handled by this life's bus, left out of RingState.Handled
}

func (n *Node) setState(s State) {
	n.state.Store(int32(s))
	n.mu.Lock()
	n.signalLocked()
	n.mu.Unlock()
}

// signalLocked wakes the waiters on n.changed; n.mu is held.
func (n *Node) signalLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *Node) watch() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// NewNode validates cfg and returns a node ready to run, doing no I/O.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, err := range []error{
		message.Register[wire.NodeJoined](cfg.Registry, wire.TypeNodeJoined),
		message.Register[wire.NodeLeft](cfg.Registry, wire.TypeNodeLeft),
		message.Register[wire.LeaveNotice](cfg.Registry, wire.TypeLeaveNotice),
		message.Register[wire.RingQuery](cfg.Registry, wire.TypeRingQuery),
		message.Register[wire.RingState](cfg.Registry, wire.TypeRingState),
		registerClockTypes(cfg.Registry),
	} {
		if err != nil {
			return nil, fmt.Errorf("service: %w", err)
		}
	}
	n := &Node{
		cfg:       cfg,
		id:        cfg.Node,
		log:       cfg.Logger.With("node", cfg.Node),
		ring:      cfg.Ring,
		services:  make(map[string]Service),
		api:       make(map[string]string),
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		members:   make(map[string]int64),
		gone:      make(map[string]int64),
		goodbye:   make(map[string]bool),
		abandonAt: make(map[string]abandonment),
		changed:   make(chan struct{}),
		sweepNow:  make(chan struct{}, 1),
	}
	types, err := messageTypes(cfg.Registry, cfg.Services)
	if err != nil {
		return nil, err
	}
	n.types = types
	for _, s := range cfg.Services {
		n.services[s.Name()] = s
		if a, ok := s.(APIService); ok {
			for _, proto := range a.APIMessages() {
				name, err := cfg.Registry.NameOf(proto)
				if err != nil {
					return nil, fmt.Errorf("service: %s: API message %T: %w", s.Name(), proto, err)
				}
				if other, dup := n.api[name]; dup {
					return nil, fmt.Errorf("service: API message %s is claimed by both %s and %s", name, other, s.Name())
				}
				n.api[name] = s.Name()
			}
		}
	}
	if _, err := heartbeat.NewMonitor(cfg.Store, n.id, cfg.Heartbeat, nil, nil); err != nil {
		return nil, err // validates the timing now; each life makes its own monitor
	}
	n.hooks = newHooks(n)
	return n, nil
}

// UUID returns the node's UUID.
func (n *Node) UUID() string { return n.id }

// State returns the node's state.
func (n *Node) State() State { return State(n.state.Load()) }

// Ready is closed once the node serves: its queues exist and its ring
// holds the live nodes.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Done is closed when Run has returned.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns why Run returned: nil after an orderly leave, [ErrEvicted],
// or what stopped it. It is nil while the node runs.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.runErr
	default:
		return nil
	}
}

// Bus returns the node's bus, or nil before Run opened it.
func (n *Node) Bus() *bus.CloudBus { return n.bus.Load() }

// TransportState returns the state of the node's broker connection;
// closed when the node does not run.
func (n *Node) TransportState() driver.TransportState {
	if n.Bus() != nil && n.State() != StateStopped {
		return n.cfg.Transport.State()
	}
	return driver.TransportClosed
}

// Epoch returns the node's heartbeat epoch, 0 before it joined.
func (n *Node) Epoch() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch
}

// Members returns the node UUIDs of this node's ring, sorted.
func (n *Node) Members() []string { return n.ring.Members() }

// Fingerprint returns the fingerprint of this node's ring: equal ones
// give every resource the same owner.
func (n *Node) Fingerprint() ring.Fingerprint { return n.ring.Fingerprint() }

// Owner returns the owner of resourceUUID on this node's ring.
func (n *Node) Owner(resourceUUID string) (string, error) {
	id, err := message.NormalizeUUID(resourceUUID)
	if err != nil {
		return "", err
	}
	owner, err := n.ring.Locate(id)
	if err != nil {
		return "", fmt.Errorf("service: owner of %s: %w: %w", id, message.ErrNoRoute, err)
	}
	return owner, nil
}

// LeaseExpired reports whether the node refuses messages about resources: it
// could not beat for longer than the lease.
func (n *Node) LeaseExpired() bool {
	m := n.monitor.Load()
	return m != nil && n.State() == StateServing && m.LeaseExpired()
}

// StoreView is what a node's heartbeat monitor last read from the
// heartbeat store, for health checks ([Node.StoreView]).
type StoreView struct {
	// Live are the live nodes of its last successful read of the store,
	// this node included, sorted: what the ring must hold.
	Live []string
	// Reads counts its successful reads of the store in this life (0:
	// none yet).
	Reads uint64
	// LastBeat is when its last successful beat was sent, by the node's
	// clock; zero before it joined.
	LastBeat time.Time
	// Records are the heartbeat records of that read, the live peers'
	// (this node's is not among them): each one's epoch, beat sequence,
	// age at the read and how long it reports its bus down.
	Records []heartbeat.Record
}

// Heartbeat returns the node's heartbeat timing, defaults filled in.
func (n *Node) Heartbeat() heartbeat.Config { return n.cfg.Heartbeat.WithDefaults() }

// StoreView returns what the node's heartbeat monitor last read from the
// store, without a round trip; the zero StoreView before the node
// started joining.
func (n *Node) StoreView() StoreView {
	m := n.monitor.Load()
	if m == nil {
		return StoreView{}
	}
	records, reads := m.View()
	live := []string{n.id}
	for _, r := range records {
		if r.Node != n.id {
			live = append(live, r.Node)
		}
	}
	slices.Sort(live)
	peers := slices.DeleteFunc(records, func(r heartbeat.Record) bool { return r.Node == n.id })
	return StoreView{Live: live, Reads: reads, LastBeat: m.LastBeat(), Records: peers}
}

// Shares returns each member's share of the key space on this node's
// ring ([ring.Shares]): exact on the default ring, estimated on others.
func (n *Node) Shares() map[string]float64 { return ring.Shares(n.ring) }

// Fenced is the old name of [Node.LeaseExpired].
//
// Deprecated: use LeaseExpired; package fence's tokens are the other
// meaning of "fenced". Fenced will be removed in the next release.
func (n *Node) Fenced() bool { return n.LeaseExpired() }

// Owns reports whether this node serves, its lease has not expired, and it owns
// resourceUUID on its ring.
func (n *Node) Owns(resourceUUID string) bool {
	if n.State() != StateServing || n.LeaseExpired() {
		return false
	}
	owner, err := n.Owner(resourceUUID)
	return err == nil && owner == n.id
}

// StartNode is [NewNode] then [Node.Start]. A node that could not start
// has released what it held, the transport too if cfg.OwnTransport.
func StartNode(ctx context.Context, cfg Config) (*Node, error) {
	n, err := NewNode(cfg)
	if err != nil {
		if cfg.OwnTransport && cfg.Transport != nil {
			_ = cfg.Transport.Close()
		}
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Start runs the node in the background and returns once it serves, or
// with Run's error; ctx bounds the start only.
func (n *Node) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	started := make(chan struct{})
	go func() {
		defer cancel()
		close(started)
		err := n.Run(runCtx)
		select {
		case <-n.ready: // it served, so nobody else hears of this error unless they ask Err
			if err != nil && !errors.Is(err, context.Canceled) {
				n.log.Error("node stopped", "err", err)
			}
		default: // Start returns it
		}
	}()
	<-started
	select {
	case <-n.ready:
		return nil // Run goes on; Close stops it
	case <-n.done:
		return n.runErr
	case <-ctx.Done():
		cancel()
		<-n.done
		return ctx.Err()
	}
}

// Close leaves in order and waits for Run, returning [Node.Err]. It is
// idempotent, and returns nil for a node that never ran.
func (n *Node) Close() error {
	n.mu.Lock()
	cancel := n.cancel
	n.mu.Unlock()
	if cancel == nil && n.State() == StateNew {
		return nil
	}
	if cancel != nil {
		cancel()
	}
	<-n.done
	if errors.Is(n.runErr, context.Canceled) {
		return nil // Close itself canceled the start
	}
	return n.runErr
}
