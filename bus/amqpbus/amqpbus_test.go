package amqpbus_test

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
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
	url   string // one broker URL, or a cluster's, comma-separated
	mu    sync.Mutex
	links map[string][]*link // by node

	// queueType is the transports' Config.QueueType.
	queueType amqpbus.QueueType

	// viaProxy, when set, sends each node's connections through proxies
	// of its own, one per broker, so that Cut and Heal act on one node.
	viaProxy bool
	proxies  map[string][]*proxy.Proxy
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
			urls := amqpbus.SplitURLs(e.url)
			e.mu.Lock()
			ps := e.proxies[node]
			if ps == nil {
				for _, u := range urls {
					p, _ := proxy.NewURL(t, u)
					ps = append(ps, p)
				}
				e.proxies[node] = ps
			}
			e.mu.Unlock()
			for i, u := range urls {
				urls[i] = proxiedURL(t, u, ps[i])
			}
			cfg.URL = strings.Join(urls, ",")
		}
	}
	if cfg.QueueType == "" {
		cfg.QueueType = e.queueType
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
	if cfg.Logger == nil {
		// The transport's warnings (a connection lost, a probe that went
		// unanswered) in the output of a test that fails.
		cfg.Logger = slog.New(slog.NewTextHandler(testOutput(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", node[:min(8, len(node))])
	}
	tr, err := amqpbus.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// testOutput returns t's output, dropping what is written once t's
// cleanups (the transports' Close among them: registered later, they
// run first) are over.
func testOutput(t testing.TB) io.Writer {
	w := &lateWriter{w: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

type lateWriter struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (w *lateWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.w.Write(p)
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

// Cut cuts node's connections off every broker at its proxies.
func (e *env) Cut(t *testing.T, node string) {
	for _, p := range e.proxiesOf(t, node) {
		p.Cut()
	}
}

// Heal undoes Cut.
func (e *env) Heal(t *testing.T, node string) {
	for _, p := range e.proxiesOf(t, node) {
		p.Heal()
	}
}

func (e *env) proxiesOf(t *testing.T, node string) []*proxy.Proxy {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := e.proxies[node]
	if ps == nil {
		t.Fatalf("node %s has no proxy: it never dialed", node)
	}
	return ps
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
	runConformance(t, testenv.AMQPURL, amqpbus.QueueClassic)
}

// TestConformanceQuorum runs the suite with quorum queues on the single
// broker (a quorum queue of one member).
func TestConformanceQuorum(t *testing.T) {
	testenv.AMQPURL(t)
	runConformance(t, testenv.AMQPURL, amqpbus.QueueQuorum)
}

// TestConformanceCluster runs the suite on a 3-node RabbitMQ cluster
// (.ci/rabbitmq-cluster), each transport given every node's URL, with
// both queue types.
func TestConformanceCluster(t *testing.T) {
	testenv.AMQPCluster(t)
	for _, qt := range []amqpbus.QueueType{amqpbus.QueueQuorum, amqpbus.QueueClassic} {
		t.Run(string(qt), func(t *testing.T) { runConformance(t, testenv.AMQPCluster, qt) })
	}
}

func runConformance(t *testing.T, url func(testing.TB) string, qt amqpbus.QueueType) {
	bustest.Run(t, bustest.Harness{
		Features: bustest.Features{CanKill: true, KilledQueuesPersist: true, NoRouteWithin: time.Second, CanCut: true},
		New: func(t *testing.T) bustest.Env {
			e := &env{url: url(t), links: map[string][]*link{}, queueType: qt}
			e.viaProxy, e.proxies = true, map[string][]*proxy.Proxy{}
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
