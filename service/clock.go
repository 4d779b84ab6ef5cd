package service

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

func registerClockTypes(reg *message.Registry) error {
	if err := message.Register[wire.ClusterTimeQuery](reg, wire.TypeClusterTimeQuery); err != nil {
		return err
	}
	return message.Register[wire.ClusterTime](reg, wire.TypeClusterTime)
}

// ClusterTime returns the cluster time as this node measures it against
// the heartbeat store, and its error bound; ok is false before the first
// measurement.
func (n *Node) ClusterTime() (now time.Time, bound time.Duration, ok bool) {
	m := n.monitor.Load()
	if m == nil {
		return time.Time{}, 0, false
	}
	return m.ClusterTime()
}

func (n *Node) clusterTimeReply() (wire.ClusterTime, error) {
	now, bound, ok := n.ClusterTime()
	if !ok {
		return wire.ClusterTime{}, message.ErrUnavailable.WithDetails(fmt.Sprintf("node %s has no cluster time yet (no round trip to the heartbeat store)", n.id))
	}
	return wire.ClusterTime{NowNS: now.UnixNano(), ErrorNS: int64(bound), Node: n.id}, nil
}

type clientClock struct {
	sync   *heartbeat.ClockSync
	b      *bus.CloudBus
	nudged chan struct{} // buffered 1: measure again soon (see nudge)
}

// nudge asks run to measure again within its retry time, not at its next
// period: a call ended without an answer, as one does whose deadline,
// written with a wrong estimate, every node refuses as late, silently.
func (c *clientClock) nudge() {
	select {
	case c.nudged <- struct{}{}:
	default:
	}
}

// sample measures the cluster time once. Its query carries only its time
// left: its absolute deadline, written with a wrong estimate (a client
// that believed a node which had just stepped its clock), could have
// passed already, every node would refuse it as late, and the client
// could never measure again.
func (c *clientClock) sample(ctx context.Context, timeout time.Duration) error {
	ctx = busx.TimeLeftOnly(ctx)
	sent := time.Now()
	t, err := bus.Call[wire.ClusterTime](ctx, c.b, bus.APIPortal, wire.ClusterTimeQuery{}, bus.WithTimeout(timeout))
	received := time.Now()
	if err != nil {
		return err
	}
	c.sync.Sample(sent, received, time.Unix(0, t.NowNS), time.Duration(t.ErrorNS))
	return nil
}

// run measures every period; after a failed measurement (a broker
// fault, no node with cluster time) it tries again after retry, doubling
// up to period, so the estimate is fresh again soon after the fault; after
// a measurement the estimate doubts (it disagrees with the samples kept),
// again after retry, to confirm or forget it.
func (c *clientClock) run(ctx context.Context, period, retry, timeout time.Duration) {
	wait := period
	if _, _, ok := c.sync.Now(); !ok {
		wait = retry
	}
	last := time.Now() // of the last measurement: a nudge measures at most once per retry
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-c.nudged:
			timer.Stop()
			if d := retry - time.Since(last); d > 0 {
				wait = min(wait, d)
				continue
			}
		}
		last = time.Now()
		switch err := c.sample(ctx, timeout); {
		case err == nil && c.sync.Doubting():
			wait = retry
		case err == nil:
			wait = period
		case wait == period:
			wait = retry
		default:
			wait = min(2*wait, period)
		}
	}
}

type clockFunc func() (now time.Time, bound time.Duration, ok bool)

func (f clockFunc) ClusterTime() (time.Time, time.Duration, bool) { return f() }
