package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// CloudBus sends, calls and broadcasts typed messages between the
// services of management nodes, and runs this node's handlers. Open one
// per process (node or client); it is safe for concurrent use.
type CloudBus struct {
	cfg    Config
	tr     driver.Transport
	reg    *message.Registry
	log    *slog.Logger
	obs    Observer
	tracer Tracer
	node   string
	reply  string // this bus's reply queue
	event  string // this bus's event queue
	fan    string // the prefix's broadcast fan-out

	scheds []*scheduler // one per service ever registered; guarded by mu

	base   context.Context // parent of every handler's ctx; cancel ends them
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	services  map[string]*service // by service id
	pending   map[string]*pendingCall
	subs      map[string][]*subscription // by event type name
	consumers []driver.Consumer          // reply and event consumers
	cancelled []driver.Consumer          // cancelled by a drain or shutdown; Close aborts them
	drains    drainWaiters               // markers of Drain in flight

	events    chan *eventJob
	eventDone chan struct{}      // closed when the event dispatcher returns
	closing   chan struct{}      // closed when Close starts
	markers   sync.WaitGroup     // foreign drain markers held before being given back; Close waits
	held      map[*held]struct{} // failed one-way messages held before another attempt (retry.go); under mu
	holding   sync.WaitGroup     // held messages not yet given back; Close waits

	freeTimer   *time.Timer    // pending return of memory to the OS (memory.go); under mu
	lastRelease time.Time      // when memory was last returned; under mu
	timers      sync.WaitGroup // a running release; Close waits
	stopping    sync.WaitGroup // consumers being stopped; Close waits
	growers     sync.WaitGroup // consumers being added or cancelled (spill.go); Close waits

	refusals logLimiter // refused messages logged (refusals.go)

	markersSeen map[string]time.Time // foreign drain markers given back: when first seen (drain.go); under mu
	closeOnce   sync.Once
	closeErr    error

	lateReplies  atomic.Uint64
	rejected     atomic.Uint64
	handled      atomic.Uint64
	late         atomic.Uint64 // refused: the deadline passed before the start
	released     atomic.Uint64 // given back to the queue unanswered
	lost         atomic.Uint64 // not run: the transport no longer held them
	failed       atomic.Uint64 // one-way messages ended by an error that says they are wrong
	retried      atomic.Uint64 // one-way messages given back for another attempt
	deadLettered atomic.Uint64 // one-way messages moved to the dead-letter queue
	unwatch      func()        // stops watching the transport's state, if it reports one
}

// service is one registered handler and its consumer.
type service struct {
	id       string
	queue    string
	handler  Handler
	consumer driver.Consumer
	sched    *scheduler // this service's own pool of handlers
	spill    *spill     // api.portal's added consumers; nil for other services
}

// started and finished count a handler's start and end, for a service
// whose consumers grow (spill).
func (s *service) started() {
	if s.spill != nil {
		s.spill.started()
	}
}

func (s *service) finished() {
	if s.spill != nil {
		s.spill.finished()
	}
}

// takeConsumers returns the service's consumers and forgets them, for
// the caller to stop (Abort if abort); under the bus's mu.
func (s *service) takeConsumers(abort bool) []driver.Consumer {
	var cs []driver.Consumer
	if s.consumer != nil {
		cs = append(cs, s.consumer)
		s.consumer = nil
	}
	if s.spill != nil {
		cs = append(cs, s.spill.stop(abort)...)
	}
	return cs
}

// Open fills cfg's defaults, validates it, and declares and consumes
// the bus's reply and event queues; the bus is ready when it returns. On
// error it leaves nothing behind.
func Open(ctx context.Context, cfg Config) (*CloudBus, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	b := &CloudBus{
		cfg:       cfg,
		tr:        cfg.Transport,
		reg:       cfg.Registry,
		log:       cfg.Logger.With("node", cfg.Node),
		obs:       cfg.Observer,
		tracer:    cfg.Tracer,
		node:      cfg.Node,
		reply:     cfg.Prefix + ".reply." + cfg.Node,
		event:     cfg.Prefix + ".event." + cfg.Node,
		fan:       cfg.Prefix + ".broadcast",
		base:      base,
		cancel:    cancel,
		services:  make(map[string]*service),
		pending:   make(map[string]*pendingCall),
		subs:      make(map[string][]*subscription),
		events:    make(chan *eventJob, cfg.EventBuffer),
		eventDone: make(chan struct{}),
		closing:   make(chan struct{}),
	}
	go b.dispatchEvents()
	b.unwatch = cfg.Transport.WatchState(b.onTransportState)
	if err := b.start(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

func (b *CloudBus) serviceQueueOptions() driver.QueueOptions {
	o := driver.QueueOptions{Kind: driver.QueueDurable}
	if b.cfg.MaxDeliveries > 0 {
		o.MaxDeliveries, o.DeadLetter = b.cfg.MaxDeliveries, b.cfg.DeadLetterQueue
	}
	return o
}

func (b *CloudBus) start(ctx context.Context) error {
	if !b.cfg.ClientOnly {
		if err := b.tr.DeclareQueue(ctx, b.cfg.DeadLetterQueue, driver.QueueOptions{Kind: driver.QueueDurable}); err != nil {
			return fmt.Errorf("bus: declare dead-letter queue %s: %w", b.cfg.DeadLetterQueue, err)
		}
	}
	if err := b.tr.DeclareQueue(ctx, b.reply, driver.QueueOptions{Kind: driver.QueueTemporary}); err != nil {
		return fmt.Errorf("bus: declare reply queue %s: %w", b.reply, err)
	}
	c, err := b.tr.Consume(ctx, b.reply, driver.ConsumeOptions{Prefetch: b.cfg.Prefetch, NonBlocking: true}, b.onReply)
	if err != nil {
		return fmt.Errorf("bus: consume reply queue %s: %w", b.reply, err)
	}
	b.addConsumer(c)
	if b.cfg.ClientOnly {
		return nil
	}
	if err := b.tr.DeclareQueue(ctx, b.event, driver.QueueOptions{Kind: driver.QueueTemporary, Fanout: b.fan}); err != nil {
		return fmt.Errorf("bus: declare event queue %s: %w", b.event, err)
	}
	c, err = b.tr.Consume(ctx, b.event, driver.ConsumeOptions{Prefetch: b.cfg.Prefetch}, b.onEvent)
	if err != nil {
		return fmt.Errorf("bus: consume event queue %s: %w", b.event, err)
	}
	b.addConsumer(c)
	return nil
}

func (b *CloudBus) addConsumer(c driver.Consumer) {
	b.mu.Lock()
	b.consumers = append(b.consumers, c)
	b.mu.Unlock()
}

// onTransportState fails the calls in flight when the connection drops:
// their reply queue went with it.
func (b *CloudBus) onTransportState(s driver.TransportState) {
	if s != driver.TransportReconnecting {
		return
	}
	b.mu.Lock()
	pending := b.pending
	b.pending = make(map[string]*pendingCall)
	b.mu.Unlock()
	if len(pending) > 0 {
		b.log.Warn("connection to the broker lost: failing calls in flight", "calls", len(pending))
	}
	for _, p := range pending {
		p.finish(nil, message.ErrUnavailable.WithDetails("the connection to the broker dropped while waiting for the reply; outcome unknown"))
	}
}

// DeadLetterQueue returns the name of the queue poison messages go to.
func (b *CloudBus) DeadLetterQueue() string { return b.cfg.DeadLetterQueue }

// Node returns this bus's node UUID.
func (b *CloudBus) Node() string { return b.node }

func (b *CloudBus) registry() *message.Registry { return b.reg }

// LocalID returns the id of service on this node, "<service>.<node>".
func (b *CloudBus) LocalID(service string) string { return ServiceID(service, b.node) }

// queueName returns the queue of a service id.
func (b *CloudBus) queueName(serviceID string) string {
	return b.cfg.Prefix + ".message." + serviceID
}

// Register declares the durable queue of service on this node and hands
// its messages to h. A service registers once.
func (b *CloudBus) Register(ctx context.Context, service string, h Handler) error {
	if !validService(service) {
		return fmt.Errorf("bus: register %q: service names use letters, digits, '_' and '-' (at most 64): %w", service, message.ErrBadRequest)
	}
	return b.serve(ctx, ServiceID(service, b.node), h)
}

// registerShared consumes the queue of a service id every node shares,
// such as api.portal, as one of its competing consumers.
func (b *CloudBus) registerShared(ctx context.Context, serviceID string, h Handler) error {
	if serviceID != APIPortal && !validPrefix(serviceID) {
		return fmt.Errorf("bus: register shared %q: invalid service id: %w", serviceID, message.ErrBadRequest)
	}
	return b.serve(ctx, serviceID, h)
}

func (b *CloudBus) serve(ctx context.Context, id string, h Handler) error {
	if h == nil {
		return fmt.Errorf("bus: register %s: nil handler: %w", id, message.ErrBadRequest)
	}
	if b.cfg.ClientOnly {
		return fmt.Errorf("bus: register %s: a ClientOnly bus serves nothing: %w", id, message.ErrBadRequest)
	}
	s := &service{id: id, queue: b.queueName(id), handler: h}
	conc := b.cfg.MaxConcurrency
	if id == APIPortal {
		// Its handlers wait for owners: as many may run as its
		// consumers may hold.
		s.spill = newSpill(b, s, b.cfg.Prefetch, portalConsumers)
		conc = max(conc, portalConsumers*b.cfg.Prefetch)
	}
	s.sched = newScheduler(conc, b.cfg.MaxQueuePerResource)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("bus: register %s: %w", id, message.ErrClosed)
	}
	if _, dup := b.services[id]; dup {
		b.mu.Unlock()
		return fmt.Errorf("bus: register %s: already registered", id)
	}
	b.services[id] = s // reserve the id while declaring
	b.scheds = append(b.scheds, s.sched)
	b.mu.Unlock()

	undo := func() {
		b.mu.Lock()
		delete(b.services, id)
		b.mu.Unlock()
	}
	if err := b.tr.DeclareQueue(ctx, s.queue, b.serviceQueueOptions()); err != nil {
		undo()
		return fmt.Errorf("bus: register %s: declare queue %s: %w", id, s.queue, err)
	}
	if id == APIPortal {
		if err := b.tr.DeclareEntry(ctx, b.apiEntry(), s.queue); err != nil {
			undo()
			return fmt.Errorf("bus: register %s: declare entry %s: %w", id, b.apiEntry(), err)
		}
	}
	c, err := b.tr.Consume(ctx, s.queue, driver.ConsumeOptions{Prefetch: b.cfg.Prefetch, NonBlocking: true}, func(d driver.Delivery) { b.onDelivery(s, d) })
	if err != nil {
		undo()
		return fmt.Errorf("bus: register %s: consume %s: %w", id, s.queue, err)
	}
	b.mu.Lock()
	s.consumer = c
	closed := b.closed
	b.mu.Unlock()
	if closed { // Close ran while we declared: it could not see the consumer
		_ = c.Cancel()
		return fmt.Errorf("bus: register %s: %w", id, message.ErrClosed)
	}
	b.log.Debug("service registered", "service", id, "queue", s.queue)
	return nil
}

// unregister stops consuming a service id's queue; messages handed over
// still run. With deleteQueue it deletes the queue and its messages.
func (b *CloudBus) unregister(ctx context.Context, serviceID string, deleteQueue bool) error {
	b.mu.Lock()
	s, ok := b.services[serviceID]
	if ok {
		delete(b.services, serviceID)
	}
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("bus: unregister %s: not registered on this bus", serviceID)
	}
	b.mu.Lock()
	cs := s.takeConsumers(false)
	b.mu.Unlock()
	var errs []error
	for _, c := range cs {
		if err := c.Cancel(); err != nil {
			errs = append(errs, fmt.Errorf("bus: unregister %s: cancel consumer: %w", serviceID, err))
		}
	}
	if deleteQueue {
		if err := b.tr.DeleteQueue(ctx, s.queue); err != nil {
			errs = append(errs, fmt.Errorf("bus: unregister %s: delete queue %s: %w", serviceID, s.queue, err))
		}
	}
	return errors.Join(errs...)
}

// serviceIDs returns the registered service ids; the caller owns the slice.
func (b *CloudBus) serviceIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.services))
	for id := range b.services {
		out = append(out, id)
	}
	return out
}

// Stats is a snapshot of the bus's counters.
type Stats struct {
	// Pending counts calls waiting for a reply.
	Pending int
	// Running counts handlers running.
	Running int
	// Queued counts messages waiting for a handler.
	Queued int
	// LateReplies counts replies that came after their call ended.
	LateReplies uint64
	// Handled counts the deliveries a handler ran for, whatever it
	// returned.
	Handled uint64
	// Rejected counts deliveries refused before a handler ran, Late
	// included.
	Rejected uint64
	// Late counts deliveries not run: their deadline passed first.
	Late uint64
	// Released counts deliveries given back unanswered (ErrRelease, or a
	// reply that could not be published).
	Released uint64
	// Lost counts deliveries the transport no longer held: not run.
	Lost uint64
	// Failed counts one-way messages ended by their error (rule 1 of
	// "One-way messages").
	Failed uint64
	// Retried counts one-way messages given back for another attempt.
	Retried uint64
	// DeadLettered counts one-way messages moved to the dead-letter
	// queue.
	DeadLettered uint64
}

// Stats returns a snapshot of the bus's counters.
func (b *CloudBus) Stats() Stats {
	b.mu.Lock()
	pending := len(b.pending)
	b.mu.Unlock()
	var running, queued int
	for _, s := range b.schedulers() {
		r, q := s.load()
		running += r
		queued += q
	}
	return Stats{
		Pending:      pending,
		Running:      running,
		Queued:       queued,
		LateReplies:  b.lateReplies.Load(),
		Rejected:     b.rejected.Load(),
		Late:         b.late.Load(),
		Released:     b.released.Load(),
		Lost:         b.lost.Load(),
		Failed:       b.failed.Load(),
		Retried:      b.retried.Load(),
		DeadLettered: b.deadLettered.Load(),
		Handled:      b.handled.Load(),
	}
}

// Shutdown stops consuming, lets running handlers finish (until ctx
// ends), then closes the bus.
func (b *CloudBus) Shutdown(ctx context.Context) error {
	b.stopConsumers(ctx, false, false) // replies keep flowing: draining handlers may call others
	if err := b.drainHandlers(ctx); err != nil {
		b.log.Warn("shutdown: handlers still running, closing anyway", "err", err)
	}
	return b.Close()
}

// Close fails pending calls with message.ErrClosed, cancels running
// handlers' contexts and waits for them, gives back every message it holds
// unsettled as its consumers leave their queues (a canceled handler's
// message runs again elsewhere), and deletes its reply and event queues.
// Its services' queues stay; a transport that declares its queues again
// after reconnecting ([driver.QueueForgetter]) stops doing so for them.
// It does not close the transport. It is idempotent. Its consumers stop
// together, each waiting for the broker at most as long as the transport
// allows (2 s on RabbitMQ), and deleting its queues waits at most
// Config.ReplyTimeout.
func (b *CloudBus) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReplyTimeout)
	defer cancel()
	return b.closeWithin(ctx)
}

// closeWithin is Close, its queue deletions ending with ctx.
func (b *CloudBus) closeWithin(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		pending := b.pending
		b.pending = make(map[string]*pendingCall)
		served := make([]string, 0, len(b.services))
		for _, s := range b.services {
			served = append(served, s.queue)
		}
		b.mu.Unlock()
		close(b.closing)
		if b.unwatch != nil {
			b.unwatch()
		}

		b.releaseHeld(ctx) // while their consumers can still settle them
		b.stopConsumers(context.Background(), true, true)
		b.stopping.Wait() // a drain's or a shutdown's that outlived their context
		b.holding.Wait()  // a give-back the abort ended, or one the timer started
		b.growers.Wait()  // consumers added or removed meanwhile stop themselves
		if f, ok := b.tr.(driver.QueueForgetter); ok {
			for _, q := range served {
				f.ForgetQueue(q)
			}
		}
		for _, p := range pending {
			p.finish(nil, fmt.Errorf("bus: call %s on %s: %w", p.typ, p.target, message.ErrClosed))
		}
		b.cancel()
		for _, s := range b.schedulers() {
			s.close() // requeues what never started, waits for the rest
		}
		<-b.eventDone
		b.markers.Wait() // at most markerGiveBackPause
		b.stopRelease()
		b.timers.Wait()

		var errs []error
		queues := []string{b.reply, b.event}
		if b.cfg.ClientOnly {
			queues = queues[:1] // it declared no event queue
		}
		for _, q := range queues {
			if err := b.tr.DeleteQueue(ctx, q); err != nil && !isGone(err) {
				errs = append(errs, fmt.Errorf("bus: close: delete %s: %w", q, err))
			}
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// schedulers returns every scheduler, unregistered services' included.
func (b *CloudBus) schedulers() []*scheduler {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*scheduler(nil), b.scheds...)
}

// drainHandlers waits until no handler runs or waits.
func (b *CloudBus) drainHandlers(ctx context.Context) error {
	for _, s := range b.schedulers() {
		if err := s.drain(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stopConsumers stops the service consumers, with all the reply and event
// ones too, each once and all at the same time; with abort they give back
// what they hold at once. It returns once they stopped or ctx ended; the
// stops go on without it (Close waits for them).
func (b *CloudBus) stopConsumers(ctx context.Context, all, abort bool) {
	b.mu.Lock()
	var cs []driver.Consumer
	for _, s := range b.services {
		cs = append(cs, s.takeConsumers(abort)...)
	}
	if all {
		cs = append(cs, b.consumers...)
		b.consumers = nil
	}
	if abort {
		// Consumers a drain or shutdown cancelled keep what they handed
		// over settleable; Close gives it back (a handler's release
		// still waiting for a broker that does not answer ends).
		cs = append(cs, b.cancelled...)
		b.cancelled = nil
	} else {
		b.cancelled = append(b.cancelled, cs...)
	}
	b.stopping.Add(len(cs)) // under mu: Close waits once it set closed
	b.mu.Unlock()
	// Together: each may wait for a broker that does not answer (a frozen
	// node, 2 s on RabbitMQ), and a node's exit must fit its supervisor's
	// grace.
	stopped := make(chan struct{}, len(cs))
	for _, c := range cs {
		stop := c.Cancel
		if abort {
			stop = c.Abort
		}
		go func() {
			defer func() {
				b.stopping.Done()
				stopped <- struct{}{}
			}()
			if err := stop(); err != nil && !isGone(err) {
				b.log.Warn("stop consumer", "err", err)
			}
		}()
	}
	for range cs {
		select {
		case <-stopped:
		case <-ctx.Done():
			return
		}
	}
}

// isGone reports the errors of a closed or unreachable transport.
func isGone(err error) bool {
	return errors.Is(err, message.ErrClosed) || errors.Is(err, message.ErrUnavailable)
}
