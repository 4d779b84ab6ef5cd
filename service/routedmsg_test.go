package service_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutedMessageWithoutResourceIsRefused: a message whose type names
// a resource (message.Routed) never runs without one: the Client refuses
// to send it, and the portal refuses one published by hand (another
// language, a forged message) with bad_request; no handler ran.
func TestRoutedMessageWithoutResourceIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{})
		client := c.Client(t)

		_, err := service.Call[Touched](t.Context(), client, APITouch{})
		require.ErrorIs(t, err, message.ErrBadRequest, "through Client: a Routed message naming no resource is not sent")
		assert.Equal(t, message.RetryNever, message.CodeOf(err).Retry())

		_, err = service.Call[Touched](t.Context(), client, APITouch{Resource: message.NewUUID()}, bus.WithResource(message.NewUUID()))
		require.ErrorIs(t, err, message.ErrBadRequest, "through Client: WithResource must not contradict the payload")

		res := message.NewUUID()
		for name, envRes := range map[string]string{"without resource_uuid": "", "with another resource_uuid": message.NewUUID()} {
			reply := rawRequest(t, c, bus.APIPortal, &wire.Envelope{
				Type: "svctest.v1.APITouch", ResourceUUID: envRes, Body: []byte(`{"resource":"` + res + `"}`),
			})
			require.NotNil(t, reply.Error, "through the portal, %s: refused", name)
			assert.ErrorIs(t, reply.Error, message.ErrBadRequest, name)
			// Straight to a node's service queue: refused there too.
			reply = rawRequest(t, c, bus.ServiceID("recorder", c.Node(1).UUID()), &wire.Envelope{
				Type: "svctest.v1.Touch", ResourceUUID: envRes, Body: []byte(`{"resource":"` + res + `"}`),
			})
			require.NotNil(t, reply.Error, "on a service queue, %s: refused", name)
			assert.ErrorIs(t, reply.Error, message.ErrBadRequest, name)
		}
		assert.Empty(t, j.all(), "no handler ran")

		reply := rawRequest(t, c, bus.APIPortal, &wire.Envelope{
			Type: "svctest.v1.APITouch", ResourceUUID: res, Body: []byte(`{"resource":"` + res + `"}`),
		})
		require.Nil(t, reply.Error, "the same message with its resource runs")
		require.Len(t, j.all(), 1)
		assert.Equal(t, c.Owner(res), j.all()[0].node, "on the resource's owner")
	})
}

// rawRequest publishes env as a request to target from a transport of
// its own, bypassing every check of a sending bus, and returns the reply.
func rawRequest(t *testing.T, c *servicetest.Cluster, target string, env *wire.Envelope) *wire.Envelope {
	t.Helper()
	id := message.NewUUID()
	tr := c.Network().Transport("raw-" + id)
	defer tr.Close()
	q := "test.reply.raw" + id
	ctx := t.Context()
	require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	defer tr.DeleteQueue(context.Background(), q)
	replies := make(chan *wire.Envelope, 1)
	cons, err := tr.Consume(ctx, q, driver.ConsumeOptions{}, func(d driver.Delivery) {
		e, err := wire.DecodeEnvelope(d.Body(), 0)
		_ = d.Ack()
		if err == nil {
			replies <- e
		}
	})
	require.NoError(t, err)
	defer cons.Cancel()
	env.ID, env.Kind, env.ServiceID, env.CorrelationID, env.ReplyTo, env.Source = id, wire.KindRequest, target, id, q, "raw"
	env.Timeout = 5 * time.Second
	data, err := wire.EncodeEnvelope(env, 0)
	require.NoError(t, err)
	require.NoError(t, tr.Publish(ctx, "test.message."+target, data))
	select {
	case r := <-replies:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no reply within 10 s")
		return nil
	}
}

// Local is a message about no resource: Node.Call runs it on the local
// node.
type Local struct{}

// TestCallRule: Node.Call sends a message about a resource to its owner
// and any other to the local node; a forged owner header cannot make a
// node run what it does not own.
func TestCallRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry()
		message.MustRegister[Local](reg, "svctest.v1.Local")
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, r *bus.Request, _ Local) (Touched, error) {
			return Touched{Node: r.Node()}, nil
		})
		bus.Handle(mux, func(ctx context.Context, r *bus.Request, m Touch) (Touched, error) {
			assert.Equal(t, m.Resource, r.Resource())
			return Touched{Node: r.Node()}, nil
		})
		c := servicetest.Start(t, servicetest.Options{Nodes: 3, Registry: reg,
			Services: func(int, nodekit.Env) []service.Service { return []service.Service{service.Named("where", mux)} }})
		for i := range 3 {
			n := c.Node(i)
			got, err := service.Call[Touched](t.Context(), n, Local{})
			require.NoError(t, err)
			assert.Equal(t, n.UUID(), got.Node, "a message about no resource runs on the local node")
			for _, res := range uuids(20) {
				got, err := service.Call[Touched](t.Context(), n, Touch{Resource: res},
					bus.WithHeader(wire.HeaderOwner, n.UUID()))
				require.NoError(t, err)
				assert.Equal(t, c.Owner(res), got.Node, "a message about a resource runs on its owner, whatever header the caller set")
			}
			res := message.NewUUID()
			got, err = service.Call[Touched](t.Context(), n, Local{}, bus.WithResource(res))
			require.NoError(t, err)
			assert.Equal(t, c.Owner(res), got.Node, "WithResource routes a type that names no resource")
		}
	})
}

// TestLifecycleWaits: AwaitMembers and AwaitConverged replace polling,
// Err and Close report an eviction.
func TestLifecycleWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := servicetest.Start(t, servicetest.Options{Nodes: 2, Registry: registry(), NoRejoin: true})
		a := c.Node(0)
		require.NoError(t, a.AwaitMembers(t.Context(), 2))
		require.NoError(t, a.AwaitConverged(t.Context()))

		// A third node: wait from the first, without polling.
		added := make(chan *service.Node, 1)
		go func() {
			n, err := c.Add(t.Context())
			assert.NoError(t, err)
			added <- n
		}()
		require.NoError(t, a.AwaitMembers(t.Context(), 3))
		require.NoError(t, a.AwaitConverged(t.Context()))
		third := <-added
		require.NotNil(t, third)
		for _, n := range []*service.Node{c.Node(0), c.Node(1), third} {
			assert.Len(t, n.Members(), 3)
			assert.Equal(t, a.Fingerprint(), n.Fingerprint())
		}

		// Bounded by ctx, saying what is missing.
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := a.AwaitMembers(ctx, 4)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "the ring holds 3")

		// Evicted with NoRejoin: the node stops, Err and Close say why,
		// and waits on it end at once.
		victim := c.Node(1)
		c.StopHeartbeat(victim.UUID())
		c.WaitGone(t, victim.UUID(), time.Second)
		c.ResumeHeartbeat(victim.UUID()) // it learns it was evicted
		select {
		case <-victim.Done():
		case <-time.After(time.Second):
			t.Fatal("the evicted node did not stop")
		}
		assert.ErrorIs(t, victim.Err(), service.ErrEvicted)
		assert.ErrorIs(t, victim.Err(), heartbeat.ErrEvicted)
		assert.ErrorIs(t, victim.Close(), service.ErrEvicted, "Close does not hide why the node stopped")
		err = victim.AwaitConverged(t.Context())
		assert.ErrorIs(t, err, service.ErrNotRunning)
		assert.ErrorIs(t, err, service.ErrEvicted)
		require.NoError(t, a.AwaitConverged(t.Context()))
		assert.NotContains(t, a.Members(), victim.UUID())
		assert.NoError(t, a.Err(), "a running node has no error")
	})
}

// TestNonOwnerNeverRuns: a message about a resource that reaches a node
// which does not own it, without the owner header (a raw sender addressing
// that node's queue), never runs there: a request is answered not_owner,
// a one-way message is forwarded to the owner and runs there.
func TestNonOwnerNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry()
		var mu sync.Mutex
		ran := map[string][]string{} // resource -> nodes that ran it
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, r *bus.Request, m Touch) (Touched, error) {
			mu.Lock()
			ran[m.Resource] = append(ran[m.Resource], r.Node())
			mu.Unlock()
			return Touched{Node: r.Node()}, nil
		})
		c := servicetest.Start(t, servicetest.Options{Nodes: 3, Registry: reg,
			Services: func(int, nodekit.Env) []service.Service { return []service.Service{service.Named("where", mux)} }})
		sender := c.Node(0).Bus()
		for _, res := range uuids(30) {
			owner := c.Owner(res)
			for i := range 3 {
				n := c.Node(i)
				if n.UUID() == owner {
					continue
				}
				_, err := bus.Call[Touched](t.Context(), sender, bus.ServiceID("where", n.UUID()), Touch{Resource: res})
				require.ErrorIs(t, err, message.ErrNotOwner, "a request about %s sent straight to non-owner %s", res, n.UUID())
				require.NoError(t, sender.Send(t.Context(), bus.ServiceID("where", n.UUID()), Touch{Resource: res}))
			}
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for res, nodes := range ran {
			for _, node := range nodes {
				assert.Equal(t, c.Owner(res), node, "resource %s ran on a node that does not own it", res)
			}
			assert.Len(t, nodes, 2, "each one-way message about %s ran once, on the owner", res)
		}
		assert.Len(t, ran, 30)
	})
}
