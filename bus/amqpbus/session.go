package amqpbus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/message"
)

// session is one connection with its control and publishing channels.
// When the connection is lost, lost is closed and the session's
// goroutines end; the transport replaces it with a new one.
type session struct {
	t      *Transport
	url    int    // index in Transport.urls of the broker it is connected to
	masked string // that broker's URL, masked
	conn   *amqp.Connection
	raw    net.Conn   // the TCP (or TLS) connection under conn, closed to kill it
	lim    *limitConn // what amqp091 reads: it knows when bytes last arrived
	wc     *writeConn // what amqp091 writes: it counts the bytes taken
	pubs   []*publisher
	fast   []*fastPublisher

	probeCh  *amqp.Channel // the liveness probe's own channel
	probeNow chan struct{} // cap 1: asks the prober for a round trip at once
	proved   atomic.Int64  // monotonic ns (since t.epoch) when the newest successful probe was sent
	// The stream position (wc.taken) when the newest probe was sent, and
	// when the newest one the broker answered was: the broker has read
	// every byte before readMark. See fastWindow.
	probeMark, readMark atomic.Int64
	acked               uint64 // the broker's TCP acknowledgements at the last look (sending); the probe goroutine's

	ctlMu sync.Mutex // serializes operations on ctl
	ctl   *amqp.Channel

	lost chan struct{} // closed when the connection is gone
	err  error         // why; set before lost is closed
}

// plainURL returns the URL to hand amqp091 and, for amqps://, the TLS
// configuration to dial with: the URL with scheme amqp:// and the TLS
// port made explicit, so that amqp091 speaks AMQP over the TLS session
// that connect's Dial opens.
func (t *Transport) plainURL(raw string) (string, *tls.Config, error) {
	u, err := neturl.Parse(raw)
	if err != nil || !strings.EqualFold(u.Scheme, "amqps") {
		return raw, nil, nil // Validate checked it; amqp091 reports anything else
	}
	uri, err := amqp.ParseURI(raw)
	if err != nil {
		return "", nil, fmt.Errorf("amqpbus: connect to %s: %w", MaskURL(raw), err)
	}
	u.Scheme = "amqp"
	u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	cfg := &tls.Config{}
	if t.cfg.TLS != nil {
		cfg = t.cfg.TLS.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = uri.Host
	}
	return u.String(), cfg, nil
}

// connectAny tries the brokers once each, starting with the one at index
// first, and returns the first session opened; ctx bounds the whole.
func (t *Transport) connectAny(ctx context.Context, first int) (*session, error) {
	var errs []error
	for i := range t.urls {
		s, err := t.connect(ctx, (first+i)%len(t.urls))
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// connect dials the broker at index i of t.urls and opens a session.
// With several brokers, one dial is bounded by DialTimeout divided among
// them (at least 2 s), so that a broker that accepts TCP but never
// answers (frozen) does not hold up the others for long.
func (t *Transport) connect(ctx context.Context, i int) (*session, error) {
	rawURL, masked := t.urls[i], MaskURL(t.urls[i])
	if n := len(t.urls); n > 1 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(t.cfg.DialTimeout/time.Duration(n), 2*time.Second))
		defer cancel()
	}
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
	// TLS is done here rather than by amqp091, so that the body limit
	// (limitConn) reads the decrypted frames.
	url, tlsCfg, err := t.plainURL(rawURL)
	if err != nil {
		return nil, err
	}
	var raw net.Conn   // set by Dial below, before DialConfig returns
	var lim *limitConn // the same, as amqp091 reads it
	var wc *writeConn  // the same, as amqp091 writes it
	go func() {
		c, err := amqp.DialConfig(url, amqp.Config{
			Heartbeat:  t.cfg.Heartbeat,
			Properties: props,
			Locale:     "en_US",
			Dial: func(network, addr string) (net.Conn, error) {
				conn, err := dial(network, addr)
				if err != nil {
					return nil, err
				}
				_ = conn.SetDeadline(time.Now().Add(t.cfg.DialTimeout)) // the handshake; amqp091 clears it after
				raw = conn
				if tlsCfg != nil {
					tc := tls.Client(conn, tlsCfg)
					if err := tc.Handshake(); err != nil {
						_ = conn.Close()
						return nil, fmt.Errorf("TLS handshake: %w", err)
					}
					conn = tc
				}
				lim = newLimitConn(conn, t.cfg.MaxMessageSize)
				lim.now = t.mono
				wc = newWriteConn(lim) // amqp091's writes, gathered
				wc.mono = t.mono
				return wc, nil
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
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("amqpbus: connect to %s: no answer in time: %w", masked, message.ErrUnavailable)
		}
		return nil, fmt.Errorf("amqpbus: connect to %s: %w", masked, ctx.Err())
	}
	if r.err != nil {
		var ae *amqp.Error
		if errors.As(r.err, &ae) && ae.Code == amqp.AccessRefused {
			return nil, fmt.Errorf("amqpbus: connect to %s: %s: %w: %w", masked, t.scrub(r.err), ErrAccessRefused, message.ErrUnavailable)
		}
		return nil, fmt.Errorf("amqpbus: connect to %s: %s: %w", masked, t.scrub(r.err), message.ErrUnavailable)
	}
	s := &session{t: t, url: i, masked: masked, conn: r.c, raw: raw, lim: lim, wc: wc, lost: make(chan struct{}), probeNow: make(chan struct{}, 1)}
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
		return fmt.Errorf("amqpbus: open control channel on %s: %w", s.masked, unavailable(err))
	}
	s.ctl = ctl
	for i := range t.cfg.Publishers {
		p, err := newPublisher(s, i)
		if err != nil {
			return err
		}
		s.pubs = append(s.pubs, p)
		f, err := newFastPublisher(s, i)
		if err != nil {
			return err
		}
		s.fast = append(s.fast, f)
	}
	probe, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbus: open probe channel on %s: %w", s.masked, unavailable(err))
	}
	s.probeCh = probe
	s.proved.Store(t.mono()) // the handshake just succeeded
	closed := s.conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := s.conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	t.wg.Add(2)
	go s.watch(closed, blocked)
	go s.probe()
	for _, p := range s.pubs {
		t.wg.Add(2)
		go p.run()
		go p.notify()
	}
	for _, f := range s.fast {
		t.wg.Add(1)
		go f.run()
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
	done := make(chan error, 1)
	go func() { done <- s.conn.CloseDeadline(time.Now().Add(closeTimeout)) }()
	timer := time.NewTimer(closeTimeout + closeTimeout/10)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil && s.raw != nil {
			_ = s.raw.Close() // the broker did not answer: cut the socket, so every reader ends
		}
	case <-timer.C:
		// The deadline did not hold: amqp091's heartbeater moves the read
		// deadline after each frame it reads, and one read as the close
		// began set it to three heartbeats away.
		if s.raw != nil {
			_ = s.raw.Close()
		}
		<-done
	}
}

// closeTimeout bounds the AMQP close handshake: a broker node that froze
// (SIGSTOP, a VM paused) keeps the TCP connection open and never answers
// it, which held a leaving node's exit for over 20 s.
const closeTimeout = 2 * time.Second

// kill drops the connection at once, without the AMQP close handshake
// (which would wait for a broker that does not answer): amqp091's reader
// fails, NotifyClose fires, and the transport reconnects.
func (s *session) kill(why string) {
	s.t.log.Warn("dropping the connection to the broker", "why", why)
	if s.raw != nil {
		_ = s.raw.Close()
		return
	}
	go s.close() // no raw connection to cut: the close handshake times out by itself
}

// probe checks every ProbeInterval, and at once when asked (after a
// pause of the process, or by fast publishes: see fastWindow), that the
// broker answers a round trip on the session's probe channel; a round
// trip that takes longer than ProbeTimeout kills the connection. A
// success records when the probe was sent: the connection was alive
// then, so every delivery read before is still held (the broker requeues
// only when a connection closes); and how far the broker had read the
// bytes written to it: up to the probe's frame.
func (s *session) probe() {
	t := s.t
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.lost:
			return
		case <-t.closing:
			return
		case <-tick.C:
		case <-s.probeNow:
		}
		sent := t.mono()
		mark := s.wc.taken.Load() // the bytes ahead of the probe's frame
		s.probeMark.Store(mark)
		s.sending() // note how far the broker's TCP acknowledged
		done := make(chan error, 1)
		t.wg.Add(1)
		go func() { // basic.qos / qos-ok: a round trip with no effect; ends when the connection does
			defer t.wg.Done()
			done <- s.probeCh.Qos(0, 0, false)
		}()
		answered, err := s.awaitProbe(done)
		switch {
		case !answered && err != nil:
			s.kill(err.Error())
			return
		case !answered: // the session or the transport ended
			return
		case err != nil:
			s.kill(fmt.Sprintf("the liveness probe failed: %v", t.scrub(err)))
			return
		}
		for {
			old := s.proved.Load()
			if sent <= old || s.proved.CompareAndSwap(old, sent) {
				break
			}
		}
		s.readMark.Store(mark) // only this goroutine stores it: it only grows
		t.probed()
	}
}

// awaitProbe waits for the probe's answer on done. It reports false if
// the session or the transport ended first, or, with an error, if the
// broker did not answer within ProbeTimeout while sending nothing else
// either and taking none of ours: an answer queued behind a long body
// the broker is still sending, or a probe queued behind a long publish
// still on its way to the broker, is waited for, since that link is
// alive.
func (s *session) awaitProbe(done <-chan error) (answered bool, err error) {
	t := s.t
	timer := time.NewTimer(t.cfg.ProbeTimeout)
	defer timer.Stop()
	for {
		select {
		case err := <-done:
			return true, err
		case <-timer.C:
			if !s.streaming() && !s.sending() {
				return false, fmt.Errorf("the broker did not answer a round trip within %s (a silently dropped link?)", t.cfg.ProbeTimeout)
			}
			timer.Reset(t.cfg.ProbeTimeout)
		case <-s.lost:
			return false, nil
		case <-t.closing:
			return false, nil
		}
	}
}

// sending reports whether bytes of ours wait on their way to the broker
// and move: a socket write completed within the last ProbeTimeout while
// more waited to be written; or, where the kernel tells (tcpAcked: Linux
// TCP), the broker's TCP stack acknowledged at least sendingMoved bytes
// since the last look while more wait unacknowledged. A probe's frame
// waits behind them (a long publish on a slow link: 3 MiB at 2 MB/s
// takes 1.5 s), and that link is alive. A dead link acknowledges
// nothing, and a frozen broker stops taking bytes once its socket's
// buffer is full. Only the probe goroutine calls it.
func (s *session) sending() bool {
	moved := false
	if acked, waiting, ok := tcpAcked(s.raw); ok {
		moved = waiting && acked >= s.acked+sendingMoved
		s.acked = acked
	}
	waiting, wrote := s.wc.backlog()
	return moved || waiting && s.t.mono()-wrote < int64(s.t.cfg.ProbeTimeout)
}

// sendingMoved is what the broker's TCP stack must acknowledge between
// two looks for sending to count the link alive: more than a heartbeat
// or a probe (a few bytes each), which an idle link still carries.
const sendingMoved = 16 << 10

// streaming reports whether bytes from the broker arrived within the
// last ProbeTimeout.
func (s *session) streaming() bool {
	return s.lim != nil && s.t.mono()-s.lim.lastRead.Load() < int64(s.t.cfg.ProbeTimeout)
}

// askProbe asks the prober for a round trip now.
func (s *session) askProbe() {
	select {
	case s.probeNow <- struct{}{}:
	default:
	}
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
