package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

// demoOptions configure runDemo. The zero value works.
type demoOptions struct {
	verbose bool          // timings and full errors in the output
	latency time.Duration // simulated hypervisor latency per operation
	logger  *slog.Logger  // node and service logs; nil discards them
}

// The reasons a message reached the node that handled it.
const (
	routeOwner       = "ring owner"                  // sent by a node, routed by the resource's UUID
	routeLocal       = "local creation"              // a creation message, sent to the sender's own node
	routePortal      = "api.portal → owner"          // from a client; the portal routed it by UUID
	routePortalLocal = "api.portal → local creation" // from a client; the portal's node created it
)

// demoReport is what the demo did, for its printout and its test.
type demoReport struct {
	prefix  string
	nodes   []nodeInfo
	portal  string   // the shared api.portal queue
	others  []string // other durable queues (the SDK's membership queues)
	ops     []opRecord
	kill    killRecord
	elapsed time.Duration
}

// nodeInfo is one node and the service queues it registered.
type nodeInfo struct {
	label, uuid string
	queues      []string
}

// opRecord is one message the demo sent and what became of it.
type opRecord struct {
	msg      string   // "StartVm"
	kind     string   // "host", "image" or "vm"
	resource string   // the resource's UUID
	sender   string   // node UUID, or "" for the client
	route    string   // one of the route constants
	handler  string   // node that handled it (from the reply); "" if it failed
	portal   string   // node whose api.portal forwarded it; "" if none
	owner    string   // ring owner of resource when it was sent
	members  []string // the ring (of a live node) the owner was computed on
	state    string   // resulting state (VM state, host status)
	detail   string   // e.g. the allocated host
	err      error    // the failure, if any
	prev     string   // for operations after the kill: the dead node that owned the resource
	took     time.Duration
}

// killRecord is the takeover after a node died.
type killRecord struct {
	victim        string
	threshold     time.Duration // the eviction threshold
	before, after []string      // ring members before the kill and after the eviction
	evictedAfter  time.Duration
	hosts         []hostTakeover
	vms           []string // VMs the victim owned
}

// hostTakeover is one host of the dead node and who took it over.
type hostTakeover struct {
	host      string
	newOwner  string // ring owner after the eviction
	managedBy string // the store's record: who reconnected it
	status    cloud.HostStatus
	takeovers int
	after     time.Duration // from the eviction until the store showed it reconnected
}

// runDemo runs the scripted demo: 3 nodes on the in-memory bus, hosts,
// an image and VMs added and operated through the ring and api.portal,
// one failing hypervisor call, then a node killed and its hosts and VMs
// taken over. It prints as it goes to w and returns what it did.
func runDemo(ctx context.Context, w io.Writer, opts demoOptions) (*demoReport, error) {
	start := time.Now()
	if opts.logger == nil {
		opts.logger = slog.New(slog.DiscardHandler)
	}
	const prefix = bus.DefaultPrefix
	hb := heartbeat.TestConfig()
	c, err := startCluster(ctx, clusterConfig{
		nodes:        3,
		prefix:       prefix,
		heartbeat:    hb,
		hypervisor:   simhv.Config{Latency: opts.latency},
		pingInterval: 100 * time.Millisecond,
		logger:       opts.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("start the cluster: %w", err)
	}
	defer c.close()
	cl, err := c.client(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("start a client: %w", err)
	}
	defer cl.Close()

	d := &demo{c: c, cl: cl, r: &demoReport{prefix: prefix}, p: newPrinter(w, opts.verbose), threshold: hb.EvictAfter}
	for _, m := range c.all() {
		d.p.labels[m.node.UUID()] = m.label
	}
	d.queues()
	d.p.intro(d.r)

	A, B := c.all()[0], c.all()[1]
	// 1. Hosts and an image, through api.portal, two hosts owned by each node.
	d.p.section("1. A client that is not a node adds hosts and an image through api.portal;",
		"   the portal that takes each message forwards it to the resource's ring owner:")
	var hosts []string
	for _, m := range c.all() {
		for range 2 {
			hosts = append(hosts, d.uuidOwnedBy(m))
		}
	}
	for i, h := range hosts {
		if _, err := d.portalOp(ctx, "AddHost", "host", h, api.AddHost{UUID: h, Name: fmt.Sprintf("host-%d", i+1), Address: fmt.Sprintf("10.0.0.%d", 11+i)}); err != nil {
			return nil, err
		}
	}
	image := message.NewUUID()
	if _, err := d.portalOp(ctx, "AddImage", "image", image, api.AddImage{UUID: image, Name: "ubuntu-24.04", URL: "http://images.local/ubuntu-24.04.qcow2", SizeMB: 2048}); err != nil {
		return nil, err
	}

	// 2. VMs: creation goes to the local node. Each VM is owned by the
	// node after its creator, so creator and owner differ.
	d.p.section("2. Creating VMs: a creation message goes to the local node, which asks its own host service:")
	var vms []string
	for i, m := range c.all() {
		owner := c.all()[(i+1)%len(c.all())]
		vm := d.uuidOwnedBy(owner)
		vms = append(vms, vm)
		msg := api.CreateVm{UUID: vm, Name: fmt.Sprintf("vm-%d", i+1), ImageUUID: image}
		if i < 2 {
			err = d.create(ctx, m, msg)
		} else {
			err = d.createViaPortal(ctx, msg)
		}
		if err != nil {
			return nil, err
		}
	}

	// 3. Operations by VM UUID: routed to the owner.
	d.p.section(fmt.Sprintf("3. Operating on VMs by UUID: node %s sends, the ring routes each to the VM's owner:", A.label))
	for _, vm := range vms {
		if err := d.nodeOp(ctx, A, "StartVm", vm, api.StartVm{UUID: vm}); err != nil {
			return nil, err
		}
	}
	if _, err := d.portalOp(ctx, "RebootVm", "vm", vms[0], api.RebootVm{UUID: vms[0]}); err != nil {
		return nil, err
	}

	// 4. A failing hypervisor call.
	d.p.section("4. Failure injection: the simulated hypervisor fails the next start:")
	if _, err := d.portalOp(ctx, "StopVm", "vm", vms[1], api.StopVm{UUID: vms[1]}); err != nil {
		return nil, err
	}
	c.hv.FailNext(simhv.OpStartVM, 1)
	if _, err := d.portalOp(ctx, "StartVm", "vm", vms[1], api.StartVm{UUID: vms[1]}); err == nil {
		return nil, errors.New("the injected failure did not fail StartVm")
	}
	if _, err := d.portalOp(ctx, "GetVm", "vm", vms[1], api.GetVm{UUID: vms[1]}); err != nil {
		return nil, err
	}
	if _, err := d.portalOp(ctx, "StartVm", "vm", vms[1], api.StartVm{UUID: vms[1]}); err != nil {
		return nil, err
	}

	// 5. Kill a node; its hosts and VMs are taken over.
	if err := d.killAndTakeOver(ctx, B, hosts, vms); err != nil {
		return nil, err
	}
	d.r.elapsed = time.Since(start)
	d.p.done(d.r)
	return d.r, nil
}

// demo is the state of one run.
type demo struct {
	c    *cluster
	cl   *service.Client
	r    *demoReport
	p    *printer
	prev string // while set, the operations are on resources of this dead node

	threshold time.Duration // the heartbeat eviction threshold
}

// queues records the durable queues from the broker itself.
func (d *demo) queues() {
	qs := d.c.net.Queues()
	for _, m := range d.c.all() {
		ni := nodeInfo{label: m.label, uuid: m.node.UUID()}
		for _, svc := range []string{api.HostService, api.ImageService, api.VMService} {
			name := d.r.prefix + ".message." + svc + "." + m.node.UUID()
			if slices.ContainsFunc(qs, func(q membus.QueueInfo) bool { return q.Name == name }) {
				ni.queues = append(ni.queues, name)
			}
		}
		d.r.nodes = append(d.r.nodes, ni)
	}
	for _, q := range qs {
		switch {
		case q.Kind != driver.QueueDurable:
		case q.Name == d.r.prefix+".message."+bus.APIPortal:
			d.r.portal = q.Name
		case strings.Contains(q.Name, ".message.cloudbus-membership."):
			d.r.others = append(d.r.others, q.Name)
		}
	}
}

// uuidOwnedBy returns a new resource UUID that m owns on the ring.
func (d *demo) uuidOwnedBy(m *member) string {
	for {
		id := message.NewUUID()
		if m.node.Owns(id) {
			return id
		}
	}
}

// ring returns the owner of resource and the membership it was computed
// on, from the first live node's ring.
func (d *demo) ring(resource string) (owner string, members []string) {
	n := d.c.live()[0].node
	owner, _ = n.Owner(resource)
	return owner, n.Members()
}

// portalOp sends a routed API message through api.portal.
func (d *demo) portalOp(ctx context.Context, name, kind, resource string, msg any) (any, error) {
	owner, members := d.ring(resource)
	op := opRecord{msg: name, kind: kind, resource: resource, route: routePortal, owner: owner, members: members}
	t := time.Now()
	reply, err := service.Call[any](ctx, d.cl, msg)
	op.took = time.Since(t)
	return reply, d.record(op, reply, err)
}

// nodeOp sends a routed message from node m to the owner.
func (d *demo) nodeOp(ctx context.Context, m *member, name, resource string, msg any) error {
	owner, members := d.ring(resource)
	op := opRecord{msg: name, kind: "vm", resource: resource, sender: m.node.UUID(), route: routeOwner, owner: owner, members: members}
	t := time.Now()
	reply, err := service.Call[any](ctx, m.node, msg)
	op.took = time.Since(t)
	return d.record(op, reply, err)
}

// create sends CreateVm from node m to its own VM service.
func (d *demo) create(ctx context.Context, m *member, msg api.CreateVm) error {
	op := opRecord{msg: "CreateVm", kind: "vm", resource: msg.UUID, sender: m.node.UUID(), route: routeLocal}
	t := time.Now()
	reply, err := service.Call[any](ctx, m.node, msg)
	op.took = time.Since(t)
	return d.record(op, reply, err)
}

// createViaPortal sends CreateVm through api.portal, without a resource:
// the portal's node creates it.
func (d *demo) createViaPortal(ctx context.Context, msg api.CreateVm) error {
	op := opRecord{msg: "CreateVm", kind: "vm", resource: msg.UUID, route: routePortalLocal}
	t := time.Now()
	reply, err := service.Call[any](ctx, d.cl, msg)
	op.took = time.Since(t)
	return d.record(op, reply, err)
}

// record fills op from the reply (a pointer to a registered reply type),
// keeps it and prints it. It returns err.
func (d *demo) record(op opRecord, reply any, err error) error {
	op.err = err
	var h api.Handling
	switch r := reply.(type) {
	case *api.HostReply:
		h, op.state = r.Handling, string(r.Host.Status)
	case *api.ImageReply:
		h = r.Handling
	case *api.VmReply:
		h, op.state = r.Handling, string(r.VM.State)
	case *api.VmCreated:
		h, op.state = r.Handling, string(r.VM.State)
		op.detail = "on host " + short(r.VM.HostUUID) + " (AllocateHost on " + d.p.label(r.AllocatedBy) + ")"
	}
	op.handler, op.portal, op.prev = h.Node, h.Portal, d.prev
	d.r.ops = append(d.r.ops, op)
	d.p.op(op)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", op.msg, op.kind, op.resource, err)
	}
	return nil
}

// killAndTakeOver kills victim, waits until every ring dropped it and
// every host it owned was reconnected by its new owner, then operates on
// the VMs it owned.
func (d *demo) killAndTakeOver(ctx context.Context, victim *member, hosts, vms []string) error {
	k := &d.r.kill
	k.victim = victim.node.UUID()
	k.threshold = d.threshold
	k.before = victim.node.Members()
	before, err := ringOf(k.before)
	if err != nil {
		return err
	}
	var victimHosts []string
	for _, h := range hosts {
		if o, _ := before.Locate(h); o == k.victim {
			victimHosts = append(victimHosts, h)
		}
	}
	for _, vm := range vms {
		if o, _ := before.Locate(vm); o == k.victim {
			k.vms = append(k.vms, vm)
		}
	}
	d.p.section(fmt.Sprintf("5. Node %s dies without a goodbye (no heartbeat, no bus, no database).", victim.label))

	killed := time.Now()
	d.c.kill(victim)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.c.await(wctx, "every ring dropped the dead node", func() bool {
		return d.c.converged() && !slices.Contains(d.c.live()[0].node.Members(), k.victim)
	}); err != nil {
		return err
	}
	k.evictedAfter = time.Since(killed)
	evicted := time.Now()
	k.after = d.c.live()[0].node.Members()
	d.p.evicted(k)

	after, err := ringOf(k.after)
	if err != nil {
		return err
	}
	took := map[string]time.Duration{} // host -> when it was reconnected, after the eviction
	reconnected := func() bool {
		for _, h := range victimHosts {
			if _, ok := took[h]; ok {
				continue
			}
			rec, err := d.c.db.Host(ctx, h)
			owner, _ := after.Locate(h)
			if err != nil || rec.ManagedBy != owner || rec.Status != cloud.HostConnected {
				return false
			}
			took[h] = time.Since(evicted)
		}
		return true
	}
	if err := d.c.await(wctx, "every host of the dead node was reconnected by its new owner", reconnected); err != nil {
		return err
	}
	for _, h := range victimHosts {
		rec, _ := d.c.db.Host(ctx, h)
		owner, _ := after.Locate(h)
		k.hosts = append(k.hosts, hostTakeover{host: h, newOwner: owner, managedBy: rec.ManagedBy,
			status: rec.Status, takeovers: rec.Takeovers, after: took[h]})
	}
	d.p.takeover(k, d.c)

	sender := d.c.live()[0]
	d.prev = k.victim
	defer func() { d.prev = "" }()
	for _, vm := range k.vms {
		if _, err := d.portalOp(ctx, "StopVm", "vm", vm, api.StopVm{UUID: vm}); err != nil {
			return err
		}
		if err := d.nodeOp(ctx, sender, "StartVm", vm, api.StartVm{UUID: vm}); err != nil {
			return err
		}
	}
	return nil
}

// ringOf builds a ring holding members, to compute owners independently
// of any node's copy.
func ringOf(members []string) (ring.Ring, error) {
	r, err := ring.New(ring.DefaultConfig())
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		if err := r.Add(m); err != nil {
			return nil, err
		}
	}
	return r, nil
}
