package service

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
)

// Caller sends messages into the cluster: a [*Node] routes them by its own
// ring, a [*Client] sends them to api.portal, whose node routes them the
// same way.
type Caller interface {
	route(ctx context.Context, msg any, opts []bus.Option, send func(b *bus.CloudBus, target string, o []bus.Option) error) error
}

// Call sends msg to the service that handles its type and returns the
// reply decoded as Resp (a registered type T or *T; any for whatever came).
//
// A message about a resource (its type implements message.Routed, or
// bus.WithResource names one) runs on the resource's owner; any other
// message runs on the calling node (from a Client: on the node whose
// portal took it). A message refused because the rings are converging is
// routed again, up to Config.RouteRetries times, with the same message id.
// With bus.WithRetry(max) the caller declares the message idempotent: a
// call whose owner left mid-call (message.ErrNodeLeft) is sent again to the
// new owner, up to max times, and since the first attempt may still run, a
// later refusal ends the call with node_left. A Client's message reaches
// only the types a service accepts through api.portal ([API],
// [APIService]).
//
// Call ends by ctx's deadline, bus.WithTimeout or the default timeout. A
// Routed message naming no resource fails with message.ErrBadRequest, a
// type no service of the node handles with message.ErrNoRoute, before
// anything is sent.
func Call[Resp any](ctx context.Context, c Caller, msg any, opts ...bus.Option) (Resp, error) {
	var out Resp
	err := c.route(ctx, msg, opts, func(b *bus.CloudBus, target string, o []bus.Option) error {
		var err error
		out, err = bus.Call[Resp](ctx, b, target, msg, o...)
		return err
	})
	return out, err
}

// Send sends msg one-way, routed as [Call] routes it. Once Send returned
// nil the message is kept until it runs: forwarded to its owner, drained
// from a dead node's queue, retried after a handler failure that does not
// say the message is wrong, or moved to the dead-letter queue with its
// reason (see the bus package's "One-way messages").
func Send(ctx context.Context, c Caller, msg any, opts ...bus.Option) error {
	return c.route(ctx, msg, opts, func(b *bus.CloudBus, target string, o []bus.Option) error {
		return b.Send(ctx, target, msg, o...)
	})
}

func (n *Node) route(ctx context.Context, msg any, opts []bus.Option, send func(b *bus.CloudBus, target string, o []bus.Option) error) error {
	name, err := n.cfg.Registry.NameOf(msg)
	if err != nil {
		return fmt.Errorf("service: call: %w", err)
	}
	svc, ok := n.types[name]
	switch {
	case !ok:
		return fmt.Errorf("service: call %s: %w", name, message.ErrNoRoute.WithDetails("no service of this node handles "+name))
	case svc == "":
		return fmt.Errorf("service: call %s: %w", name, message.ErrBadRequest.WithDetails("more than one service of this node handles "+name))
	}
	return n.dispatch(ctx, svc, name, msg, opts, send)
}

func (c *Client) route(ctx context.Context, msg any, opts []bus.Option, send func(b *bus.CloudBus, target string, o []bus.Option) error) error {
	err := send(c.b, bus.APIPortal, opts)
	if errors.Is(err, message.ErrTimeout) {
		// Perhaps refused as late, silently: the deadline was written with
		// a wrong estimate of the cluster time. Measure again soon.
		c.clock.nudge()
	}
	return err
}

// messageTypes registers, in reg, each value type a service's bus.Mux
// handles or replies with that reg does not name yet, as
// "<service>.v1.<Type>", and maps the registered name of every type a
// service handles (on its mux) or accepts through api.portal to the
// service; a type two services handle maps to "".
func messageTypes(reg *message.Registry, services []Service) (map[string]string, error) {
	types := make(map[string]string)
	add := func(name, svc string) {
		if other, dup := types[name]; dup && other != svc {
			svc = ""
		}
		types[name] = svc
	}
	for _, s := range services {
		var h any = s
		if sm, ok := s.(interface{ handler() bus.Handler }); ok {
			h = sm.handler()
		}
		reqs, replies := busx.MuxTypes(h)
		for _, d := range slices.Concat(reqs, replies) {
			if _, err := reg.NameOf(reflect.Zero(d.Type).Interface()); err == nil {
				continue
			}
			name := s.Name() + ".v1." + d.Type.Name()
			if !message.ValidTypeName(name) {
				continue // unnamed: the caller's registration must name it
			}
			if err := d.Register(reg, name); err != nil {
				return nil, fmt.Errorf("service: %s: %w", s.Name(), err)
			}
		}
		for _, d := range reqs {
			if name, err := reg.NameOf(reflect.Zero(d.Type).Interface()); err == nil {
				add(name, s.Name())
			}
		}
		if a, ok := s.(APIService); ok {
			for _, proto := range a.APIMessages() {
				if name, err := reg.NameOf(proto); err == nil {
					add(name, s.Name())
				}
			}
		}
	}
	return types, nil
}
