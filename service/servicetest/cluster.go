// Package servicetest starts a cluster of management nodes inside a Go
// test, with the user's services, on an in-memory bus and an in-memory
// heartbeat store, and injects faults into it.
//
//	func TestTakeover(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) { // virtual time: instant, deterministic
//			c := servicetest.Start(t, servicetest.Options{
//				Nodes:    3,
//				Registry: reg,
//				Services: func(i int) []service.Service { return []service.Service{newCounter()} },
//			})
//			owner := c.Owner(resourceUUID)
//			c.StopHeartbeat(owner)           // it stops beating, without a goodbye
//			c.WaitConverged(t, time.Second)  // every ring copy agrees it is gone
//			...
//		})
//	}
//
// Every wait polls with a deadline, which costs nothing in a synctest
// bubble. Nodes are closed and the cluster torn down when the test ends.
package servicetest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

// Options configure a test cluster. Every zero field takes a default.
type Options struct {
	// Nodes is the number of nodes to start. Default 3.
	Nodes int
	// Services returns the services of the i-th node started (0-based);
	// called once per node, so each node gets its own instances.
	Services func(i int) []service.Service
	// Registry holds the payload types; shared by every node and client.
	// Default: a new registry.
	Registry *message.Registry
	// Heartbeat sets the timing. Default heartbeat.LocalConfig().
	Heartbeat heartbeat.Config
	// Bus tunes each node's bus (timeouts, concurrency, observer).
	Bus bus.Config
	// Prefix of the queue names. Default "test".
	Prefix string
	// StoreClock is the heartbeat store's clock, to simulate the
	// database's time. Default time.Now (virtual inside synctest).
	StoreClock func() time.Time
	// NewRing returns each node's ring copy. Default: the default ring.
	NewRing func() ring.Ring
	// Logger receives every node's logs. Default: discarded.
	Logger *slog.Logger
	// NoRejoin makes an evicted node stop for good instead of joining
	// again with a new epoch (service.Config.NoRejoin).
	NoRejoin bool
}

// Cluster is a running test cluster. Its methods are safe for concurrent
// use; those that wait take a testing.TB and fail the test on timeout.
type Cluster struct {
	opts    Options
	net     *membus.Network
	store   *memstore.Store
	started int

	mu    sync.Mutex
	nodes []*member // every node started, in start order
}

type member struct {
	node   *service.Node
	tr     *membus.Transport
	killed bool
}

// Start starts a cluster with [New], fails t if it cannot, and closes it
// when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// New starts opts.Nodes nodes and waits until every ring copy agrees
// (bounded by ctx and by ten eviction thresholds). The caller closes the
// cluster; on error New has closed what it started.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Registry == nil {
		opts.Registry = message.NewRegistry()
	}
	if opts.Heartbeat.Interval == 0 {
		opts.Heartbeat = heartbeat.LocalConfig()
	}
	if opts.Prefix == "" {
		opts.Prefix = "test"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		opts:  opts,
		net:   membus.New(),
		store: memstore.New(memstore.Config{Now: opts.StoreClock}),
	}
	for range opts.Nodes {
		if _, err := c.Add(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*opts.Heartbeat.EvictAfter)
	defer cancel()
	if err := c.AwaitConverged(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// AddNode starts one more node like [Cluster.Add], failing t if it cannot.
func (c *Cluster) AddNode(t testing.TB) *service.Node {
	t.Helper()
	n, err := c.Add(context.Background())
	if err != nil {
		t.Fatalf("servicetest: %v", err)
	}
	return n
}

// Add starts one more node and returns it once it is ready (other rings
// may still be adding it: see AwaitConverged).
func (c *Cluster) Add(ctx context.Context) (*service.Node, error) {
	c.mu.Lock()
	i := c.started
	c.started++
	c.mu.Unlock()
	id := message.NewUUID()
	tr := c.net.Transport(id)
	var svcs []service.Service
	if c.opts.Services != nil {
		svcs = c.opts.Services(i)
	}
	var r ring.Ring
	if c.opts.NewRing != nil {
		r = c.opts.NewRing()
	}
	n, err := service.NewNode(service.Config{
		Node:      id,
		Prefix:    c.opts.Prefix,
		Transport: tr,
		Store:     c.store.For(id),
		Registry:  c.opts.Registry,
		Ring:      r,
		Services:  svcs,
		Heartbeat: c.opts.Heartbeat,
		Bus:       c.opts.Bus,
		Logger:    c.opts.Logger,
		NoRejoin:  c.opts.NoRejoin,
	})
	if err != nil {
		_ = tr.Close()
		return nil, fmt.Errorf("node %d: %w", i, err)
	}
	if err := n.Start(ctx); err != nil {
		_ = tr.Close()
		return nil, fmt.Errorf("start node %d: %w", i, err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, &member{node: n, tr: tr})
	c.mu.Unlock()
	return n, nil
}

// Network returns the in-memory broker, for finer fault injection.
func (c *Cluster) Network() *membus.Network { return c.net }

// Store returns the in-memory heartbeat store.
func (c *Cluster) Store() *memstore.Store { return c.store }

// Registry returns the registry shared by the cluster.
func (c *Cluster) Registry() *message.Registry { return c.opts.Registry }

// Node returns the i-th node started (0-based), dead or alive.
func (c *Cluster) Node(i int) *service.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].node
}

// NodeByUUID returns the node with the given UUID, or nil.
func (c *Cluster) NodeByUUID(id string) *service.Node {
	if m := c.member(id); m != nil {
		return m.node
	}
	return nil
}

// Live returns the nodes that are serving (not killed, stopped or
// evicted), in start order.
func (c *Cluster) Live() []*service.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*service.Node
	for _, m := range c.nodes {
		if !m.killed && m.node.State() == service.StateServing {
			out = append(out, m.node)
		}
	}
	return out
}

// LiveUUIDs returns the UUIDs of the live nodes, sorted.
func (c *Cluster) LiveUUIDs() []string {
	var ids []string
	for _, n := range c.Live() {
		ids = append(ids, n.UUID())
	}
	slices.Sort(ids)
	return ids
}

func (c *Cluster) member(id string) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.nodes {
		if m.node.UUID() == id {
			return m
		}
	}
	return nil
}

func (c *Cluster) mustMember(id string) *member {
	m := c.member(id)
	if m == nil {
		panic(fmt.Sprintf("servicetest: no node %s in this cluster", id))
	}
	return m
}

// Kill crashes the node: its consumers vanish, its queues stay, it stops
// beating and says no goodbye. Peers evict it after the threshold.
func (c *Cluster) Kill(id string) {
	m := c.mustMember(id)
	c.mu.Lock()
	m.killed = true
	c.mu.Unlock()
	c.store.SetUnreachable(id, true)
	c.net.Kill(id)
}

// StopHeartbeat cuts the node off from the heartbeat store: it keeps
// serving but cannot beat, so peers evict it, and it learns so when
// ResumeHeartbeat lets it reach the store again.
func (c *Cluster) StopHeartbeat(id string) { c.store.SetUnreachable(id, true) }

// ResumeHeartbeat undoes StopHeartbeat.
func (c *Cluster) ResumeHeartbeat(id string) { c.store.SetUnreachable(id, false) }

// Drop silently loses the node's bus traffic while on.
func (c *Cluster) Drop(id string, on bool) { c.net.Drop(id, on) }

// Partition cuts the node off from the bus (with errors) while on.
func (c *Cluster) Partition(id string, on bool) { c.net.Partition(id, on) }

// Stop closes the node in order (goodbye) and waits until it left.
func (c *Cluster) Stop(id string) error { return c.mustMember(id).node.Close() }

// Owner returns the owner of resourceUUID on the first live node's ring.
// After WaitConverged every live node agrees.
func (c *Cluster) Owner(resourceUUID string) string {
	live := c.Live()
	if len(live) == 0 {
		return ""
	}
	owner, err := live[0].Owner(resourceUUID)
	if err != nil {
		return ""
	}
	return owner
}

// Converged reports whether every live node's ring holds exactly the
// live nodes.
func (c *Cluster) Converged() bool {
	want := ring.FingerprintOf(c.LiveUUIDs())
	for _, n := range c.Live() {
		if n.Fingerprint() != want {
			return false
		}
	}
	return true
}

// AwaitConverged waits until every live node's ring copy holds exactly
// the live nodes, or ctx ends.
func (c *Cluster) AwaitConverged(ctx context.Context) error {
	return c.Await(ctx, "every ring copy holds exactly the live nodes", c.Converged)
}

// WaitConverged is AwaitConverged bounded by timeout, failing t.
func (c *Cluster) WaitConverged(t testing.TB, timeout time.Duration) {
	t.Helper()
	c.WaitFor(t, timeout, "every ring copy holds exactly the live nodes", c.Converged)
}

// Gone reports whether no live node other than id holds id in its ring.
func (c *Cluster) Gone(id string) bool {
	for _, n := range c.Live() {
		if n.UUID() != id && slices.Contains(n.Members(), id) {
			return false
		}
	}
	return true
}

// AwaitGone waits until no other live node's ring holds the node id (it
// left, or was evicted after StopHeartbeat or Kill), or ctx ends.
func (c *Cluster) AwaitGone(ctx context.Context, id string) error {
	return c.Await(ctx, "no ring holds node "+id, func() bool { return c.Gone(id) })
}

// WaitGone is AwaitGone bounded by timeout, failing t.
func (c *Cluster) WaitGone(t testing.TB, id string, timeout time.Duration) {
	t.Helper()
	c.WaitFor(t, timeout, "no ring holds node "+id, func() bool { return c.Gone(id) })
}

// Await polls cond every millisecond until it holds, or returns an error
// naming what when ctx ends.
func (c *Cluster) Await(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("servicetest: waiting until %s: %w", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// WaitFor polls cond every millisecond until it holds, failing t after
// timeout with what.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Await(ctx, what, cond); err != nil {
		t.Fatalf("servicetest: not within %s: %s", timeout, what)
	}
}

// Client returns a client-mode process calling through api.portal,
// closed when the test ends.
func (c *Cluster) Client(t testing.TB) *service.Client {
	t.Helper()
	cl, err := c.NewClient(context.Background())
	if err != nil {
		t.Fatalf("servicetest: client: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NewClient returns a client-mode process calling through api.portal.
// Closing the client also closes its transport.
func (c *Cluster) NewClient(ctx context.Context) (*service.Client, error) {
	tr := c.net.Transport("client-" + message.NewUUID())
	cl, err := service.NewClient(ctx, service.ClientConfig{
		Transport: tr, Prefix: c.opts.Prefix, Registry: c.opts.Registry, OwnTransport: true,
	})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return cl, nil
}

// Close stops every node (in order for the live ones) and closes the
// transports. It is idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range nodes {
		wg.Go(func() { _ = m.node.Close() })
	}
	wg.Wait()
	for _, m := range nodes {
		_ = m.tr.Close()
	}
}
