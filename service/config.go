package service

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
)

// Config configures a management [Node]. Transport and Store are
// required; every other zero field takes a default.
type Config struct {
	// Node is this node's canonical UUID. Default: a new version-4 UUID,
	// which is what a node should use: a fresh identity per start.
	Node string

	// Prefix starts every queue name. Default bus.DefaultPrefix.
	Prefix string

	// Transport carries the messages; required. The caller owns it and
	// closes it after the node, unless OwnTransport is set.
	Transport driver.Transport

	// OwnTransport gives the transport to the node: Run closes it when
	// it returns (after leaving, or after a failed start).
	OwnTransport bool

	// Store holds the heartbeat records; required. The caller owns it.
	Store heartbeat.Store

	// Registry maps payload types to names. Default: a new registry.
	Registry *message.Registry

	// Ring is this node's ring copy; it must be empty. Every node of a
	// cluster must use the same implementation and configuration. Default
	// (nil): the partition table of package ring,
	//
	//	cfg.Ring, err = ring.New(ring.DefaultConfig())
	//
	// or the buraksezer/consistent ring (docs/design.md, "The ring", compares
	// them):
	//
	//	cfg.Ring, err = ring.NewConsistent(ring.DefaultConsistentConfig())
	Ring ring.Ring

	// Services are hosted by this node, each on its own queue.
	Services []Service

	// Heartbeat sets beat interval and eviction threshold. Default:
	// heartbeat.DefaultConfig().
	Heartbeat heartbeat.Config

	// Limits bound the node's bus: timeouts, sizes, concurrency and
	// retries. Every zero field takes the bus's default (see bus.Limits).
	Limits bus.Limits

	// Delivery is the mode the node's calls and one-way messages are sent
	// in unless bus.WithDelivery says otherwise; see bus.DeliveryMode.
	// Default bus.Confirmed.
	Delivery bus.DeliveryMode

	// Observer, optional, sees every send, call, delivery and reply of
	// the node's bus, and each re-route the node makes (bus.OpReroute);
	// see bus.Observer.
	Observer bus.Observer

	// Tracer, optional, makes spans around the node's sends, calls,
	// forwards and handlers; see bus.Tracer and package service/tracing.
	// The W3C trace context travels without it.
	Tracer bus.Tracer

	// NoRejoin makes Run return ErrEvicted when peers evict this live node,
	// instead of joining again with a new epoch. Default: rejoin.
	NoRejoin bool

	// LeaveTimeout bounds a node's whole exit once Run's context ends:
	// the orderly leave (telling peers, draining the queues, waiting for
	// handlers), closing the bus and the services' Stop (see Node.Run).
	// Default 10 s.
	LeaveTimeout time.Duration

	// RouteRetries is how many times a routed call or send is retried
	// when the receiver says it is not the owner or its queue is gone
	// (both mean the rings are converging; neither ran the message),
	// after pauses of 10, 20, 40 ms…, the last after not_owner at least
	// a beat interval (the receiver's ring may be the one behind).
	// Default 4; a negative value disables retries.
	RouteRetries int

	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Node == "" {
		c.Node = message.NewUUID()
	}
	if c.Prefix == "" {
		c.Prefix = bus.DefaultPrefix
	}
	if c.Registry == nil {
		c.Registry = message.NewRegistry()
	}
	if c.Ring == nil {
		r, err := ring.New(ring.DefaultConfig())
		if err != nil {
			return err
		}
		c.Ring = r
	}
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = 10 * time.Second
	}
	if c.Heartbeat.Interval == 0 {
		c.Heartbeat.Interval = heartbeat.DefaultConfig().Interval
	}
	if c.RouteRetries == 0 {
		c.RouteRetries = 4
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Validate reports every problem with the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Transport == nil {
		errs = append(errs, errors.New("service: config: Transport is required (bus/membus for one process, a broker transport for a cluster)"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("service: config: Store is required (heartbeat/memstore for one process, a database store for a cluster)"))
	}
	if c.Node != "" && !message.IsCanonicalUUID(c.Node) {
		errs = append(errs, fmt.Errorf("service: config: Node %q is not a canonical UUID", c.Node))
	}
	if c.Ring != nil && len(c.Ring.Members()) > 0 {
		errs = append(errs, errors.New("service: config: Ring must be empty; the node fills it from the membership"))
	}
	if err := c.Heartbeat.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.LeaveTimeout < 0 {
		errs = append(errs, fmt.Errorf("service: config: LeaveTimeout %s is negative", c.LeaveTimeout))
	}
	seen := map[string]bool{membershipService: true}
	for i, s := range c.Services {
		switch {
		case s == nil:
			errs = append(errs, fmt.Errorf("service: config: Services[%d] is nil", i))
		case seen[s.Name()]:
			errs = append(errs, fmt.Errorf("service: config: service name %q is used twice (or reserved)", s.Name()))
		default:
			seen[s.Name()] = true
		}
	}
	return errors.Join(errs...)
}
