package amqpbus_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// TestConsumerResumesOnceItsQueueIsBack: a consumer whose queue is
// missing when the transport reconnects (another process declares it,
// and it went meanwhile, as a queue on a lost broker node does) fails to
// resume on a connection that stays up: the broker closes the channel
// only. The transport keeps trying, and the consumer gets the queue's
// messages once the queue is back, instead of staying gone until the
// connection drops again.
func TestConsumerResumesOnceItsQueueIsBack(t *testing.T) {
	url := testenv.AMQPURL(t)
	adm, q := adminQueue(t, url)

	p, tr, logs := dialProxied(t, url, amqpbus.Config{})
	got := consumeBodies(t, tr, q) // q is not tr's: tr does not declare it again

	p.Cut()
	require.Eventually(t, func() bool { return tr.Broker() == "" }, 10*time.Second, 10*time.Millisecond, "the transport sees its connection lost")
	require.NoError(t, adm.DeleteQueue(t.Context(), q))
	p.Heal()
	require.Eventually(t, func() bool { return tr.Broker() != "" }, 10*time.Second, 10*time.Millisecond, "the transport reconnects")
	require.Eventually(t, func() bool { return logs.has("consumer not restored") }, 10*time.Second, 10*time.Millisecond,
		"the consumer's resume found no queue")
	require.NoError(t, adm.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	require.NoError(t, adm.Publish(t.Context(), q, []byte(`"back"`)))
	awaitBody(t, got, `"back"`, "the consumer did not resume once its queue was back: its messages wait for a consumer that is gone while the connection stays up")
	require.Equal(t, uint64(1), tr.ConnectionsLost(), "the connection stayed up after the reconnect")
}

// TestConsumerOpenedAcrossAReconnectResumes: a consumer whose channel
// opened on a connection that was lost, and replaced, before Consume
// counted it among the consumers to resume (the reconnect resumed the
// others without it) is resumed on the new connection, instead of
// waiting on the closed channel of the old one for good while its
// queue fills.
func TestConsumerOpenedAcrossAReconnectResumes(t *testing.T) {
	url := testenv.AMQPURL(t)
	adm, q := adminQueue(t, url)

	p, tr, logs := dialProxied(t, url, amqpbus.Config{})

	amqpbus.OnConsumeOpened(func() { reconnectNow(t, p, tr, logs) })
	t.Cleanup(func() { amqpbus.OnConsumeOpened(nil) })
	got := consumeBodies(t, tr, q)
	amqpbus.OnConsumeOpened(nil)

	require.NoError(t, adm.Publish(t.Context(), q, []byte(`"after"`)))
	awaitBody(t, got, `"after"`, "the consumer opened across the reconnect was not resumed: its queue fills with no consumer while the connection stays up")
	require.Equal(t, uint64(1), tr.ConnectionsLost(), "the connection stayed up after the reconnect")
}

// TestQueueDeclaredAcrossAReconnectIsDeclaredAgain: a temporary queue
// whose declaration the broker answered on a connection that was lost,
// and replaced, before DeclareQueue recorded it (the reconnect declared
// the others again without it) is declared on the new connection all
// the same: a consumer of it gets its messages, instead of failing with
// no such queue.
func TestQueueDeclaredAcrossAReconnectIsDeclaredAgain(t *testing.T) {
	url := testenv.AMQPURL(t)
	p, tr, logs := dialProxied(t, url, amqpbus.Config{})

	amqpbus.OnDeclared(func() { reconnectNow(t, p, tr, logs) })
	t.Cleanup(func() { amqpbus.OnDeclared(nil) })
	q := "amqpbus-test-redeclare-" + message.NewUUID()[:8]
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	amqpbus.OnDeclared(nil)

	got := consumeBodies(t, tr, q) // the queue exists on the new connection
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`"after"`)))
	awaitBody(t, got, `"after"`, "no delivery on the queue declared across the reconnect")
	require.Equal(t, uint64(1), tr.ConnectionsLost(), "the connection stayed up after the reconnect")
}

// TestRefusedDeclarationDoesNotBlockReconnects: a declaration the broker
// refuses (the queue exists with the other queue type) while the
// connection is lost and replaced is forgotten all the same: the
// reconnects that tried to declare it again succeed once it is, instead
// of failing on it for good.
func TestRefusedDeclarationDoesNotBlockReconnects(t *testing.T) {
	url := testenv.AMQPURL(t)
	_, q := adminQueue(t, url) // classic
	p, tr, logs := dialProxied(t, url, amqpbus.Config{QueueType: amqpbus.QueueQuorum})

	amqpbus.OnDeclared(func() {
		p.Cut()
		require.Eventually(t, func() bool { return tr.Broker() == "" }, 10*time.Second, 10*time.Millisecond, "the transport sees its connection lost")
		p.Heal()
		require.Eventually(t, func() bool { return logs.has("reconnect failed") }, 10*time.Second, 10*time.Millisecond,
			"a reconnect tries to declare the refused queue again, and fails on it")
	})
	t.Cleanup(func() { amqpbus.OnDeclared(nil) })
	err := tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable})
	amqpbus.OnDeclared(nil)
	require.ErrorIs(t, err, amqpbus.ErrQueueType)

	require.Eventually(t, func() bool { return tr.Broker() != "" }, 10*time.Second, 10*time.Millisecond,
		"the transport reconnects once the refused declaration is forgotten")
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`{}`)))
}

// adminQueue declares a durable queue on a transport of its own, which
// it returns, and deletes it when the test ends.
func adminQueue(t *testing.T, url string) (*amqpbus.Transport, string) {
	t.Helper()
	adm, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: url, ConnectionName: "amqpbus test admin"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = adm.Close() })
	q := "amqpbus-test-resume-" + message.NewUUID()[:8]
	require.NoError(t, adm.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = waitDelete(context.Background(), adm, q) })
	return adm, q
}

// dialProxied dials the broker at url with cfg through a proxy the test
// owns, reconnecting within 200 ms, and keeps the transport's log
// messages.
func dialProxied(t *testing.T, url string, cfg amqpbus.Config) (*proxy.Proxy, *amqpbus.Transport, *logLines) {
	t.Helper()
	p, u := proxy.NewURL(t, url)
	logs := &logLines{}
	cfg.URL, cfg.ReconnectMax, cfg.Logger = u, 200*time.Millisecond, slog.New(logs)
	tr, err := amqpbus.Dial(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return p, tr, logs
}

// reconnectNow cuts the transport's connection and returns once it has
// reconnected, declared its queues again and resumed its consumers.
func reconnectNow(t *testing.T, p *proxy.Proxy, tr *amqpbus.Transport, logs *logLines) {
	t.Helper()
	p.Cut()
	require.Eventually(t, func() bool { return tr.Broker() == "" }, 10*time.Second, 10*time.Millisecond, "the transport sees its connection lost")
	p.Heal()
	require.Eventually(t, func() bool { return logs.has("reconnected to the broker") }, 10*time.Second, 10*time.Millisecond,
		"the transport reconnects")
}

// consumeBodies consumes q on tr, acknowledging each delivery, and
// returns the bodies.
func consumeBodies(t *testing.T, tr *amqpbus.Transport, q string) <-chan string {
	t.Helper()
	got := make(chan string, 4)
	_, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{}, func(d driver.Delivery) {
		got <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	return got
}

// awaitBody waits up to 10 s for the next body on got, which must be
// want; failing says why, in the words of the test.
func awaitBody(t *testing.T, got <-chan string, want, failure string) {
	t.Helper()
	select {
	case b := <-got:
		require.Equal(t, want, b)
	case <-time.After(10 * time.Second):
		t.Fatal(failure)
	}
}

// logLines is a slog.Handler that keeps the messages logged.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }

func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

// has reports whether a message containing s was logged.
func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// count reports how many messages containing s were logged.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}
