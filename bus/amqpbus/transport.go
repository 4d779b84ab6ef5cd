package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// Transport is a [bus.Transport] on RabbitMQ (AMQP 0-9-1) over one
// connection. Create it with [Dial]; it is safe for concurrent use.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	masked string

	conn *amqp.Connection

	ctlMu sync.Mutex // serializes declarations on ctl
	ctl   *amqp.Channel

	reqs chan *pubReq
	pubs []*publisher

	mu        sync.Mutex
	consumers map[*consumer]struct{}
	queues    map[string]bus.QueueOptions // declared here, for delivery limits
	blocked   chan struct{}               // non-nil while the broker blocks us

	dead      chan struct{} // closed when the connection is gone
	deadErr   error
	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup // publisher, notifier and watcher goroutines
}

var _ bus.Transport = (*Transport)(nil)

// Dial connects to the broker, opens the publishing channels and starts
// watching the connection. On failure it leaves nothing open; its error
// names the broker by masked URL only.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:       cfg,
		masked:    MaskURL(cfg.URL),
		reqs:      make(chan *pubReq),
		consumers: make(map[*consumer]struct{}),
		queues:    make(map[string]bus.QueueOptions),
		dead:      make(chan struct{}),
		closing:   make(chan struct{}),
	}
	t.log = cfg.Logger.With("broker", t.masked)

	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		dial = func(network, addr string) (net.Conn, error) { return d.DialContext(ctx, network, addr) }
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(cfg.ConnectionName)
	type result struct {
		c   *amqp.Connection
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(cfg.URL, amqp.Config{
			Heartbeat:       cfg.Heartbeat,
			TLSClientConfig: cfg.TLS,
			Properties:      props,
			Locale:          "en_US",
			Dial: func(network, addr string) (net.Conn, error) {
				conn, err := dial(network, addr)
				if err == nil {
					_ = conn.SetDeadline(time.Now().Add(cfg.DialTimeout)) // handshake; amqp091 clears it after
				}
				return conn, err
			},
		})
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() { // the dial goroutine ends by itself within DialTimeout
			if r := <-done; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("amqpbus: connect to %s: %w", t.masked, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("amqpbus: connect to %s: %s: %w", t.masked, scrub(r.err, cfg.URL), message.ErrUnavailable)
	}
	t.conn = r.c
	if err := t.open(); err != nil {
		_ = t.conn.Close()
		t.wg.Wait()
		return nil, err
	}
	return t, nil
}

// open opens the control and publishing channels and starts the watcher.
func (t *Transport) open() error {
	ctl, err := t.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbus: open control channel on %s: %w", t.masked, unavailable(err))
	}
	t.ctl = ctl
	for i := range t.cfg.Publishers {
		p, err := newPublisher(t, i)
		if err != nil {
			return err
		}
		t.pubs = append(t.pubs, p)
	}
	closed := t.conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := t.conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	t.wg.Add(1)
	go t.watch(closed, blocked)
	for _, p := range t.pubs {
		t.wg.Add(2)
		go p.run()
		go p.notify()
	}
	return nil
}

// watch tracks the connection: blocked by a resource alarm, or gone.
func (t *Transport) watch(closed <-chan *amqp.Error, blocked <-chan amqp.Blocking) {
	defer t.wg.Done()
	for {
		select {
		case b, ok := <-blocked:
			if !ok {
				blocked = nil
				continue
			}
			t.mu.Lock()
			if b.Active && t.blocked == nil {
				t.blocked = make(chan struct{})
				t.log.Warn("broker blocked publishing (resource alarm); publishes wait until it unblocks or their deadline", "reason", b.Reason)
			} else if !b.Active && t.blocked != nil {
				close(t.blocked)
				t.blocked = nil
				t.log.Info("broker unblocked publishing")
			}
			t.mu.Unlock()
		case e := <-closed:
			err := errors.New("connection closed")
			if e != nil {
				err = e
			}
			t.mu.Lock()
			t.deadErr = err
			if t.blocked != nil {
				close(t.blocked)
				t.blocked = nil
			}
			t.mu.Unlock()
			select {
			case <-t.closing:
			default:
				t.log.Warn("connection to the broker lost", "err", err)
			}
			close(t.dead)
			return
		}
	}
}

// check returns the error every operation fails with once the transport
// is closed or its connection is gone.
func (t *Transport) check(op string) error {
	select {
	case <-t.closing:
		return fmt.Errorf("amqpbus: %s: %w", op, message.ErrClosed)
	default:
	}
	select {
	case <-t.dead:
		t.mu.Lock()
		err := t.deadErr
		t.mu.Unlock()
		return fmt.Errorf("amqpbus: %s: connection to %s lost (%v): %w", op, t.masked, err, message.ErrUnavailable)
	default:
		return nil
	}
}

// control runs f on the control channel, reopening it if a previous
// operation's channel error closed it.
func (t *Transport) control(ctx context.Context, op string, f func(ch *amqp.Channel) error) error {
	if err := t.check(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	type res struct{ err error }
	done := make(chan res, 1)
	go func() { // amqp091 RPCs ignore ctx: run them aside so ctx is honoured
		t.ctlMu.Lock()
		defer t.ctlMu.Unlock()
		if t.ctl == nil || t.ctl.IsClosed() {
			ch, err := t.conn.Channel()
			if err != nil {
				done <- res{unavailable(err)}
				return
			}
			t.ctl = ch
		}
		done <- res{f(t.ctl)}
	}()
	select {
	case r := <-done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("amqpbus: %s: %w", op, ctx.Err())
	case <-t.dead:
		return t.check(op)
	}
}

// DeclareQueue implements [bus.Transport]. Durable queues are durable,
// neither exclusive nor auto-delete, with x-expires = QueueExpires;
// temporary queues are exclusive and auto-delete. A queue bound to a
// fan-out gets the fan-out exchange declared (non-durable, auto-delete).
func (t *Transport) DeclareQueue(ctx context.Context, name string, opts bus.QueueOptions) error {
	op := "declare queue " + name
	if name == "" {
		return fmt.Errorf("amqpbus: declare: empty queue name: %w", message.ErrBadRequest)
	}
	if opts.MaxDeliveries > 0 && opts.DeadLetter == "" {
		return fmt.Errorf("amqpbus: %s: MaxDeliveries needs a DeadLetter queue: %w", op, message.ErrBadRequest)
	}
	var durable, exclusive, autoDelete bool
	var args amqp.Table
	switch opts.Kind {
	case bus.QueueDurable:
		durable = true
		args = amqp.Table{"x-expires": t.cfg.QueueExpires.Milliseconds()}
	case bus.QueueTemporary:
		exclusive, autoDelete = true, true
	default:
		return fmt.Errorf("amqpbus: %s: unknown queue kind %s: %w", op, opts.Kind, message.ErrBadRequest)
	}
	err := t.control(ctx, op, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(name, durable, autoDelete, exclusive, false, args); err != nil {
			return err
		}
		if opts.Fanout != "" {
			if err := ch.ExchangeDeclare(opts.Fanout, amqp.ExchangeFanout, false, true, false, false, nil); err != nil {
				return err
			}
			if err := ch.QueueBind(name, "", opts.Fanout, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return t.opError(op, err)
	}
	t.mu.Lock()
	t.queues[name] = opts
	t.mu.Unlock()
	return nil
}

// DeleteQueue implements [bus.Transport]; a missing queue is not an error.
func (t *Transport) DeleteQueue(ctx context.Context, name string) error {
	op := "delete queue " + name
	err := t.control(ctx, op, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(name, false, false, false)
		return err
	})
	t.mu.Lock()
	delete(t.queues, name)
	t.mu.Unlock()
	if isCode(err, amqp.NotFound) {
		return nil
	}
	if err != nil {
		return t.opError(op, err)
	}
	return nil
}

// Close implements [bus.Transport]: it cancels the consumers, closes the
// connection (the broker requeues unacknowledged deliveries and deletes
// the temporary queues) and waits for every goroutine. Idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closing)
		t.mu.Lock()
		cs := make([]*consumer, 0, len(t.consumers))
		for c := range t.consumers {
			cs = append(cs, c)
		}
		t.mu.Unlock()
		for _, c := range cs {
			c.stop()
		}
		_ = t.conn.Close()
		t.wg.Wait()
		for _, c := range cs {
			<-c.done
		}
	})
	return nil
}

// opError turns a broker error into the bus's coded errors.
func (t *Transport) opError(op string, err error) error {
	var ae *amqp.Error
	switch {
	case isCode(err, amqp.NotFound):
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrNoRoute)
	case isCode(err, amqp.PreconditionFailed):
		return fmt.Errorf("amqpbus: %s: the broker has it with other settings (%s); delete it or use the same settings on every node: %w", op, err, message.ErrBadRequest)
	case errors.As(err, &ae), errors.Is(err, amqp.ErrClosed):
		if cerr := t.check(op); cerr != nil {
			return cerr
		}
		return fmt.Errorf("amqpbus: %s: %s: %w", op, err, message.ErrUnavailable)
	default:
		return fmt.Errorf("amqpbus: %s: %w", op, err)
	}
}

func isCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

func unavailable(err error) error {
	return fmt.Errorf("%s: %w", err, message.ErrUnavailable)
}
