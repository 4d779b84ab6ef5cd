package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// ClientConfig configures a [Client]. Transport is required.
type ClientConfig struct {
	// Transport connects to the cluster's broker; required. The caller
	// owns it and closes it after the client.
	Transport driver.Transport
	// Prefix must match the cluster's. Default bus.DefaultPrefix.
	Prefix string
	// Registry must hold the API message types. Default: a new registry.
	Registry *message.Registry
	// DefaultTimeout bounds a call whose ctx has no deadline. Default 30 s.
	DefaultTimeout time.Duration
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// Observer, optional, sees the client's calls.
	Observer bus.Observer
	// OwnTransport makes Close close the transport too.
	OwnTransport bool
	// ClockSyncTimeout bounds NewClient's first measurement of the
	// cluster time (a ClusterTimeQuery round trip through api.portal).
	// If no node answers by then, NewClient returns anyway and the client
	// keeps trying every half second in the background; until it
	// succeeds, its messages carry only the time left, which a receiver
	// counts from arrival. Default 2 s; negative: do not wait at all.
	ClockSyncTimeout time.Duration
}

// Client clock timing: the cluster time is measured again every
// clientClockPeriod (the estimate keeps the best of the recent round
// trips), every clientClockRetry while unknown.
const (
	clientClockPeriod = 10 * time.Second
	clientClockRetry  = 500 * time.Millisecond
)

// Client is a process that is not a management node (a test, a CLI, a
// third-party program) calling the cluster through api.portal. It does
// not join the ring or the membership: the portal of whichever node takes
// a message routes it to the resource's owner, and the reply comes back
// to the client. Safe for concurrent use.
//
// A client writes its deadlines in cluster time, like a node, so a call's
// message that waits anywhere (api.portal's queue, a paused node) never
// runs after the call's deadline: it measures its offset to the cluster
// clock through api.portal when it opens and every ten seconds after
// ([Client.ClusterTime]).
type Client struct {
	b     *bus.CloudBus
	tr    driver.Transport // closed by Close if owned
	clock *clientClock
	stop  context.CancelFunc
	done  chan struct{}
}

// NewClient opens a client bus with its own reply queue and measures the
// cluster time (see ClientConfig.ClockSyncTimeout).
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Registry == nil {
		cfg.Registry = message.NewRegistry()
	}
	if err := registerClockTypes(cfg.Registry); err != nil {
		return nil, fmt.Errorf("service: new client: %w", err)
	}
	if cfg.ClockSyncTimeout == 0 {
		cfg.ClockSyncTimeout = 2 * time.Second
	}
	cc := &clientClock{sync: heartbeat.NewClockSync(time.Now)}
	b, err := bus.Open(ctx, bus.Config{
		Transport:  cfg.Transport,
		ClientOnly: true, // a reply queue and nothing else: the client broker user suffices
		Prefix:     cfg.Prefix,
		Registry:   cfg.Registry,
		Limits:     bus.Limits{DefaultTimeout: cfg.DefaultTimeout},
		Logger:     cfg.Logger,
		Observer:   cfg.Observer,
		Clock:      clockFunc(cc.sync.Now),
	})
	if err != nil {
		return nil, err
	}
	cc.b = b
	c := &Client{b: b, clock: cc, done: make(chan struct{})}
	if cfg.OwnTransport {
		c.tr = cfg.Transport
	}
	if cfg.ClockSyncTimeout > 0 {
		if err := cc.sample(ctx, cfg.ClockSyncTimeout); err != nil && cfg.Logger != nil {
			cfg.Logger.Info("cluster time not measured yet; retrying in the background", "err", err)
		}
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = stop
	go func() {
		defer close(c.done)
		cc.run(runCtx, clientClockPeriod, clientClockRetry, 2*time.Second)
	}()
	return c, nil
}

// ClusterTime returns the cluster time as this client estimates it, the
// bound of the estimate's error, and false while no node answered a
// ClusterTimeQuery in the last minute.
func (c *Client) ClusterTime() (now time.Time, bound time.Duration, ok bool) {
	return c.clock.sync.Now()
}

// Bus returns the client's bus, e.g. to subscribe to broadcast events.
func (c *Client) Bus() *bus.CloudBus { return c.b }

// Close closes the client's bus, and its transport if the client owns it
// (ClientConfig.OwnTransport). Idempotent.
func (c *Client) Close() error {
	c.stop()
	<-c.done
	err := c.b.Close()
	if c.tr != nil {
		err = errors.Join(err, c.tr.Close())
	}
	return err
}
