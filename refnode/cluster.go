package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	hbmem "github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

// clusterConfig configures an in-process cluster of refnode nodes.
type clusterConfig struct {
	nodes        int
	prefix       string
	heartbeat    heartbeat.Config
	hypervisor   simhv.Config
	pingInterval time.Duration
	logger       *slog.Logger
	// observer, optional, returns the bus observer of the node with the
	// given UUID.
	observer func(node string) bus.Observer
	// wrapStore, optional, wraps each node's heartbeat store (to count
	// its calls, say).
	wrapStore func(heartbeat.Store) heartbeat.Store
	// heartbeatStore, optional, returns the heartbeat store of the node
	// with the given UUID, instead of the cluster's in-memory one (whose
	// unreachability a kill still sets).
	heartbeatStore func(node string) heartbeat.Store
}

// cluster is N management nodes in one process, each with refnode's
// services, sharing an in-memory bus, heartbeat store, resource store and
// simulated hypervisor: everything a real cluster shares, and nothing
// else.
type cluster struct {
	net *membus.Network
	hb  *hbmem.Store
	db  *memdb.Store
	hv  *simhv.Hypervisor
	reg *message.Registry

	mu      sync.Mutex
	members []*member
}

// member is one node of the cluster.
type member struct {
	label  string // "A", "B", … in start order
	node   *service.Node
	tr     *membus.Transport
	svc    *services.Set
	killed bool
}

// startCluster starts cfg.nodes nodes and waits until every ring holds
// all of them. On error it closes what it started.
func startCluster(ctx context.Context, cfg clusterConfig) (*cluster, error) {
	hv, err := simhv.New(cfg.hypervisor)
	if err != nil {
		return nil, err
	}
	c := &cluster{net: membus.New(), hb: hbmem.New(hbmem.Config{}), db: memdb.New(), hv: hv, reg: message.NewRegistry()}
	c.db.UseFence(c.hb, memfence.Config{MaxAge: cfg.heartbeat.EvictAfter})
	if err := api.Register(c.reg); err != nil {
		return nil, err
	}
	for i := range cfg.nodes {
		if err := c.add(ctx, cfg, string(rune('A'+i))); err != nil {
			c.close()
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*cfg.heartbeat.EvictAfter)
	defer cancel()
	if err := c.all()[0].node.AwaitConverged(wctx); err != nil { // every ring holds every node
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) add(ctx context.Context, cfg clusterConfig, label string) error {
	id := message.NewUUID()
	tr := c.net.Transport(id)
	set, err := services.New(services.Config{
		Store:        c.db.For(id),
		Hypervisor:   c.hv,
		PingInterval: cfg.pingInterval,
		Logger:       cfg.logger,
	})
	if err != nil {
		_ = tr.Close()
		return err
	}
	var hbStore heartbeat.Store = c.hb.For(id)
	if cfg.heartbeatStore != nil {
		hbStore = cfg.heartbeatStore(id)
	}
	if cfg.wrapStore != nil {
		hbStore = cfg.wrapStore(hbStore)
	}
	var obs bus.Observer
	if cfg.observer != nil {
		obs = cfg.observer(id)
	}
	n, err := service.NewNode(service.Config{
		Node:      id,
		Prefix:    cfg.prefix,
		Transport: tr,
		Store:     hbStore,
		Registry:  c.reg,
		Services:  set.Services(),
		Heartbeat: cfg.heartbeat,
		Observer:  obs,
		Logger:    cfg.logger,
		// In memory a live node leaves in milliseconds; a killed one
		// (kill) waits out its unreachable store and bus until then.
		LeaveTimeout: 2 * time.Second,
	})
	if err != nil {
		_ = tr.Close()
		return err
	}
	if err := n.Start(ctx); err != nil {
		_ = tr.Close()
		return fmt.Errorf("start node %s: %w", label, err)
	}
	c.mu.Lock()
	c.members = append(c.members, &member{label: label, node: n, tr: tr, svc: set})
	c.mu.Unlock()
	return nil
}

// all returns every member, dead or alive, in start order.
func (c *cluster) all() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// markKilled marks m killed, as kill does first, and reports whether it
// was not marked before: a caller that kills m a moment later (after
// answering the request to) claims the kill here, so that a second
// request meanwhile finds m killed already.
func (c *cluster) markKilled(m *member) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !m.killed
	m.killed = true
	return first
}

// live returns the members that were not killed and serve.
func (c *cluster) live() []*member {
	var out []*member
	for _, m := range c.all() {
		c.mu.Lock()
		killed := m.killed
		c.mu.Unlock()
		if !killed && m.node.State() == service.StateServing {
			out = append(out, m)
		}
	}
	return out
}

// converged reports whether every live node's ring holds exactly the
// live nodes.
func (c *cluster) converged() bool {
	var ids []string
	live := c.live()
	for _, m := range live {
		ids = append(ids, m.node.UUID())
	}
	want := ring.FingerprintOf(ids)
	for _, m := range live {
		if m.node.Fingerprint() != want {
			return false
		}
	}
	return len(live) > 0
}

// kill crashes m: no goodbye, no heartbeat, no bus, no database. Its
// durable queues stay; the survivors evict it after the threshold.
//
// The bus goes first, as everything goes at once for a process killed:
// cut from the database while still on the bus, its running handlers
// would answer their callers with the database's errors, which no
// crashed process sends (a handler still running after the kill, as
// Network.Kill does not wait for it, reaches nobody).
func (c *cluster) kill(m *member) {
	c.mu.Lock()
	m.killed = true
	c.mu.Unlock()
	id := m.node.UUID()
	c.net.Kill(id)
	c.hb.SetUnreachable(id, true)
	c.db.SetUnreachable(id, true)
}

// await polls cond every millisecond until it holds or ctx ends.
func (c *cluster) await(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting until %s: %w", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// client returns a process that is not a node, calling through
// api.portal. The caller closes it; closing it closes its transport.
func (c *cluster) client(ctx context.Context, prefix string) (*service.Client, error) {
	tr := c.net.Transport("client-" + message.NewUUID())
	cl, err := service.NewClient(ctx, service.ClientConfig{Transport: tr, Prefix: prefix, Registry: c.reg, OwnTransport: true})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return cl, nil
}

// close stops every node (live ones say goodbye) and closes the
// transports. It is idempotent.
func (c *cluster) close() error {
	members := c.all()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = m.node.Close() })
	}
	wg.Wait()
	for _, m := range members {
		_ = m.tr.Close()
	}
	return errors.Join(errs...)
}
