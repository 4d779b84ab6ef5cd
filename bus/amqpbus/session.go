package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/message"
)

// session is one connection with its control and publishing channels.
// When the connection is lost, lost is closed and the session's
// goroutines end; the transport replaces it with a new one.
type session struct {
	t    *Transport
	conn *amqp.Connection
	pubs []*publisher

	ctlMu sync.Mutex // serializes operations on ctl
	ctl   *amqp.Channel

	lost chan struct{} // closed when the connection is gone
	err  error         // why; set before lost is closed
}

// connect dials the broker and opens a session.
func (t *Transport) connect(ctx context.Context) (*session, error) {
	dial := t.cfg.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: t.cfg.DialTimeout}
		dial = func(network, addr string) (net.Conn, error) { return d.DialContext(ctx, network, addr) }
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(t.cfg.ConnectionName)
	type result struct {
		c   *amqp.Connection
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(t.cfg.URL, amqp.Config{
			Heartbeat:       t.cfg.Heartbeat,
			TLSClientConfig: t.cfg.TLS,
			Properties:      props,
			Locale:          "en_US",
			Dial: func(network, addr string) (net.Conn, error) {
				conn, err := dial(network, addr)
				if err == nil {
					_ = conn.SetDeadline(time.Now().Add(t.cfg.DialTimeout)) // the handshake; amqp091 clears it after
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
		go func() { // the dial ends by itself within DialTimeout
			if r := <-done; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("amqpbus: connect to %s: %w", t.masked, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("amqpbus: connect to %s: %s: %w", t.masked, scrub(r.err, t.cfg.URL), message.ErrUnavailable)
	}
	s := &session{t: t, conn: r.c, lost: make(chan struct{})}
	if err := s.open(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// open opens the control and publishing channels and starts the
// session's goroutines.
func (s *session) open() error {
	t := s.t
	ctl, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbus: open control channel on %s: %w", t.masked, unavailable(err))
	}
	s.ctl = ctl
	for i := range t.cfg.Publishers {
		p, err := newPublisher(s, i)
		if err != nil {
			return err
		}
		s.pubs = append(s.pubs, p)
	}
	closed := s.conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := s.conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	t.wg.Add(1)
	go s.watch(closed, blocked)
	for _, p := range s.pubs {
		t.wg.Add(2)
		go p.run()
		go p.notify()
	}
	return nil
}

// watch tracks the connection: blocked by a resource alarm, or gone.
func (s *session) watch(closed <-chan *amqp.Error, blocked <-chan amqp.Blocking) {
	t := s.t
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
			s.err = errors.New("connection closed")
			if e != nil {
				s.err = e
			}
			t.mu.Lock()
			if t.blocked != nil {
				close(t.blocked)
				t.blocked = nil
			}
			t.mu.Unlock()
			close(s.lost)
			return
		}
	}
}

func (s *session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// close closes the connection; watch then closes lost.
func (s *session) close() {
	_ = s.conn.Close()
}

// control runs f on the control channel, reopening it if an earlier
// operation's channel error closed it. amqp091's RPCs ignore ctx, so f
// runs aside and ctx bounds the wait.
func (s *session) control(ctx context.Context, f func(ch *amqp.Channel) error) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx)
	}
	done := make(chan error, 1)
	go func() {
		s.ctlMu.Lock()
		defer s.ctlMu.Unlock()
		if s.ctl == nil || s.ctl.IsClosed() {
			ch, err := s.conn.Channel()
			if err != nil {
				done <- unavailable(err)
				return
			}
			s.ctl = ch
		}
		done <- f(s.ctl)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-s.lost:
		return fmt.Errorf("connection lost (%v): %w", s.err, message.ErrUnavailable)
	}
}
