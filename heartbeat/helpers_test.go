package heartbeat_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stamped is an event with the (virtual) time it was reported.
type stamped struct {
	at      time.Time
	members []string // Members() as the listener saw it
	heartbeat.Event
}

// node is a monitor running in the test, with the events it reported.
type node struct {
	id     string
	m      *heartbeat.Monitor
	cancel context.CancelFunc
	done   chan error // Run's result

	// onEvent, if set, is called with each event after it is recorded,
	// in Run's goroutine. Set it before the first event.
	onEvent func(heartbeat.Event)

	mu  sync.Mutex
	evs []stamped
}

// HeartbeatEvent records e.
func (n *node) HeartbeatEvent(e heartbeat.Event) {
	n.mu.Lock()
	n.evs = append(n.evs, stamped{at: time.Now(), members: nodesOf(n.m.Members()), Event: e})
	n.mu.Unlock()
	if n.onEvent != nil {
		n.onEvent(e)
	}
}

// events returns the events reported at or after since, optionally only
// those about one node.
func (n *node) events(since time.Time, about ...string) []stamped {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []stamped
	for _, e := range n.evs {
		if !e.at.Before(since) && (len(about) == 0 || e.Record.Node == about[0]) {
			out = append(out, e)
		}
	}
	return out
}

// returned reports whether Run has returned, and its result. Call
// synctest.Wait first.
func (n *node) returned() (bool, error) {
	select {
	case err := <-n.done:
		n.done <- err // keep it for the next look
		return true, err
	default:
		return false, nil
	}
}

// cluster is a set of monitors on one memstore, inside a synctest bubble.
type cluster struct {
	t   *testing.T
	s   *memstore.Store
	cfg heartbeat.Config
}

func newCluster(t *testing.T, cfg heartbeat.Config, scfg memstore.Config) *cluster {
	return &cluster{t: t, s: memstore.New(scfg), cfg: cfg}
}

// start joins a monitor for id (a fresh UUID if empty) through the store
// view of id and runs it; delay fixes its phase (negative: random).
func (c *cluster) start(id string, delay time.Duration) *node {
	c.t.Helper()
	if id == "" {
		id = message.NewUUID()
	}
	n := &node{id: id, done: make(chan error, 1)}
	return c.run(n, c.s.For(id), delay)
}

// run joins n's monitor on store and runs it until the test ends.
func (c *cluster) run(n *node, store heartbeat.Store, delay time.Duration) *node {
	c.t.Helper()
	m, err := heartbeat.NewMonitor(store, n.id, c.cfg, n, nil)
	require.NoError(c.t, err)
	if delay >= 0 {
		heartbeat.SetInitialDelay(m, delay)
	}
	_, _, err = m.Join(c.t.Context())
	require.NoError(c.t, err)
	n.m = m
	ctx, cancel := context.WithCancel(c.t.Context())
	n.cancel = cancel
	go func() { n.done <- m.Run(ctx) }()
	c.t.Cleanup(func() {
		cancel()
		<-n.done
	})
	return n
}

// sleepUntil advances virtual time to at and lets every goroutine settle.
func sleepUntil(at time.Time) {
	time.Sleep(time.Until(at))
	synctest.Wait()
}

// settle advances virtual time by d and lets every goroutine settle.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// kinds returns the kinds of evs.
func kinds(evs []stamped) []heartbeat.EventKind {
	var out []heartbeat.EventKind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

// ofKind returns the events of kind k.
func ofKind(evs []stamped, k heartbeat.EventKind) []stamped {
	var out []stamped
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// nodesOf returns the nodes of recs.
func nodesOf(recs []heartbeat.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Node)
	}
	return out
}
