package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"regexp"
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
	masked string   // every broker URL, masked
	urls   []string // the brokers, from cfg.URL

	reqs     chan *pubReq   // publishes, taken by the current session's publishers
	fastReqs []chan *pubReq // fast publishes, one line per fast publisher, chosen by target
	window   int64          // fastWindow when dialled

	mu        sync.Mutex
	sess      *session // nil while reconnecting
	state     driver.TransportState
	consumers map[*consumer]struct{}
	queues    map[string]driver.QueueOptions // declared here: redeclared on reconnect
	order     []string                       // declaration order of queues
	// temps maps each temporary queue declared here to its name on the
	// broker now: the name itself at first, a new one after each
	// reconnect (see Address). Copied on write; read without t.mu.
	temps     atomic.Pointer[map[string]string]
	entries   map[string]string // queue -> the entry it is bound to: rebound on reconnect
	blocked   chan struct{}     // non-nil while the broker blocks us
	watchers  map[int]func(driver.TransportState)
	nextWatch int
	notifyMu  sync.Mutex // held while watchers are called, and by their stop

	closing   chan struct{}   // closed by Close
	life      context.Context // ended by Close: bounds the transport's own waits (reconnects, republishes)
	endLife   context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup // supervisor, watchdog and session goroutines
	spawnMu   sync.Mutex     // orders spawn's count before Close's wait
	waiting   bool           // Close waits for wg: spawn starts nothing more

	// Pauses of the process and proofs that the broker answered since
	// (see liveness.go); times are t.mono() readings.
	born      time.Time
	lastTick  atomic.Int64 // the watchdog's last tick
	pauseEnd  atomic.Int64 // when the last pause the watchdog saw ended
	probeMu   sync.Mutex
	probeWake chan struct{} // closed and replaced at every successful probe

	lostConns atomic.Uint64 // connections lost since Dial
	nacked    atomic.Uint64 // publishes the broker refused (and the transport sent again)
}

var (
	_ driver.Transport      = (*Transport)(nil)
	_ driver.QueueForgetter = (*Transport)(nil)
	_ driver.FastPublisher  = (*Transport)(nil)
)

// ErrAccessRefused is matched by the error of a connection the broker
// refused for its login: the user name or password, the SASL mechanism,
// or the user's access to the virtual host. Waiting does not cure it (it
// still matches message.ErrUnavailable, as every failed connection does).
var ErrAccessRefused = errors.New("the broker refused the login or the virtual host (403 ACCESS_REFUSED): check the URL's user, password and vhost")

// Dial connects to the broker and returns a connected transport. On
// failure it leaves nothing open; its error names the broker by masked
// URL only, and matches message.ErrUnavailable (and [ErrAccessRefused]
// when the broker refused the login). Later connection losses are
// repaired in the background.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:       cfg,
		masked:    MaskURLs(cfg.URL),
		urls:      SplitURLs(cfg.URL),
		reqs:      make(chan *pubReq),
		state:     driver.TransportConnected,
		consumers: make(map[*consumer]struct{}),
		queues:    make(map[string]driver.QueueOptions),
		watchers:  make(map[int]func(driver.TransportState)),
		closing:   make(chan struct{}),
		born:      time.Now(),
		probeWake: make(chan struct{}),
		window:    fastWindow,
	}
	t.log = cfg.Logger
	t.life, t.endLife = context.WithCancel(context.Background())
	for range cfg.Publishers {
		t.fastReqs = append(t.fastReqs, make(chan *pubReq))
	}
	s, err := t.connectAny(ctx, rand.IntN(len(t.urls)))
	if err != nil {
		t.endLife()
		return nil, err
	}
	t.log.Info("connected to the broker", "broker", s.masked)
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
		t.log.Warn("connection to the broker lost; reconnecting", "broker", s.masked, "err", s.err)
		t.setState(driver.TransportReconnecting)
		start := time.Now()
		delay := 50 * time.Millisecond
		// Try the next broker first: the one just lost is likely down.
		// Each attempt moves on round the list.
		url := s.url
		for attempt := 1; ; attempt++ {
			select {
			case <-t.closing:
				return
			case <-time.After(jitter(delay)):
			}
			url = (url + 1) % len(t.urls)
			ctx, cancel := context.WithTimeout(t.life, t.cfg.DialTimeout)
			next, err := t.connect(ctx, url)
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
			t.log.Info("reconnected to the broker", "broker", s.masked, "attempts", attempt, "down_for", time.Since(start).Round(time.Millisecond))
			break
		}
	}
}

// Broker returns the masked URL of the broker the transport is connected
// to now, or "" while it reconnects or after Close.
func (t *Transport) Broker() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess == nil || t.state == driver.TransportClosed {
		return ""
	}
	return t.sess.masked
}

// ConnectionsLost returns how many times the transport's connection to
// the broker was lost (closed by the broker, cut, or dropped by the
// transport as dead) since [Dial]. Each loss fails the calls waiting on
// replies through it; a healthy node keeps it at 0.
func (t *Transport) ConnectionsLost() uint64 { return t.lostConns.Load() }

// PublishesRefused returns how many publishes the broker refused with a
// nack since [Dial] (each was published again; see [Transport.Publish]).
// On a RabbitMQ cluster they come in bursts while a quorum queue elects a
// new leader.
func (t *Transport) PublishesRefused() uint64 { return t.nacked.Load() }

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
		onBroker := name
		if opts[i].Kind == driver.QueueTemporary {
			// A new name: the old queue may outlive its connection on a
			// broker node that froze (the other broker nodes refuse
			// its name, 405 RESOURCE_LOCKED, until they see that node
			// down: up to 1.25 net_ticktime, 75 s by default).
			onBroker = fmt.Sprintf("%s.%d-%04x", name, t.lostConns.Load(), rand.IntN(1<<16))
		}
		if err := s.control(ctx, func(ch *amqp.Channel) error { return t.declareOn(ch, onBroker, opts[i]) }); err != nil {
			return fmt.Errorf("redeclare %s: %w", onBroker, err)
		}
		if onBroker != name {
			t.setAddress(name, onBroker)
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
	// Remembered in the same step as the session is read, as in
	// DeclareQueue: a reconnect from now on binds it again.
	var prev string
	var existed bool
	s, err := t.currentWith(op, func() {
		if t.entries == nil {
			t.entries = make(map[string]string)
		}
		prev, existed = t.entries[queue]
		t.entries[queue] = entry
	})
	if err != nil {
		return err
	}
	if err := s.control(ctx, func(ch *amqp.Channel) error { return entryOn(ch, entry, queue) }); err != nil {
		t.mu.Lock()
		if existed { // forgotten again, as in DeclareQueue
			t.entries[queue] = prev
		} else {
			delete(t.entries, queue)
		}
		t.mu.Unlock()
		return t.opError(s, op, err)
	}
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

// resume restarts the consumers on s, once s publishes. A consumer that
// fails to resume while s stays up (its queue is missing, as a queue
// another process declares may be after a broker node was lost: the
// broker closes the channel, not the connection) consumes again with
// backoff until it succeeds (reconsume): else it would stay gone, and
// its queue's messages (a client's replies) unread, until the connection
// dropped again.
func (t *Transport) resume(s *session) {
	t.mu.Lock()
	cs := make([]*consumer, 0, len(t.consumers))
	for c := range t.consumers {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		t.resumeConsumer(c, s)
	}
}

// resumeConsumer restarts c on s, or has it consume again with backoff
// (reconsume) if that fails while s stays up.
func (t *Transport) resumeConsumer(c *consumer, s *session) {
	err := c.resume(s)
	switch {
	case err == nil:
	case s.isLost():
		t.log.Warn("consumer not restored; the connection is failing again", "queue", c.queue, "err", err)
	default:
		t.log.Warn("consumer not restored; consuming again until it is", "queue", c.queue, "err", err)
		t.spawn(func() { c.reconsume(s) })
	}
}

// current returns the connected session, or an error matching
// message.ErrClosed or message.ErrUnavailable.
func (t *Transport) current(op string) (*session, error) {
	return t.currentWith(op, nil)
}

// currentWith is current, and runs locked, if not nil, with t.mu held in
// the same step as it reads the session, if there is one.
func (t *Transport) currentWith(op string, locked func()) (*session, error) {
	select {
	case <-t.closing:
		return nil, fmt.Errorf("amqpbus: %s: %w", op, message.ErrClosed)
	default:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sess
	if s == nil {
		return nil, fmt.Errorf("amqpbus: %s: reconnecting to %s: %w", op, t.masked, message.ErrUnavailable)
	}
	if locked != nil {
		locked()
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
	// Remembered in the same step as the session is read: a reconnect
	// from now on declares it again (one earlier made the session). A
	// declaration that fails is forgotten again.
	var prev driver.QueueOptions
	var existed bool
	s, err := t.currentWith(op, func() {
		prev, existed = t.queues[name]
		if !existed {
			t.order = append(t.order, name)
		}
		t.queues[name] = opts
	})
	if err != nil {
		return err
	}
	onBroker := t.Address(name)
	err = s.control(ctx, func(ch *amqp.Channel) error { return t.declareOn(ch, onBroker, opts) })
	if opts.Kind == driver.QueueTemporary && isCode(err, amqp.ResourceLocked) {
		// Another connection still holds the name (405 RESOURCE_LOCKED):
		// a process of the same node that died a moment ago, whose
		// connection the broker has not dropped yet, or a frozen broker
		// node's. A new name, as after a reconnect.
		onBroker = fmt.Sprintf("%s.%d-%04x", name, t.lostConns.Load(), rand.IntN(1<<16))
		err = s.control(ctx, func(ch *amqp.Channel) error { return t.declareOn(ch, onBroker, opts) })
	}
	if f := testHookDeclared; f != nil {
		f()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		// Forgotten again, even if a reconnect declared it meanwhile:
		// a declaration the broker refuses (another queue type, say)
		// would fail every reconnect. The caller learns it failed.
		if existed {
			t.queues[name] = prev
		} else {
			delete(t.queues, name)
			if i := slices.Index(t.order, name); i >= 0 {
				t.order = slices.Delete(t.order, i, i+1)
			}
			t.setAddressLocked(name, "")
		}
		return t.opError(s, op, err)
	}
	if opts.Kind == driver.QueueTemporary && t.sess == s {
		// (After a reconnect since, the address is the reconnect's.)
		t.setAddressLocked(name, onBroker)
	}
	return nil
}

// testHookDeclared, when set by a test, runs in DeclareQueue once the
// broker answered the declaration.
var testHookDeclared func()

// quorumDeliveryLimit is the x-delivery-limit of quorum queues: so high
// that the broker never drops a message for its redeliveries, on
// RabbitMQ 3 (no limit by default) and 4 (20 by default) alike. The
// transport counts deliveries itself, the same way on both queue types
// (QueueOptions.MaxDeliveries), and dead-letters to a queue it names.
const quorumDeliveryLimit = 1<<31 - 1

func (t *Transport) declareOn(ch *amqp.Channel, name string, opts driver.QueueOptions) error {
	durable, exclusive, autoDelete := true, false, false
	args := amqp.Table{"x-expires": t.cfg.QueueExpires.Milliseconds(), "x-queue-type": string(t.cfg.QueueType)}
	if t.cfg.QueueType == QueueQuorum {
		args["x-delivery-limit"] = int64(quorumDeliveryLimit)
	}
	if opts.Kind == driver.QueueTemporary {
		// Exclusive and auto-delete: classic whatever QueueType says.
		durable, exclusive, autoDelete, args = false, true, true, nil
	}
	if _, err := ch.QueueDeclare(name, durable, autoDelete, exclusive, false, args); err != nil {
		return t.typeMismatch(name, err)
	}
	if opts.Fanout != "" {
		if err := ch.ExchangeDeclare(opts.Fanout, amqp.ExchangeFanout, false, true, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(name, "", opts.Fanout, false, nil)
	}
	return nil
}

// Address returns the name on the broker of queue: queue itself, but
// for a temporary queue declared by this transport after a reconnect,
// which is declared under a new name, queue.<n>-<hex>. An exclusive
// queue whose connection was on a broker node that froze lives on until
// the other broker nodes see that node down, and they refuse its name to
// a new connection meanwhile. Calls that named the old reply queue
// failed with the connection that held it. The bus names its reply queue
// in requests by Address.
func (t *Transport) Address(queue string) string {
	if m := t.temps.Load(); m != nil {
		if a, ok := (*m)[queue]; ok {
			return a
		}
	}
	return queue
}

// setAddress records the name on the broker of temporary queue name, or
// forgets it if onBroker is "".
func (t *Transport) setAddress(name, onBroker string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setAddressLocked(name, onBroker)
}

// setAddressLocked is setAddress with t.mu held.
func (t *Transport) setAddressLocked(name, onBroker string) {
	m := map[string]string{}
	if old := t.temps.Load(); old != nil {
		m = maps.Clone(*old)
	}
	if onBroker == "" {
		delete(m, name)
	} else {
		m[name] = onBroker
	}
	t.temps.Store(&m)
}

// ForgetQueue implements [driver.QueueForgetter]: a reconnect no longer
// declares name again, nor binds it to its entry; the queue stays on the
// broker.
func (t *Transport) ForgetQueue(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.queues, name)
	delete(t.entries, name)
	if i := slices.Index(t.order, name); i >= 0 {
		t.order = slices.Delete(t.order, i, i+1)
	}
}

// DeleteQueue implements [driver.Transport]; a missing queue is not an error.
func (t *Transport) DeleteQueue(ctx context.Context, name string) error {
	op := "delete queue " + name
	onBroker := t.Address(name)
	t.setAddress(name, "")
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
		_, err := ch.QueueDelete(onBroker, false, false, false)
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
// held on the channel of a cancelled consumer do not count. Quorum
// queues refuse those flags, so with QueueQuorum the transport asks for
// the queue's counts, then deletes it if both are 0: a message published
// in the round trip between the two goes with the queue, and is logged
// at error level with the count.
func (t *Transport) DeleteQueueIfIdle(ctx context.Context, name string) error {
	op := "delete idle queue " + name
	s, err := t.current(op)
	if err != nil {
		return err
	}
	t.mu.Lock()
	opts, declared := t.queues[name]
	t.mu.Unlock()
	if t.cfg.QueueType == QueueQuorum && (!declared || opts.Kind == driver.QueueDurable) {
		err = t.deleteQuorumIfIdle(ctx, s, name)
	} else {
		onBroker := t.Address(name)
		err = s.control(ctx, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(onBroker, true, true, false)
			return err
		})
	}
	switch {
	case err == nil:
	case isCode(err, amqp.NotFound):
	case isCode(err, amqp.PreconditionFailed), errors.Is(err, errQueueBusy):
		return fmt.Errorf("amqpbus: %s: it has a consumer or messages: %w", op, message.ErrBusy)
	default:
		return t.opError(s, op, err)
	}
	t.setAddress(name, "")
	t.mu.Lock()
	delete(t.queues, name)
	if i := slices.Index(t.order, name); i >= 0 {
		t.order = slices.Delete(t.order, i, i+1)
	}
	t.mu.Unlock()
	return nil
}

var _ driver.ConsumerCounter = (*Transport)(nil)

// Consumers implements [driver.ConsumerCounter] with a passive declare of
// queue on the transport's control channel.
func (t *Transport) Consumers(ctx context.Context, queue string) (int, error) {
	q, err := t.inspect(ctx, "count the consumers of queue "+queue, queue)
	return q.Consumers, err
}

// inspect reads queue's counts with a passive declare on the control
// channel.
func (t *Transport) inspect(ctx context.Context, op, queue string) (amqp.Queue, error) {
	s, err := t.current(op)
	if err != nil {
		return amqp.Queue{}, err
	}
	var q amqp.Queue
	err = s.control(ctx, func(ch *amqp.Channel) error {
		var err error
		q, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		return err
	})
	if err != nil {
		return amqp.Queue{}, t.opError(s, op, err)
	}
	return q, nil
}

var _ driver.MessageCounter = (*Transport)(nil)

// Messages implements [driver.MessageCounter] with a passive declare of
// queue on the transport's control channel.
func (t *Transport) Messages(ctx context.Context, queue string) (int, error) {
	q, err := t.inspect(ctx, "count the messages of queue "+queue, queue)
	return q.Messages, err
}

// errQueueBusy is deleteQuorumIfIdle's refusal of a queue in use.
var errQueueBusy = errors.New("queue in use")

// deleteQuorumIfIdle deletes a quorum queue if it has no ready message
// and no consumer. Quorum queues refuse queue.delete's if-unused and
// if-empty (a connection error, 540 NOT_IMPLEMENTED), so the check and
// the delete are two steps: a message published between them, within
// one round trip to the broker, is deleted with the queue. The drain
// deletes a queue only after every node's ring dropped its owner, so
// only a sender whose ring lags that long can lose a message there; the
// transport logs how many went, at error level.
func (t *Transport) deleteQuorumIfIdle(ctx context.Context, s *session, name string) error {
	var q amqp.Queue
	err := s.control(ctx, func(ch *amqp.Channel) error {
		var err error
		q, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
	if err != nil {
		return err
	}
	if q.Messages > 0 || q.Consumers > 0 {
		return errQueueBusy
	}
	var lost int
	err = s.control(ctx, func(ch *amqp.Channel) error {
		var err error
		lost, err = ch.QueueDelete(name, false, false, false)
		return err
	})
	if err == nil && lost > 0 {
		t.log.Error("messages published to a drained quorum queue in the instant between its idle check and its deletion were deleted with it", "queue", name, "messages", lost)
	}
	return err
}

// Close implements [driver.Transport]: it stops the consumers, closes the
// connection (the broker requeues unacknowledged deliveries and deletes
// the temporary queues), stops reconnecting and waits for every
// goroutine. A broker that does not answer holds it at most about 2 s:
// the connection is cut when the close handshake goes unanswered.
// Idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.setState(driver.TransportClosed)
		close(t.closing)
		t.endLife() // a reconnect or republish under way ends now, not at its timeout
		t.mu.Lock()
		cs := make([]*consumer, 0, len(t.consumers))
		for c := range t.consumers {
			cs = append(cs, c)
		}
		s := t.sess
		t.mu.Unlock()
		// No basic.cancel per consumer: the connection's close ends them
		// all, and the broker takes back what they held unacknowledged,
		// while a broker node that froze would answer no cancel.
		for _, c := range cs {
			c.halt()
		}
		if s != nil {
			s.close()
		}
		t.spawnMu.Lock()
		t.waiting = true
		t.spawnMu.Unlock()
		t.wg.Wait()
		for _, c := range cs {
			<-c.done
		}
	})
	return nil
}

// spawn runs f on a goroutine that Close waits for, called from a
// goroutine the transport does not own (a caller's, a handler's). Once
// Close waits it starts nothing and reports false: the connection's close
// has already ended what f would have closed.
func (t *Transport) spawn(f func()) bool {
	t.spawnMu.Lock()
	defer t.spawnMu.Unlock()
	if t.waiting {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
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
	case errors.Is(err, ErrQueueType):
		return fmt.Errorf("amqpbus: %s: %w", op, err)
	case isCode(err, amqp.PreconditionFailed):
		return fmt.Errorf("amqpbus: %s: the broker has it with other settings (%s); delete it or use the same settings on every node: %w", op, err, message.ErrBadRequest)
	case errors.As(err, &ae), errors.Is(err, amqp.ErrClosed):
		if s != nil && s.isLost() {
			return fmt.Errorf("amqpbus: %s: connection to %s lost: %w", op, s.masked, message.ErrUnavailable)
		}
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrUnavailable)
	default: // I/O errors of the library: the connection is failing
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrUnavailable)
	}
}

// ErrQueueType matches the error of declaring a queue that the broker
// holds with another queue type (classic or quorum) than
// [Config.QueueType]: the nodes of one cluster disagree, or the type was
// changed while the queue existed.
var ErrQueueType = errors.New("amqpbus: queue exists with another queue type")

// inequivalentType matches the broker's text for a queue declared with
// another x-queue-type, capturing the type the broker holds ("none" for
// a queue declared without one: classic).
var inequivalentType = regexp.MustCompile(`inequivalent arg 'x-queue-type'.*current is (?:the value )?'?([a-z]+)'?`)

// typeMismatch turns the broker's refusal of a queue declared with
// another type into an error naming both types and what to do.
func (t *Transport) typeMismatch(name string, err error) error {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return err
	}
	m := inequivalentType.FindStringSubmatch(ae.Reason)
	if m == nil {
		return err
	}
	held := m[1]
	if held == "none" {
		held = string(QueueClassic)
	}
	return &queueTypeError{queue: name, held: held, want: string(t.cfg.QueueType), cause: err}
}

// queueTypeError is a declaration refused for its queue type.
type queueTypeError struct {
	queue, held, want string
	cause             error
}

func (e *queueTypeError) Error() string {
	return fmt.Sprintf("queue %s exists on the broker as a %s queue but this node declares it %s: give every node of the cluster the same queue type, or delete the old queues first (stop every node, then purge them) to change it", e.queue, e.held, e.want)
}

// Unwrap matches ErrQueueType and message.ErrBadRequest.
func (e *queueTypeError) Unwrap() []error {
	return []error{ErrQueueType, message.ErrBadRequest, e.cause}
}

func isCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

func unavailable(err error) error {
	return fmt.Errorf("%s: %w", err, message.ErrUnavailable)
}
