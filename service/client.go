package service

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// ClientConfig configures a [Client]. Transport is required.
type ClientConfig struct {
	// Transport connects to the cluster's broker; required. The caller
	// owns it and closes it after the client.
	Transport bus.Transport
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
}

// Client is a process that is not a management node (a test, a CLI, a
// third-party program) calling the cluster through api.portal. It does
// not join the ring or the membership: the portal of whichever node takes
// a message routes it to the resource's owner, and the reply comes back
// to the client. Safe for concurrent use.
type Client struct {
	b  *bus.CloudBus
	tr bus.Transport // closed by Close if owned
}

// NewClient opens a client bus with its own reply queue.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	b, err := bus.Open(ctx, bus.Config{
		Transport:      cfg.Transport,
		Prefix:         cfg.Prefix,
		Registry:       cfg.Registry,
		DefaultTimeout: cfg.DefaultTimeout,
		Logger:         cfg.Logger,
		Observer:       cfg.Observer,
	})
	if err != nil {
		return nil, err
	}
	c := &Client{b: b}
	if cfg.OwnTransport {
		c.tr = cfg.Transport
	}
	return c, nil
}

// Call sends an API message to api.portal and waits for the reply. The
// portal that takes it forwards it by the rule of [Node.Call]: a message
// about a resource (its type implements message.Routed, or
// bus.WithResource names one) to the resource's owner, any other to the
// portal's own node. A Routed message naming no resource fails with
// message.ErrBadRequest before anything is sent.
func (c *Client) Call(ctx context.Context, msg any, opts ...bus.Option) (any, error) {
	return c.b.Call(ctx, bus.APIPortal, msg, opts...)
}

// CallAPI is the typed form of [Client.Call]: it decodes the reply as
// Resp (a registered type T or *T; see bus.Call).
func CallAPI[Resp any](ctx context.Context, c *Client, msg any, opts ...bus.Option) (Resp, error) {
	return bus.Call[Resp](ctx, c.b, bus.APIPortal, msg, opts...)
}

// Send sends an API message one-way to api.portal, routed like Call.
func (c *Client) Send(ctx context.Context, msg any, opts ...bus.Option) error {
	return c.b.Send(ctx, bus.APIPortal, msg, opts...)
}

// Bus returns the client's bus, e.g. to subscribe to broadcast events.
func (c *Client) Bus() *bus.CloudBus { return c.b }

// Close closes the client's bus, and its transport if the client owns it
// (ClientConfig.OwnTransport). Idempotent.
func (c *Client) Close() error {
	err := c.b.Close()
	if c.tr != nil {
		err = errors.Join(err, c.tr.Close())
	}
	return err
}
