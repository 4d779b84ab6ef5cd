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

// ClientConfig configures a [Client].
type ClientConfig struct {
	// Transport reaches the cluster's broker; required. The caller closes it.
	Transport driver.Transport
	// Prefix must be the cluster's. Default bus.DefaultPrefix.
	Prefix string
	// Registry holds the API message types. Default: a new registry.
	Registry *message.Registry
	// DefaultTimeout bounds a call whose ctx has none. Default 30 s.
	DefaultTimeout time.Duration
	// Delivery is the mode the client's calls and one-way messages are
	// sent in unless bus.WithDelivery says otherwise; see
	// bus.DeliveryMode. Default bus.Confirmed.
	Delivery bus.DeliveryMode
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// Observer, optional, sees the client's calls.
	Observer bus.Observer
	// Tracer, optional, makes spans around the client's calls and sends;
	// see bus.Tracer.
	Tracer bus.Tracer
	// OwnTransport makes Close close the transport too.
	OwnTransport bool
	// ClockSyncTimeout bounds NewClient's first measurement of the cluster
	// time; until one succeeds, messages carry only the time left. Default
	// 2 s; negative: do not wait.
	ClockSyncTimeout time.Duration
}

const (
	clientClockPeriod = 10 * time.Second
	clientClockRetry  = 500 * time.Millisecond
)

// Client calls the cluster through api.portal from a process that is not
// a node, in cluster time measured through a node. It is safe for
// concurrent use.
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
	cc := &clientClock{sync: heartbeat.NewClockSync(time.Now), nudged: make(chan struct{}, 1)}
	b, err := bus.Open(ctx, bus.Config{
		Transport:  cfg.Transport,
		ClientOnly: true, // a reply queue and nothing else: the client broker user suffices
		Prefix:     cfg.Prefix,
		Registry:   cfg.Registry,
		Limits:     bus.Limits{DefaultTimeout: cfg.DefaultTimeout},
		Delivery:   cfg.Delivery,
		Logger:     cfg.Logger,
		Observer:   cfg.Observer,
		Tracer:     cfg.Tracer,
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

// ClusterTime returns the cluster time as this client estimates it and
// its error bound; ok is false while no node answered in the last minute.
func (c *Client) ClusterTime() (now time.Time, bound time.Duration, ok bool) {
	return c.clock.sync.Now()
}

// Bus returns the client's bus.
func (c *Client) Bus() *bus.CloudBus { return c.b }

// Close closes the client, and its transport if it owns it. Idempotent.
func (c *Client) Close() error {
	c.stop()
	<-c.done
	err := c.b.Close()
	if c.tr != nil {
		err = errors.Join(err, c.tr.Close())
	}
	return err
}
