package amqpbus_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy a test owns between a transport and the broker,
// to inject faults without disturbing the shared broker: cut (reset every
// connection and refuse new ones), stall (stop forwarding, keep sockets
// open) and heal.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	refuse  bool
	stalled chan struct{} // non-nil while stalled; closed on heal
	wg      sync.WaitGroup
}

// newProxy listens on 127.0.0.1 and forwards to the broker of brokerURL;
// it returns the proxy and brokerURL rewritten to go through it.
func newProxy(t testing.TB, brokerURL string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatalf("proxy: parse broker URL: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &proxy{t: t, ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) accept() {
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
func (p *proxy) pipe(src, dst net.Conn) {
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

// cut resets every connection and refuses new ones until heal.
func (p *proxy) cut() {
	p.mu.Lock()
	p.refuse = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		reset(c)
	}
}

// stall stops forwarding bytes (sockets stay open) until heal.
func (p *proxy) stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// heal accepts and forwards again.
func (p *proxy) heal() {
	p.mu.Lock()
	p.refuse = false
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.heal()
	p.cut()
	p.wg.Wait()
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
