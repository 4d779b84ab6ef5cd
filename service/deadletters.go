package service

import (
	"context"
	"fmt"
	"slices"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// DeadLetters returns the first max messages of the cluster's
// dead-letter queue, leaving them there (bus.CloudBus.DeadLetters). It
// fails with message.ErrUnavailable before the node started.
func (n *Node) DeadLetters(ctx context.Context, max int) ([]bus.DeadLetter, error) {
	b := n.Bus()
	if b == nil {
		return nil, fmt.Errorf("service: read the dead letters: %w", message.ErrUnavailable.WithDetails("the node has not started"))
	}
	return b.DeadLetters(ctx, max)
}

// ReplayDeadLetters is bus.CloudBus.ReplayDeadLetters through this
// node's ring: a message about a resource goes to its service on the
// resource's owner now, so a message dead-lettered on a node that left
// reaches the node that took its resources over; a message about none
// goes back to the node it was sent to if that is a member still, else
// to any member; a message of api.portal goes back there. It fails with
// message.ErrUnavailable before the node started.
func (n *Node) ReplayDeadLetters(ctx context.Context, ids ...string) (bus.ReplayResult, error) {
	b := n.Bus()
	if b == nil {
		return bus.ReplayResult{}, fmt.Errorf("service: replay dead letters: %w", message.ErrUnavailable.WithDetails("the node has not started"))
	}
	replayed, missing, err := busx.Of(b).ReplayDead(ctx, ids, n.replayTarget)
	return bus.ReplayResult{Replayed: replayed, Missing: missing}, err
}

// replayTarget addresses a dead letter sent again (ReplayDeadLetters).
func (n *Node) replayTarget(env *wire.Envelope) error {
	if env.ServiceID == bus.APIPortal {
		return nil
	}
	svc, node, ok := bus.SplitServiceID(env.ServiceID)
	if !ok || svc == membershipService {
		return message.ErrBadRequest.WithDetails(fmt.Sprintf("it was sent to %q: only messages to a service or to %s are replayed", env.ServiceID, bus.APIPortal))
	}
	if env.ResourceUUID == "" && slices.Contains(n.ring.Members(), node) {
		return nil
	}
	return n.routeToOwner(env, svc)
}
