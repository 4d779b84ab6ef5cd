package amqpbus_test

import (
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/bustest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// brokerURL returns CLOUDBUS_AMQP_URL. Without it the test skips, naming
// the variable, or fails under CI=true, where the broker must be there.
func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("CLOUDBUS_AMQP_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CLOUDBUS_AMQP_URL is not set, and CI=true requires the RabbitMQ tests to run")
		}
		t.Skip("set CLOUDBUS_AMQP_URL (e.g. amqp://guest:guest@127.0.0.1:5672/) to run the RabbitMQ tests")
	}
	return u
}

// env dials transports that record their TCP connections, so that Kill
// can drop them without a goodbye, as SIGKILL would.
type env struct {
	url   string
	mu    sync.Mutex
	conns map[string][]net.Conn
}

func newEnv(t *testing.T) *env {
	return &env{url: brokerURL(t), conns: map[string][]net.Conn{}}
}

func (e *env) dial(t testing.TB, node string, cfg amqpbus.Config) *amqpbus.Transport {
	t.Helper()
	cfg.URL = e.url
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = "cloudbus-test-" + node[:min(8, len(node))]
	}
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err == nil {
			e.mu.Lock()
			e.conns[node] = append(e.conns[node], c)
			e.mu.Unlock()
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

func (e *env) Transport(t *testing.T, node string) bus.Transport {
	return e.dial(t, node, amqpbus.Config{})
}

func (e *env) Kill(t *testing.T, node string) {
	e.mu.Lock()
	conns := e.conns[node]
	delete(e.conns, node)
	e.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset, no FIN: like a killed process
		}
		_ = c.Close()
	}
}

func TestConformance(t *testing.T) {
	brokerURL(t)
	bustest.Run(t, bustest.Harness{
		Features: bustest.Features{CanKill: true, KilledQueuesPersist: true, NoRouteWithin: time.Second},
		New:      func(t *testing.T) bustest.Env { return newEnv(t) },
	})
}
