package servicetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/internal/svcx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// Cluster is a running test cluster, safe for concurrent use. Its Wait
// methods fail the test on timeout.
type Cluster struct {
	opts    Options
	net     *membus.Network
	store   *memstore.Store // in memory; nil on SQL
	sql     *sqlCluster     // on SQL; nil in memory
	started int

	mu     sync.Mutex
	nodes  []*member // every node started, in start order
	closed bool      // by Close
}

type member struct {
	node       *service.Node
	tr         *membus.Transport
	db         *nodeDB       // on SQL: the node's pools, heartbeat store and fence
	setCut     func(on bool) // cuts the node's view of the heartbeat store off, or back
	endSession func()        // ends the node's database session, as its death does
	killed     bool          // by Kill, for good
	cut        bool          // off the heartbeat store, from StopHeartbeat to ResumeHeartbeat
	parted     bool          // off the bus, from Partition(true) to Partition(false)
	paused     chan struct{} // while paused (Pause): closed to resume
	offset     atomic.Int64  // its clock's offset in ns (ClockOffset)
}

// gate holds the node's handlers while it is paused (internal/svcx).
func (c *Cluster) gate(m *member) func(ctx context.Context) error {
	return func(context.Context) error {
		c.mu.Lock()
		ch := m.paused
		c.mu.Unlock()
		if ch != nil {
			<-ch // as a paused process: not even its context wakes it
		}
		return nil
	}
}

// Start starts a cluster with [New], failing t if it cannot, and closes
// it when the test ends, failing t if the close leaves tables behind.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Errorf("servicetest: close the cluster: %v", err)
		}
	})
	return c
}

// New starts opts.Nodes nodes and waits until every ring agrees (bounded
// by ctx and ten eviction thresholds). It reports every problem with opts
// at once, starting nothing; with Options.Database it connects to the
// database first, failing if it cannot within ctx. The caller closes the
// cluster; on error New has closed what it started and dropped the
// tables it created.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, net: membus.New()}
	if opts.Database == "" {
		c.store = memstore.New(memstore.Config{Now: opts.StoreClock})
	} else if c.sql, err = openSQL(ctx, opts.Database, opts.Logger); err != nil {
		return nil, err
	}
	for range opts.Nodes {
		if _, err := c.Add(ctx); err != nil {
			return nil, errors.Join(err, c.close())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*opts.Heartbeat.EvictAfter)
	defer cancel()
	if err := c.AwaitConverged(ctx); err != nil {
		err = fmt.Errorf("%w; the nodes:%s", err, c.rings())
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

// AddNode is [Cluster.Add], failing t if it cannot.
func (c *Cluster) AddNode(t testing.TB) *service.Node {
	t.Helper()
	n, err := c.Add(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Add starts one more node and returns it once it serves; other rings
// may still be adding it. On SQL it first opens the node's pools, its
// heartbeat store and its fence, and migrates Options.Schema.
func (c *Cluster) Add(ctx context.Context) (*service.Node, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("servicetest: add a node: the cluster is closed")
	}
	i := c.started
	c.started++
	c.mu.Unlock()
	id := message.NewUUID()
	m := &member{}
	hb := c.opts.Heartbeat
	base := hb.Now
	if base == nil {
		base = time.Now
	}
	hb.Now = func() time.Time { return base().Add(time.Duration(m.offset.Load())) } // ClockOffset
	env := nodekit.Env{Node: id, Heartbeat: hb.WithDefaults(), Logger: c.opts.Logger}
	if c.sql == nil {
		env.Store = c.store.For(id)
		m.setCut = func(on bool) { c.store.SetUnreachable(id, on) }
		m.endSession = func() { c.store.EndSession(id) }
	} else {
		db, err := c.sql.openNode(ctx, id, c.opts)
		if err != nil {
			return nil, fmt.Errorf("servicetest: node %d: %w", i, err)
		}
		m.db, m.setCut, m.endSession = db, db.view.setCut, db.view.endSessions
		env.DB, env.Dialect, env.Tables = db.db.DB(), c.sql.info.Dialect, c.sql.info.Tables
		env.Fence, env.Store = db.fence, db.view
	}
	m.tr = c.net.Transport(id)
	var svcs []service.Service
	if c.opts.Services != nil {
		svcs = c.opts.Services(i, env)
	}
	var r ring.Ring
	if c.opts.NewRing != nil {
		r = c.opts.NewRing()
	}
	n, err := service.NewNode(service.Config{
		Node:      id,
		Prefix:    c.opts.Prefix,
		Transport: m.tr,
		Store:     env.Store,
		Registry:  c.opts.Registry,
		Ring:      r,
		Services:  svcs,
		Heartbeat: hb,
		Limits:    c.opts.Limits,
		Logger:    c.opts.Logger,
		NoRejoin:  c.opts.NoRejoin,
		Tracer:    c.opts.Tracer,
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("servicetest: node %d: %w", i, err), m.closeLinks())
	}
	if err := n.Start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("servicetest: start node %d: %w", i, err), m.closeLinks())
	}
	m.node = n
	svcx.SetGate(n, c.gate(m))
	c.mu.Lock()
	if c.closed { // Close ran while the node started
		c.mu.Unlock()
		return nil, errors.Join(errors.New("servicetest: add a node: the cluster was closed while it started"), n.Close(), m.closeLinks())
	}
	c.nodes = append(c.nodes, m)
	c.mu.Unlock()
	return n, nil
}

// closeLinks closes m's transport and, on SQL, its store and pools,
// once its node is closed or was never started.
// A transport's error is of no interest to the test: its node is gone.
func (m *member) closeLinks() error {
	_ = m.tr.Close()
	if m.db != nil {
		return m.db.close()
	}
	return nil
}

// Network returns the in-memory broker, for finer fault injection.
func (c *Cluster) Network() *membus.Network { return c.net }

// Store returns the in-memory heartbeat store, for finer fault injection
// (memstore.Store.SetLatency), or nil for a cluster on SQL: its nodes
// reach the database each through a store of their own (nodekit.Env.Store),
// and [Cluster.Database] says where it is.
func (c *Cluster) Store() *memstore.Store { return c.store }

// Database describes the cluster's SQL database, or is the zero
// Database for a cluster in memory.
func (c *Cluster) Database() Database {
	if c.sql == nil {
		return Database{}
	}
	return c.sql.info
}

// DB returns the cluster's own pool on its SQL database, for the test to
// read what the services wrote (the tables are named after
// Database().Tables), or nil for a cluster in memory. It is closed by
// Close; a test must not close it. Its few connections are the
// cluster's, not a node's: no fault applies to them.
func (c *Cluster) DB() *sql.DB {
	if c.sql == nil {
		return nil
	}
	return c.sql.admin.DB
}

// Registry returns the cluster's registry.
func (c *Cluster) Registry() *message.Registry { return c.opts.Registry }

// Node returns the i-th node started, from 0, dead or alive.
func (c *Cluster) Node(i int) *service.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].node
}

// NodeByUUID returns the node with that UUID, or nil.
func (c *Cluster) NodeByUUID(id string) *service.Node {
	if m := c.member(id); m != nil {
		return m.node
	}
	return nil
}

// Live returns the live nodes (see the package documentation), in start
// order. The caller owns the slice.
func (c *Cluster) Live() []*service.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*service.Node
	for _, m := range c.nodes {
		if m.liveLocked() {
			out = append(out, m.node)
		}
	}
	return out
}

// liveLocked reports whether m is live; c.mu is held.
func (m *member) liveLocked() bool {
	return !m.killed && !m.cut && !m.parted && m.paused == nil && m.node.State() == service.StateServing && !m.node.LeaseExpired()
}

// LiveUUIDs returns the live nodes' UUIDs, sorted.
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

// Kill crashes the node: its consumers vanish, its queues stay, its
// database session ends, it stops beating and says no goodbye. It is not
// live from then on, and a peer evicts it once its beat is a quarter
// Interval late and its session lock free (after EvictAfter with
// Options.NoSessionLocks). Its handlers that are running go on, and on
// SQL the pool of its services stays open: a write of theirs reaches the
// database, where the fence refuses it once peers evicted the node. It
// panics if the cluster has no node id.
func (c *Cluster) Kill(id string) {
	m := c.mustMember(id)
	c.mu.Lock()
	m.killed = true
	c.mu.Unlock()
	m.setCut(true)
	c.net.Kill(id)
	m.endSession()
}

// StopHeartbeat cuts the node off from the heartbeat store: it keeps
// consuming but cannot beat, and fences itself after the lease. It is not
// live from then on; peers evict it EvictAfter to EvictAfter+Interval
// after its last beat, which it learns only after [Cluster.ResumeHeartbeat].
// It panics if the cluster has no node id.
func (c *Cluster) StopHeartbeat(id string) {
	m := c.mustMember(id)
	c.mu.Lock()
	m.cut = true
	c.mu.Unlock()
	m.setCut(true)
}

// ResumeHeartbeat undoes StopHeartbeat. A node not yet evicted is live
// again once its lease is renewed; an evicted one rejoins with a new epoch one
// interval after its next beat, unless Options.NoRejoin. A killed node
// stays dead; a paused one beats again once unpaused. It panics if the cluster has no node id.
func (c *Cluster) ResumeHeartbeat(id string) {
	m := c.mustMember(id)
	c.mu.Lock()
	m.cut = false
	held := m.killed || m.paused != nil
	c.mu.Unlock()
	if !held {
		m.setCut(false)
	}
}

// Drop silently loses the node's bus traffic while on; it goes on beating,
// so it stays live and in every ring.
func (c *Cluster) Drop(id string, on bool) { c.net.Drop(id, on) }

// Partition cuts the node off from the bus while on, its store link
// untouched: its sends fail with message.ErrUnavailable and its transport
// reports the cut. It is not live from then on; a peer evicts it
// heartbeat.Config.BusDownAfter later, plus up to two intervals, and the
// survivors drain its queues. Healed, it rejoins with a new epoch unless
// Options.NoRejoin. It panics if the cluster has no node id.
func (c *Cluster) Partition(id string, on bool) {
	m := c.mustMember(id)
	c.mu.Lock()
	m.parted = on
	c.mu.Unlock()
	c.net.Partition(id, on)
}

// Pause freezes the node while on, as far as a node in the test's
// process can stand for a paused one (SIGSTOP): it stops beating, as
// with StopHeartbeat, and each of its handlers stops just before it runs,
// once the node's checks passed (it serves, its lease holds, its ring
// names it the resource's owner); neither its context nor its caller's
// deadline wakes it. Unpaused, the held handlers run with what the node
// decided before the pause, as in a process resumed after its peers
// evicted it (a service that writes through its fence has those writes
// refused), and its heartbeat resumes. It is not live while paused;
// Close releases what is held. It panics if the cluster has no node id.
func (c *Cluster) Pause(id string, on bool) {
	m := c.mustMember(id)
	c.mu.Lock()
	var resume chan struct{}
	switch {
	case on && m.paused == nil:
		m.paused = make(chan struct{})
	case !on && m.paused != nil:
		resume, m.paused = m.paused, nil
	}
	killed, cut := m.killed, m.cut
	c.mu.Unlock()
	if on {
		m.setCut(true)
		return
	}
	if !killed {
		m.setCut(cut)
	}
	if resume != nil {
		close(resume)
	}
}

// ClockOffset sets the node's clock d ahead of the true time (behind if
// d is negative; 0 puts it right): the clock its heartbeat monitor reads
// (heartbeat.Config.Now), for its lease and its estimate of the cluster
// time, which the deadlines it writes and reads are converted with. The
// change is a step, seen by the durations the node measures across it
// as well: a forward step is what a paused process sees; a backward
// one is harsher than a machine's wall-clock step, which Go's monotonic
// clock hides from durations. It panics if the cluster has no node id.
func (c *Cluster) ClockOffset(id string, d time.Duration) {
	c.mustMember(id).offset.Store(int64(d))
}

// Stop closes the node in order: it is not live once it starts leaving,
// and every peer that answers has dropped it before Stop returns its
// Close error. It panics if the cluster has no node id.
func (c *Cluster) Stop(id string) error { return c.mustMember(id).node.Close() }

// Owner returns the owner of resourceUUID on the first live node's ring,
// or "" if none is live or the UUID is invalid.
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

// Converged reports whether every live node's ring holds exactly the live
// nodes; a faulty node's own ring does not count.
func (c *Cluster) Converged() bool {
	live := c.Live()
	ids := make([]string, 0, len(live))
	for _, n := range live {
		ids = append(ids, n.UUID())
	}
	want := ring.FingerprintOf(ids)
	for _, n := range live {
		if n.Fingerprint() != want {
			return false
		}
	}
	return true
}

func (c *Cluster) rings() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for i, m := range c.nodes {
		faults := ""
		if m.killed {
			faults += ", killed"
		}
		if m.cut {
			faults += ", heartbeat stopped"
		}
		if m.parted {
			faults += ", partitioned"
		}
		if m.paused != nil {
			faults += ", paused"
		}
		if m.node.LeaseExpired() {
			faults += ", lease expired"
		}
		fmt.Fprintf(&b, "\n  node %d %s (%s%s, live %t): ring %v", i, m.node.UUID(), m.node.State(), faults, m.liveLocked(), m.node.Members())
	}
	return b.String()
}

// AwaitConverged waits until [Cluster.Converged], or ctx ends.
func (c *Cluster) AwaitConverged(ctx context.Context) error {
	return c.Await(ctx, "every ring copy holds exactly the live nodes", c.Converged)
}

// WaitConverged is AwaitConverged bounded by timeout, failing t.
func (c *Cluster) WaitConverged(t testing.TB, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.AwaitConverged(ctx); err != nil {
		t.Fatalf("servicetest: not within %s: every ring copy holds exactly the live nodes; the nodes:%s", timeout, c.rings())
	}
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

// AwaitGone waits until [Cluster.Gone], or ctx ends.
func (c *Cluster) AwaitGone(ctx context.Context, id string) error {
	return c.Await(ctx, "no ring holds node "+id, func() bool { return c.Gone(id) })
}

// WaitGone is AwaitGone bounded by timeout, failing t.
func (c *Cluster) WaitGone(t testing.TB, id string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.AwaitGone(ctx, id); err != nil {
		t.Fatalf("servicetest: not within %s: no ring holds node %s; the nodes:%s", timeout, id, c.rings())
	}
}

// Await polls cond every millisecond until it holds, or ctx ends.
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

// WaitFor is Await bounded by timeout, failing t with what.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Await(ctx, what, cond); err != nil {
		t.Fatalf("servicetest: not within %s: %s", timeout, what)
	}
}

// Client returns a client closed when the test ends.
func (c *Cluster) Client(t testing.TB) *service.Client {
	t.Helper()
	cl, err := c.NewClient(context.Background())
	if err != nil {
		t.Fatalf("servicetest: client: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NewClient returns a client that closes its transport with it.
func (c *Cluster) NewClient(ctx context.Context) (*service.Client, error) {
	tr := c.net.Transport("client-" + message.NewUUID())
	cl, err := service.NewClient(ctx, service.ClientConfig{
		Transport: tr, Prefix: c.opts.Prefix, Registry: c.opts.Registry, OwnTransport: true, Tracer: c.opts.Tracer,
	})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return cl, nil
}

// Close stops every node, in order for the live ones, and closes the
// transports. On SQL it then closes each node's store and pools, drops
// every table of the cluster (see [Database].Prefix) and, for "sqlite",
// removes the temporary directory; what fails there is logged to
// Options.Logger at Error ([Start] fails the test instead). It is
// idempotent.
func (c *Cluster) Close() {
	if err := c.close(); err != nil {
		c.opts.Logger.Error("servicetest: close the cluster", "err", err)
	}
}

// close is Close, returning what failed in releasing the database.
func (c *Cluster) close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	nodes := slices.Clone(c.nodes)
	for _, m := range nodes {
		if m.paused != nil { // its held handlers run, and end
			close(m.paused)
			m.paused = nil
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range nodes {
		c.mu.Lock()
		killed := m.killed
		c.mu.Unlock()
		if killed {
			// Its process is gone, and its connection with it: closed
			// first, its leave fails at once instead of waiting out
			// service.Config.LeaveTimeout for a broker that never returns.
			_ = m.tr.Close()
		}
		wg.Go(func() { _ = m.node.Close() })
	}
	wg.Wait()
	var errs []error
	for _, m := range nodes {
		errs = append(errs, m.closeLinks())
	}
	if c.sql != nil {
		errs = append(errs, c.sql.close())
	}
	return errors.Join(errs...)
}
