package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// Transport is a [driver.Transport] on RabbitMQ (AMQP 0-9-1). Create it with
// [Dial]; it is safe for concurrent use. When its connection drops it
// reconnects by itself for as long as it lives, reporting it through
// [Transport.State] and [Transport.WatchState].
type Transport struct {
	cfg    Config
	log    *slog.Logger
	masked string

	reqs chan *pubReq // publishes, taken by the current session's publishers

	mu        sync.Mutex
	sess      *session // nil while reconnecting
	state     driver.TransportState
	consumers map[*consumer]struct{}
	queues    map[string]driver.QueueOptions // declared here: redeclared on reconnect
	order     []string                       // declaration order of queues
	entries   map[string]string              // queue -> the entry it is bound to: rebound on reconnect
	blocked   chan struct{}                  // non-nil while the broker blocks us
	watchers  map[int]func(driver.TransportState)
	nextWatch int
	notifyMu  sync.Mutex // held while watchers are called, and by their stop

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup // supervisor, watchdog and session goroutines

	// Pauses of the process and proofs that the broker answered since
	// (see liveness.go); times are t.mono() readings.
	born      time.Time
	lastTick  atomic.Int64 // the watchdog's last tick
	pauseEnd  atomic.Int64 // when the last pause the watchdog saw ended
	probeMu   sync.Mutex
	probeWake chan struct{} // closed and replaced at every successful probe

	lostConns atomic.Uint64 // connections lost since Dial
}

var _ driver.Transport = (*Transport)(nil)

// Dial connects to the broker and returns a connected transport. On
// failure it leaves nothing open; its error names the broker by masked
// URL only. Later connection losses are repaired in the background.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:       cfg,
		masked:    MaskURL(cfg.URL),
		reqs:      make(chan *pubReq),
		state:     driver.TransportConnected,
		consumers: make(map[*consumer]struct{}),
		queues:    make(map[string]driver.QueueOptions),
		watchers:  make(map[int]func(driver.TransportState)),
		closing:   make(chan struct{}),
		born:      time.Now(),
		probeWake: make(chan struct{}),
	}
	t.log = cfg.Logger.With("broker", t.masked)
	s, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	t.sess = s
	t.wg.Add(2)
	go t.supervise(s)
	go t.watchdog()
	return t, nil
}

// State implements [driver.Transport].
func (t *Transport) State() driver.TransportState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// WatchState implements [driver.Transport]: f runs on the transport's
// supervisor goroutine, or on the one that calls Close.
func (t *Transport) WatchState(f func(driver.TransportState)) (stop func()) {
	t.mu.Lock()
	id := t.nextWatch
	t.nextWatch++
	t.watchers[id] = f
	t.mu.Unlock()
	return func() {
		t.notifyMu.Lock()
		defer t.notifyMu.Unlock()
		t.mu.Lock()
		delete(t.watchers, id)
		t.mu.Unlock()
	}
}

func (t *Transport) setState(s driver.TransportState) {
	t.notifyMu.Lock()
	defer t.notifyMu.Unlock()
	t.mu.Lock()
	if t.state == s || t.state == driver.TransportClosed {
		t.mu.Unlock()
		return
	}
	t.state = s
	fs := make([]func(driver.TransportState), 0, len(t.watchers))
	for _, f := range t.watchers {
		fs = append(fs, f)
	}
	t.mu.Unlock()
	for _, f := range fs {
		f(s)
	}
}

// supervise waits for the session to end and reconnects, with capped
// exponential backoff and jitter, for as long as the transport lives.
func (t *Transport) supervise(s *session) {
	defer t.wg.Done()
	for {
		select {
		case <-s.lost:
		case <-t.closing:
			return
		}
		t.mu.Lock()
		t.sess = nil
		t.mu.Unlock()
		t.lostConns.Add(1)
		t.log.Warn("connection to the broker lost; reconnecting", "err", s.err)
		t.setState(driver.TransportReconnecting)
		start := time.Now()
		delay := 50 * time.Millisecond
		for attempt := 1; ; attempt++ {
			select {
			case <-t.closing:
				return
			case <-time.After(jitter(delay)):
			}
			ctx, cancel := context.WithTimeout(context.Background(), t.cfg.DialTimeout)
			next, err := t.connect(ctx)
			if err == nil {
				err = t.redeclare(ctx, next)
				if err != nil {
					next.close()
				}
			}
			cancel()
			if err != nil {
				t.log.Info("reconnect failed; retrying", "attempt", attempt, "retry_in", delay, "err", err)
				delay = min(2*delay, t.cfg.ReconnectMax)
				continue
			}
			// Publishing works before any consumer resumes: a handler that
			// runs must be able to reply and forward.
			s = next
			t.mu.Lock()
			t.sess = s
			t.mu.Unlock()
			t.setState(driver.TransportConnected)
			t.resume(s)
			t.log.Info("reconnected to the broker", "attempts", attempt, "down_for", time.Since(start).Round(time.Millisecond))
			break
		}
	}
}

// ConnectionsLost returns how many times the transport's connection to
// the broker was lost (closed by the broker, cut, or dropped by the
// transport as dead) since [Dial]. Each loss fails the calls waiting on
// replies through it; a healthy node keeps it at 0.
func (t *Transport) ConnectionsLost() uint64 { return t.lostConns.Load() }

// jitter spreads d by ±20 % so that nodes do not reconnect in lockstep.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}

// redeclare declares again on s the queues declared on this transport
// (temporary ones died with the connection).
func (t *Transport) redeclare(ctx context.Context, s *session) error {
	t.mu.Lock()
	names := slices.Clone(t.order)
	opts := make([]driver.QueueOptions, len(names))
	for i, n := range names {
		opts[i] = t.queues[n]
	}
	t.mu.Unlock()
	t.mu.Lock()
	entries := maps.Clone(t.entries)
	t.mu.Unlock()
	for i, name := range names {
		if err := s.control(ctx, func(ch *amqp.Channel) error { return t.declareOn(ch, name, opts[i]) }); err != nil {
			return fmt.Errorf("redeclare %s: %w", name, err)
		}
		if entry, ok := entries[name]; ok {
			if err := s.control(ctx, func(ch *amqp.Channel) error { return entryOn(ch, entry, name) }); err != nil {
				return fmt.Errorf("rebind %s to entry %s: %w", name, entry, err)
			}
		}
	}
	return nil
}

// DeclareEntry implements [driver.Transport]: a durable direct exchange
// named entry, with queue bound under its own name. The transport binds
// it again after reconnecting.
func (t *Transport) DeclareEntry(ctx context.Context, entry, queue string) error {
	op := "declare entry " + entry + " for " + queue
	if entry == "" || queue == "" {
		return fmt.Errorf("amqpbus: %s: empty name: %w", op, message.ErrBadRequest)
	}
	s, err := t.current(op)
	if err != nil {
		return err
	}
	if err := s.control(ctx, func(ch *amqp.Channel) error { return entryOn(ch, entry, queue) }); err != nil {
		return t.opError(s, op, err)
	}
	t.mu.Lock()
	if t.entries == nil {
		t.entries = make(map[string]string)
	}
	t.entries[queue] = entry
	t.mu.Unlock()
	return nil
}

func entryOn(ch *amqp.Channel, entry, queue string) error {
	// Auto-delete: it goes with the last queue bound to it (api.portal
	// expired or deleted), so a prefix leaves nothing behind.
	if err := ch.ExchangeDeclare(entry, amqp.ExchangeDirect, true, true, false, false, nil); err != nil {
		return err
	}
	return ch.QueueBind(queue, queue, entry, false, nil)
}

// PublishVia implements [driver.Transport]: a mandatory, persistent,
// confirmed publish to the entry with the queue's name as routing key; a
// queue not bound to it comes back as a return and fails with
// message.ErrNoRoute. An entry that does not exist makes the broker close
// the publishing channel: message.ErrUnavailable.
func (t *Transport) PublishVia(ctx context.Context, entry, queue string, data []byte) error {
	return t.publishVia(ctx, entry, queue, data)
}

// resume restarts the consumers on s, once s publishes.
func (t *Transport) resume(s *session) {
	t.mu.Lock()
	cs := make([]*consumer, 0, len(t.consumers))
	for c := range t.consumers {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		if err := c.resume(s); err != nil {
			t.log.Warn("consumer not restored; the connection is failing again", "queue", c.queue, "err", err)
		}
	}
}

// current returns the connected session, or an error matching
// message.ErrClosed or message.ErrUnavailable.
func (t *Transport) current(op string) (*session, error) {
	select {
	case <-t.closing:
		return nil, fmt.Errorf("amqpbus: %s: %w", op, message.ErrClosed)
	default:
	}
	t.mu.Lock()
	s := t.sess
	t.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("amqpbus: %s: reconnecting to %s: %w", op, t.masked, message.ErrUnavailable)
	}
	return s, nil
}

// DeclareQueue implements [driver.Transport]. Durable queues are durable,
// neither exclusive nor auto-delete, with x-expires = QueueExpires;
// temporary queues are exclusive and auto-delete. A queue bound to a
// fan-out gets the fan-out exchange declared (non-durable, auto-delete).
// The transport remembers the queues it declared and declares them again
// after reconnecting.
func (t *Transport) DeclareQueue(ctx context.Context, name string, opts driver.QueueOptions) error {
	op := "declare queue " + name
	switch {
	case name == "":
		return fmt.Errorf("amqpbus: declare: empty queue name: %w", message.ErrBadRequest)
	case opts.MaxDeliveries > 0 && opts.DeadLetter == "":
		return fmt.Errorf("amqpbus: %s: MaxDeliveries needs a DeadLetter queue: %w", op, message.ErrBadRequest)
	case opts.Kind != driver.QueueDurable && opts.Kind != driver.QueueTemporary:
		return fmt.Errorf("amqpbus: %s: unknown queue kind %s: %w", op, opts.Kind, message.ErrBadRequest)
	}
	s, err := t.current(op)
	if err != nil {
		return err
	}
	if err := s.control(ctx, func(ch *amqp.Channel) error { return t.declareOn(ch, name, opts) }); err != nil {
		return t.opError(s, op, err)
	}
	t.mu.Lock()
	if _, ok := t.queues[name]; !ok {
		t.order = append(t.order, name)
	}
	t.queues[name] = opts
	t.mu.Unlock()
	return nil
}

func (t *Transport) declareOn(ch *amqp.Channel, name string, opts driver.QueueOptions) error {
	durable, exclusive, autoDelete := true, false, false
	args := amqp.Table{"x-expires": t.cfg.QueueExpires.Milliseconds()}
	if opts.Kind == driver.QueueTemporary {
		durable, exclusive, autoDelete, args = false, true, true, nil
	}
	if _, err := ch.QueueDeclare(name, durable, autoDelete, exclusive, false, args); err != nil {
		return err
	}
	if opts.Fanout != "" {
		if err := ch.ExchangeDeclare(opts.Fanout, amqp.ExchangeFanout, false, true, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(name, "", opts.Fanout, false, nil)
	}
	return nil
}

// DeleteQueue implements [driver.Transport]; a missing queue is not an error.
func (t *Transport) DeleteQueue(ctx context.Context, name string) error {
	op := "delete queue " + name
	t.mu.Lock()
	delete(t.queues, name)
	if i := slices.Index(t.order, name); i >= 0 {
		t.order = slices.Delete(t.order, i, i+1)
	}
	t.mu.Unlock()
	s, err := t.current(op)
	if err != nil {
		return err
	}
	err = s.control(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(name, false, false, false)
		return err
	})
	if err != nil && !isCode(err, amqp.NotFound) {
		return t.opError(s, op, err)
	}
	return nil
}

// DeleteQueueIfIdle implements [driver.Transport] with queue.delete
// if-unused and if-empty: the broker refuses (406) a queue with a consumer
// or a ready message, which is reported as message.ErrBusy; deliveries
// held on the channel of a cancelled consumer do not count.
func (t *Transport) DeleteQueueIfIdle(ctx context.Context, name string) error {
	op := "delete idle queue " + name
	s, err := t.current(op)
	if err != nil {
		return err
	}
	err = s.control(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(name, true, true, false)
		return err
	})
	switch {
	case err == nil:
	case isCode(err, amqp.NotFound):
	case isCode(err, amqp.PreconditionFailed):
		return fmt.Errorf("amqpbus: %s: it has a consumer or messages: %w", op, message.ErrBusy)
	default:
		return t.opError(s, op, err)
	}
	t.mu.Lock()
	delete(t.queues, name)
	if i := slices.Index(t.order, name); i >= 0 {
		t.order = slices.Delete(t.order, i, i+1)
	}
	t.mu.Unlock()
	return nil
}

// Close implements [driver.Transport]: it cancels the consumers, closes the
// connection (the broker requeues unacknowledged deliveries and deletes
// the temporary queues), stops reconnecting and waits for every
// goroutine. Idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.setState(driver.TransportClosed)
		close(t.closing)
		t.mu.Lock()
		cs := make([]*consumer, 0, len(t.consumers))
		for c := range t.consumers {
			cs = append(cs, c)
		}
		s := t.sess
		t.mu.Unlock()
		for _, c := range cs {
			c.stop()
		}
		if s != nil {
			s.close()
		}
		t.wg.Wait()
		for _, c := range cs {
			<-c.done
		}
	})
	return nil
}

// opError turns a broker error into the bus's coded errors.
func (t *Transport) opError(s *session, op string, err error) error {
	var ae *amqp.Error
	switch {
	case errors.Is(err, message.ErrUnavailable), errors.Is(err, message.ErrClosed),
		errors.Is(err, message.ErrTimeout), errors.Is(err, message.ErrCanceled):
		return fmt.Errorf("amqpbus: %s: %w", op, err)
	case isCode(err, amqp.NotFound):
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrNoRoute)
	case isCode(err, amqp.PreconditionFailed):
		return fmt.Errorf("amqpbus: %s: the broker has it with other settings (%s); delete it or use the same settings on every node: %w", op, err, message.ErrBadRequest)
	case errors.As(err, &ae), errors.Is(err, amqp.ErrClosed):
		if s != nil && s.isLost() {
			return fmt.Errorf("amqpbus: %s: connection to %s lost: %w", op, t.masked, message.ErrUnavailable)
		}
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrUnavailable)
	default: // I/O errors of the library: the connection is failing
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrUnavailable)
	}
}

func isCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

func unavailable(err error) error {
	return fmt.Errorf("%s: %w", err, message.ErrUnavailable)
}
