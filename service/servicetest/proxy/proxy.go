// Package proxy is a TCP proxy a test puts between its code and a real
// server (a broker, a database) to inject network faults into its own
// connections without disturbing the shared server that other tests use.
//
//	p, url := proxy.NewURL(t, os.Getenv("CLOUDBUS_AMQP_URL"))
//	// connect through url ...
//	p.Cut()  // the broker "dies": every connection is reset
//	p.Heal() // the broker is back: new connections go through
//
// # Faults
//
//   - [Proxy.Cut] resets every connection the proxy holds, with a TCP RST
//     and no FIN, as a dead peer or a broken network looks to the client.
//     That includes a connection accepted before Cut whose upstream dial
//     was still in progress: it is reset when the dial completes, even
//     if Heal came in between. Until [Proxy.Heal], new connections are
//     accepted and reset at once, without dialing the target (the port
//     stays open, so a client sees "connection reset", not "refused").
//   - [Proxy.Stall] stops forwarding bytes in both directions while
//     keeping every socket open, as a hung server or a black-holed
//     network looks: reads wait until their deadlines, and so do writes
//     once the socket buffers are full. Bytes the proxy already read are
//     delivered after Heal, in order.
//   - [Proxy.SetLatency] delays the bytes of each direction by a fixed
//     delay plus a random jitter, as a slow or distant network looks:
//     a delay line, not a pause per read, so round trips in flight
//     overlap and throughput is not limited by the delay; bytes keep
//     their order. A request/response round trip gains the delays of
//     both directions: SetLatency(Latency{Delay: 50ms, Jitter: 25ms},
//     Latency{Delay: 50ms, Jitter: 25ms}) adds 100 to 150 ms to each.
//   - [Proxy.Heal] undoes all three: new connections go through, stalled
//     ones flow again, and the latency is gone (bytes already delayed
//     keep their delivery time). Connections reset by Cut stay reset.
//
// A clean close on one side (FIN) is passed on to the other side; both
// sockets of a pair are closed once both directions are done. An error
// on either side resets both.
//
// The proxy listens on 127.0.0.1 and dials the target afresh for every
// connection it accepts, bounded by 5 s; if that dial fails, the client's
// connection is reset. The package example shows a cut and a heal.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dialTimeout bounds each upstream dial.
const dialTimeout = 5 * time.Second

// lineChunks bounds the reads a delayed direction holds (each at most
// 32 KiB, so 8 MiB in all); past it the reader waits, as it would on a
// full socket buffer.
const lineChunks = 256

// Latency is a delay the proxy adds to the bytes of one direction (see
// [Proxy.SetLatency]). The zero value adds none.
type Latency struct {
	// Delay is how long each byte is held at least.
	Delay time.Duration
	// Jitter adds a random part of [0, Jitter) to each read's delay.
	// Bytes still keep their order: a read is never delivered before
	// the one read before it.
	Jitter time.Duration
}

// direction is which way a pipe copies.
type direction int

const (
	toTarget direction = iota // client to target
	toClient                  // target to client
)

// Proxy is a TCP proxy between a test's code and a real server. Create
// one with [New] or [NewURL] in a test, or [Listen] outside one. All
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	dial   dialFunc
	ctx    context.Context // canceled by Close: aborts upstream dials
	cancel context.CancelFunc

	mu      sync.Mutex
	pairs   map[*pair]struct{} // established connections
	gen     uint64             // incremented by every Cut
	refuse  bool               // between Cut and Heal
	stalled chan struct{}      // non-nil while stalled; closed by Heal
	latency [2]Latency         // by direction
	wg      sync.WaitGroup     // the accept loop, dials and pipes
}

// dialFunc dials the target; tests replace it to control when a dial
// completes.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// pair is a client connection and its upstream connection.
type pair struct {
	client, upstream net.Conn
	cut              chan struct{} // closed by reset: wakes stalled pipes
	once             sync.Once
	open             atomic.Int32 // directions not yet finished
}

// New starts a proxy to target ("host:port") and closes it when the test
// ends. It fails t if it cannot listen.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := listen(target, nil)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewURL starts a proxy to the host of rawURL, which must name a port
// ("amqp://user:pass@host:5672/vhost"), and returns it with rawURL
// rewritten to go through it; the user, password, path and query are
// kept. It fails t, never printing the password, if rawURL has no host
// or no port. A TLS client then sees the server name 127.0.0.1 and must
// be told the real one. The proxy is closed when the test ends.
func NewURL(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	switch {
	case err != nil || u.Host == "":
		t.Fatalf("proxy: %q has no host to proxy; pass a URL such as scheme://host:port/...", redact(rawURL))
	case u.Port() == "":
		t.Fatalf("proxy: %q names no port; add the server's port to the URL", redact(rawURL))
	}
	p := New(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// Listen starts a proxy to target ("host:port") for use outside a test
// (a TestMain, a demo). The caller must Close it.
func Listen(target string) (*Proxy, error) {
	return listen(target, nil)
}

func listen(target string, dial dialFunc) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, dial: dial, ctx: ctx, cancel: cancel, pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// redact returns rawURL for an error message, hiding the password, the
// query (which may hold one) and an opaque part (which may be a DSN).
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return "(unparsable URL)"
	case u.Opaque != "":
		return u.Scheme + ":REDACTED"
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	return u.Redacted()
}

// Addr returns the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for the accepted connection c and forwards
// between them, unless a Cut comes first.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	gen, refuse := p.gen, p.refuse
	p.mu.Unlock()
	if refuse {
		reset(c)
		return
	}
	up, err := p.dial(p.ctx, "tcp", p.target)
	if err != nil {
		reset(c)
		return
	}
	pr := &pair{client: c, upstream: up, cut: make(chan struct{})}
	pr.open.Store(2)
	p.mu.Lock()
	if p.gen != gen {
		// A Cut came while we dialed: it cut this connection too.
		p.mu.Unlock()
		pr.reset()
		return
	}
	p.pairs[pr] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(pr, c, up, toTarget)
	go p.pipe(pr, up, c, toClient)
}

// chunk is one read in a delay line: its bytes (nil for the FIN) and
// when they are due.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, waiting while the proxy is stalled. Until dir
// is first delayed it writes each read itself; from then on it hands
// every read, stamped with its due time, to a delay line (deliver), so
// that reads keep their order.
func (p *Proxy) pipe(pr *pair, src, dst net.Conn, dir direction) {
	defer p.wg.Done()
	var line chan chunk // nil until dir is first delayed
	var lastDue time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			lat := p.latencyOf(dir)
			switch {
			case line == nil && lat == Latency{}:
				if !p.waitUnstalled(pr) {
					return // cut while stalled
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					p.drop(pr, true)
					return
				}
			default:
				if line == nil {
					line = make(chan chunk, lineChunks)
					p.wg.Add(1)
					go p.deliver(pr, dst, line)
				}
				d := lat.Delay
				if lat.Jitter > 0 {
					d += rand.N(lat.Jitter)
				}
				due := time.Now().Add(d)
				if due.Before(lastDue) {
					due = lastDue // never before the read before it
				}
				lastDue = due
				select {
				case line <- chunk{data: append([]byte(nil), buf[:n]...), due: due}:
				case <-pr.cut:
					return
				}
			}
		}
		if errors.Is(err, io.EOF) {
			if line != nil {
				select {
				case line <- chunk{due: lastDue}: // deliver passes the FIN on
				case <-pr.cut:
				}
				return
			}
			p.finish(pr, dst)
			return
		}
		if err != nil {
			p.drop(pr, true)
			return
		}
	}
}

// deliver writes the reads of a delay line to dst, each at its due time
// and once the proxy is not stalled, until the FIN (nil data) or a cut.
func (p *Proxy) deliver(pr *pair, dst net.Conn, line <-chan chunk) {
	defer p.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		var c chunk
		select {
		case c = <-line:
		case <-pr.cut:
			return
		}
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-pr.cut:
				return
			}
		}
		if !p.waitUnstalled(pr) {
			return // cut while stalled
		}
		if c.data == nil {
			p.finish(pr, dst)
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			p.drop(pr, true)
			return
		}
	}
}

// finish passes a FIN on to dst and closes the pair once both
// directions are done.
func (p *Proxy) finish(pr *pair, dst net.Conn) {
	closeWrite(dst)
	if pr.open.Add(-1) == 0 {
		p.drop(pr, false)
	}
}

// latencyOf returns the latency of dir now.
func (p *Proxy) latencyOf(dir direction) Latency {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency[dir]
}

// waitUnstalled waits while the proxy is stalled; it reports false if
// the pair was cut meanwhile.
func (p *Proxy) waitUnstalled(pr *pair) bool {
	p.mu.Lock()
	stall := p.stalled
	p.mu.Unlock()
	if stall == nil {
		return true
	}
	select {
	case <-stall:
		return true
	case <-pr.cut:
		return false
	}
}

// drop forgets pr and resets it (abort) or closes it cleanly.
func (p *Proxy) drop(pr *pair, abort bool) {
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	if abort {
		pr.reset()
		return
	}
	pr.once.Do(func() {
		close(pr.cut)
		_ = pr.client.Close()
		_ = pr.upstream.Close()
	})
}

// reset closes both sockets with an RST.
func (pr *pair) reset() {
	pr.once.Do(func() {
		close(pr.cut)
		reset(pr.client)
		reset(pr.upstream)
	})
}

// Cut resets every connection (an RST, no FIN, as a dead peer or a
// broken network looks), including those accepted but still dialing the
// target, and resets new ones at once until Heal. It does not block.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.refuse = true
	p.gen++
	pairs := p.pairs
	p.pairs = map[*pair]struct{}{}
	p.mu.Unlock()
	for pr := range pairs {
		pr.reset()
	}
}

// Stall stops forwarding bytes, keeping the sockets open, until Heal.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// SetLatency delays every byte the proxy reads from now on, on every
// connection, open or new: toTarget the bytes from the client to the
// target, toClient the target's. Each read is held for its direction's
// Delay plus a random part of its Jitter, and never delivered before the
// read before it, so bytes keep their order; reads already held keep
// their delivery time. The delay is a delay line, not a pause per read:
// a connection's reads in flight are held at once, so throughput does
// not fall with the delay (up to 8 MiB in flight per direction of a
// connection). A request/response round trip gains both directions'
// delays. Zero values remove the latency; so does [Proxy.Heal]. A
// stalled proxy holds delayed bytes until Heal too.
func (p *Proxy) SetLatency(toTarget, toClient Latency) {
	p.mu.Lock()
	p.latency = [2]Latency{toTarget, toClient}
	p.mu.Unlock()
}

// Heal undoes Cut, Stall and SetLatency: new connections go through,
// stalled bytes flow again, and bytes read from now on are not delayed.
// Connections already reset stay reset.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.refuse = false
	p.latency = [2]Latency{}
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// Close stops listening, aborts dials in progress, resets every
// connection and waits for the proxy's goroutines. It is idempotent.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.cancel()
	p.Cut()
	p.wg.Wait()
}

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// closeWrite sends a FIN on c, or closes it if it cannot half-close.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
