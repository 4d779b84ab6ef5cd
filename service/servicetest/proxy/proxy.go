// Package proxy is a TCP proxy a test puts between its code and a real
// server (a broker, a database) to inject network faults into its own
// connections without disturbing the server other tests share.
//
//	p, url := proxy.NewURL(t, os.Getenv("CLOUDBUS_AMQP_URL"))
//	// connect through url ...
//	p.Cut()  // the broker "dies": every connection is reset
//	p.Heal() // the broker is back: new connections go through
//
// The faults are [Proxy.Cut], [Proxy.Stall] and [Proxy.SetLatency];
// [Proxy.Heal] undoes them. A clean close (FIN) on one side is passed on
// to the other, and a pair closes once both directions are done; an error
// on either side resets both. The proxy listens on
// 127.0.0.1 and dials the target for every connection it accepts, within
// 5 s; a failed dial resets the client's connection.
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

const dialTimeout = 5 * time.Second

// lineChunks bounds the reads a delayed direction holds (8 MiB); past it
// the reader waits, as on a full socket buffer.
const lineChunks = 256

// Latency is a delay the proxy adds to one direction's bytes; the zero
// value adds none.
type Latency struct {
	// Delay is how long each byte is held at least.
	Delay time.Duration
	// Jitter adds a random part of [0, Jitter) to each read's delay; bytes
	// keep their order.
	Jitter time.Duration
}

type direction int

const (
	toTarget direction = iota // client to target
	toClient                  // target to client
)

// Proxy is a TCP proxy between a test's code and a real server, made by
// [New], [NewURL] or [Listen]. It is safe for concurrent use.
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

// dialFunc dials the target; tests replace it.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

type pair struct {
	client, upstream net.Conn
	cut              chan struct{} // closed by reset: wakes stalled pipes
	once             sync.Once
	open             atomic.Int32 // directions not yet finished
}

// New starts a proxy to target ("host:port"), closed when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := listen(target, nil)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewURL starts a proxy to the host and port of rawURL and returns rawURL
// rewritten to go through it, keeping user, password, path and query. It
// fails t, hiding the password, if rawURL names no host or port. A TLS
// client then sees the server name 127.0.0.1 and must be told the real
// one. The proxy is closed when the test ends.
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

// Listen starts a proxy outside a test; the caller closes it.
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

// redact hides the password, query and opaque part of rawURL.
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

// Addr returns the proxy's address, "127.0.0.1:port".
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

// serve forwards c to the target, unless a Cut comes first.
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

// chunk is one read in a delay line; nil data is the FIN.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst; once dir is delayed, it hands reads to a delay
// line (deliver), so they keep their order.
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

// deliver writes a delay line's reads to dst when due and not stalled.
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

// finish passes a FIN on and closes the pair once both directions end.
func (p *Proxy) finish(pr *pair, dst net.Conn) {
	closeWrite(dst)
	if pr.open.Add(-1) == 0 {
		p.drop(pr, false)
	}
}

func (p *Proxy) latencyOf(dir direction) Latency {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency[dir]
}

// waitUnstalled waits while stalled; false if the pair was cut.
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

// drop forgets pr and resets it (abort) or closes it.
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

func (pr *pair) reset() {
	pr.once.Do(func() {
		close(pr.cut)
		reset(pr.client)
		reset(pr.upstream)
	})
}

// Cut resets every connection (an RST, no FIN, as a dead peer looks),
// including one still dialing the target, which is reset when its dial
// completes even if Heal came in between. Until Heal, new connections are
// accepted and reset at once without dialing: a client sees "connection
// reset", not "refused". It does not block.
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

// Stall stops forwarding bytes in both directions, keeping every socket
// open, until Heal, as a hung server looks: reads wait until their
// deadlines, and writes too once the socket buffers are full. Bytes
// already read are delivered after Heal, in order.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// SetLatency delays the bytes read from now on, on every connection:
// toTarget those from the client, toClient the target's. Each read is held
// its direction's Delay plus a random part of Jitter, never before the
// read before it, in a delay line: reads in flight overlap, so throughput
// does not fall with the delay (up to 8 MiB in flight per direction). A
// round trip gains both delays: 50 ms with a 25 ms jitter each way adds
// 100 to 150 ms. Zero values, or Heal, remove the latency; reads already
// held keep their time, and a stalled proxy holds them until Heal.
func (p *Proxy) SetLatency(toTarget, toClient Latency) {
	p.mu.Lock()
	p.latency = [2]Latency{toTarget, toClient}
	p.mu.Unlock()
}

// Heal undoes Cut, Stall and SetLatency: new connections go through,
// stalled bytes flow and later reads are not delayed. Connections reset
// by Cut stay reset.
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

// Close stops listening, aborts dials, resets every connection and waits
// for the proxy's goroutines. It is idempotent.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.cancel()
	p.Cut()
	p.wg.Wait()
}

// reset closes c with an RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// closeWrite sends a FIN on c, or closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
