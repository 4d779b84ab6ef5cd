package servicetest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy a test owns between its code and a real server (a
// broker, a database), to inject network faults without disturbing the
// shared server that other tests use: [Proxy.Cut] resets every connection
// and refuses new ones, [Proxy.Stall] stops forwarding while keeping the
// sockets open, [Proxy.Heal] undoes both. It listens on 127.0.0.1.
//
// A Proxy is safe for concurrent use; it is closed when the test ends.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	refuse  bool
	stalled chan struct{} // non-nil while stalled; closed on heal
	wg      sync.WaitGroup
}

// NewProxy starts a proxy to target ("host:port") and closes it when the
// test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servicetest: proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// NewURLProxy starts a proxy to the host of rawURL and returns it with
// rawURL rewritten to go through it. Credentials, path and query are
// kept.
func NewURLProxy(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		t.Fatalf("servicetest: proxy: %q has no host to proxy", redact(rawURL))
	}
	p := NewProxy(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// Addr returns the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			reset(c)
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies src to dst, waiting while the proxy is stalled.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer reset(dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stall := p.stalled
			p.mu.Unlock()
			if stall != nil {
				<-stall
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				reset(src)
			}
			return
		}
	}
}

// Cut resets every connection (no FIN, as a dead peer or a broken network
// looks) and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.refuse = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		reset(c)
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

// Heal accepts and forwards again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.refuse = false
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection; it waits for its
// goroutines. It is idempotent.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Heal()
	p.Cut()
	p.wg.Wait()
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
