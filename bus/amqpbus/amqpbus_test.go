package amqpbus_test

import (
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/bustest"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env dials transports that record their TCP connections, so that Kill
// can drop them without a goodbye, as SIGKILL would; a killed transport
// cannot reconnect (its dials are refused), as a dead process would not.
type env struct {
	url   string
	mu    sync.Mutex
	links map[string][]*link // by node

	// viaProxy, when set, sends each node's connections through a proxy
	// of its own, so that Cut and Heal act on one node.
	viaProxy bool
	proxies  map[string]*proxy.Proxy
}

// link is one transport's connections and whether it was killed.
type link struct {
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func newEnv(t *testing.T) *env {
	return &env{url: testenv.AMQPURL(t), links: map[string][]*link{}}
}

func (e *env) dial(t testing.TB, node string, cfg amqpbus.Config) *amqpbus.Transport {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = e.url
		if e.viaProxy {
			e.mu.Lock()
			p := e.proxies[node]
			if p == nil {
				p, _ = proxy.NewURL(t, e.url)
				e.proxies[node] = p
			}
			e.mu.Unlock()
			cfg.URL = proxiedURL(t, e.url, p)
		}
	}
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = "cloudbus-test-" + node[:min(8, len(node))]
	}
	l := &link{}
	e.mu.Lock()
	e.links[node] = append(e.links[node], l)
	e.mu.Unlock()
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.killed {
			return nil, errors.New("test: this node was killed")
		}
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err == nil {
			l.conns = append(l.conns, c)
		}
		return c, err
	}
	tr, err := amqpbus.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func (e *env) Transport(t *testing.T, node string) driver.Transport {
	return e.dial(t, node, amqpbus.Config{})
}

func (e *env) Kill(t *testing.T, node string) {
	e.mu.Lock()
	links := e.links[node]
	delete(e.links, node)
	e.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		l.killed = true
		for _, c := range l.conns {
			reset(c) // no FIN: like a killed process
		}
		l.mu.Unlock()
	}
}

// Cut cuts node's connections off the broker at its proxy.
func (e *env) Cut(t *testing.T, node string) { e.proxyOf(t, node).Cut() }

// Heal undoes Cut.
func (e *env) Heal(t *testing.T, node string) { e.proxyOf(t, node).Heal() }

func (e *env) proxyOf(t *testing.T, node string) *proxy.Proxy {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.proxies[node]
	if p == nil {
		t.Fatalf("node %s has no proxy: it never dialed", node)
	}
	return p
}

// proxiedURL returns rawURL with its host replaced by p's address.
func proxiedURL(t testing.TB, rawURL string, p *proxy.Proxy) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse the broker URL: %v", err)
	}
	u.Host = p.Addr()
	return u.String()
}

func TestConformance(t *testing.T) {
	testenv.AMQPURL(t)
	bustest.Run(t, bustest.Harness{
		Features: bustest.Features{CanKill: true, KilledQueuesPersist: true, NoRouteWithin: time.Second, CanCut: true},
		New: func(t *testing.T) bustest.Env {
			e := newEnv(t)
			e.viaProxy, e.proxies = true, map[string]*proxy.Proxy{}
			return e
		},
	})
}

// reset closes c without a FIN, as a killed process's socket ends.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
