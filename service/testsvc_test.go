package service_test

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// Touch is a message about a resource; the recorder service records who
// handled it.
type Touch struct {
	Resource string `json:"resource"`
	Seq      int    `json:"seq"`
	Block    bool   `json:"block,omitempty"` // wait until the handler's ctx ends
}

// ResourceUUID makes Touch a message.Routed type: senders route it by
// Resource, receivers check it.
func (m Touch) ResourceUUID() string { return m.Resource }

// Touched is the reply to Touch.
type Touched struct {
	Node string `json:"node"`
}

// APITouch is the API form of Touch, accepted through api.portal.
type APITouch struct {
	Resource string `json:"resource"`
}

// ResourceUUID makes APITouch a message.Routed type.
func (m APITouch) ResourceUUID() string { return m.Resource }

func registry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[Touch](reg, "svctest.v1.Touch")
	message.MustRegister[Touched](reg, "svctest.v1.Touched")
	message.MustRegister[APITouch](reg, "svctest.v1.APITouch")
	return reg
}

// handled is one handling of a Touch.
type handled struct {
	node, resource, portal string
	seq                    int
}

// journal is shared by the recorders of all nodes of a test.
type journal struct {
	mu      sync.Mutex
	entries []handled
	active  map[string]int // resource -> handlers running
	overlap bool           // two handlers of one resource overlapped
	running int
	maxRun  int
	hold    chan struct{} // if set, handlers wait on it
}

func newJournal() *journal { return &journal{active: map[string]int{}} }

func (j *journal) all() []handled {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]handled(nil), j.entries...)
}

// recorder is a service named "recorder" that records every Touch.
type recorder struct {
	*bus.Mux
	node    string
	j       *journal
	changes atomic.Int32
	evicted atomic.Bool
	n       *service.Node
	onRing  atomic.Pointer[func(n *service.Node, ch service.RingChange)]
}

func (r *recorder) setOnRing(f func(n *service.Node, ch service.RingChange)) { r.onRing.Store(&f) }

func (r *recorder) Name() string { return "recorder" }

func (r *recorder) Start(ctx context.Context, n *service.Node) error {
	r.n = n
	r.node = n.UUID()
	return nil
}

func (r *recorder) APIMessages() []any { return []any{APITouch{}} }

func (r *recorder) RingChanged(ctx context.Context, ch service.RingChange) {
	r.changes.Add(1)
	if f := r.onRing.Load(); f != nil {
		(*f)(r.n, ch)
	}
}

func (r *recorder) Evicted(ctx context.Context) { r.evicted.Store(true) }

// newRecorder returns a recorder writing to j.
func newRecorder(j *journal) *recorder {
	r := &recorder{j: j, Mux: bus.NewMux()}
	bus.Handle(r.Mux, func(ctx context.Context, req *bus.Request, m Touch) (Touched, error) {
		return r.record(ctx, req, m.Resource, m.Seq, m.Block)
	})
	bus.Handle(r.Mux, func(ctx context.Context, req *bus.Request, m APITouch) (Touched, error) {
		return r.record(ctx, req, m.Resource, 0, false)
	})
	return r
}

func (r *recorder) record(ctx context.Context, req *bus.Request, res string, seq int, block bool) (Touched, error) {
	j := r.j
	j.mu.Lock()
	j.active[res]++
	if j.active[res] > 1 {
		j.overlap = true
	}
	j.running++
	j.maxRun = max(j.maxRun, j.running)
	j.entries = append(j.entries, handled{node: r.node, resource: res, seq: seq, portal: busx.EnvelopeOf(req).Headers[service.HeaderPortal]})
	hold := j.hold
	j.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
		}
	}
	if block {
		<-ctx.Done()
	} else {
		time.Sleep(time.Millisecond) // virtual: gives concurrent handlers a chance to overlap
	}
	j.mu.Lock()
	j.active[res]--
	j.running--
	j.mu.Unlock()
	if block {
		return Touched{}, ctx.Err()
	}
	return Touched{Node: r.node}, nil
}
